"""mmpar's root registries, in one leaf module.

Everything may import this module without an import cycle: it imports only the
:class:`Registry` class and torch. Each registry is filled by the modules that
define what it holds (the wrappers register themselves into
:data:`MODULE_WRAPPERS`, the datasets into :data:`DATASETS`, and so on), so a
name is known once its defining module is imported.
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DataParallel, DistributedDataParallel

from mmpar.registry.registry import Registry

__all__ = ["DATASETS", "MODELS", "MODULE_WRAPPERS", "OPTIMIZERS", "TRANSFORMS"]

#: Classes whose instances wrap a model in ``.module``. Register your own wrapper
#: here (or in a child registry: ``Registry("x", parent=MODULE_WRAPPERS, scope="x")``)
#: so that :func:`mmpar.is_module_wrapper` recognises it. MMDataParallel and
#: MMDistributedDataParallel register themselves.
MODULE_WRAPPERS = Registry("module wrapper")
MODULE_WRAPPERS.register_module(module=DataParallel)
MODULE_WRAPPERS.register_module(module=DistributedDataParallel)

#: Datasets, e.g. ``DATASETS.build(dict(type="SyntheticShapes", num_samples=64))``.
DATASETS = Registry("dataset")

#: Pipeline steps, e.g. ``TRANSFORMS.build(dict(type="Resize", img_scale=(1333, 800)))``.
TRANSFORMS = Registry("transform")

#: Models, e.g. ``MODELS.build(dict(type="TinyDet", num_classes=3))``.
MODELS = Registry("model")

#: Optimizers; ``torch.optim``'s SGD, Adam and AdamW are registered.
OPTIMIZERS = Registry("optimizer")
for _cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
    OPTIMIZERS.register_module(module=_cls)
