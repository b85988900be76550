"""mmpar's root registries, in one leaf module.

Everything may import this module without an import cycle: it imports only the
:class:`Registry` class and torch. Each registry is filled by the modules that
define what it holds (the wrappers register themselves into
:data:`MODULE_WRAPPERS`, the datasets into :data:`DATASETS`, and so on).

The packages that fill :data:`MODELS`, :data:`DATASETS`, :data:`TRANSFORMS` and
:data:`OPTIMIZERS` are named in :data:`LOCATIONS`, as strings: each registry imports
them the first time it misses a name or is listed, so ``from mmpar import MODELS;
MODELS.build(dict(type="TinyDet"))`` works without importing :mod:`mmpar.models`
first, and without ``import mmpar`` importing every model. The import is by name
on purpose: a static import would make the registry depend on the packages that
depend on it (tests/test_layout.py checks that these names stay here, and that
each is a package allowed to import the registry).
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DataParallel, DistributedDataParallel

from mmpar.registry.registry import Registry

__all__ = ["DATASETS", "LOCATIONS", "MODELS", "MODULE_WRAPPERS", "OPTIMIZERS", "TRANSFORMS"]

#: Registry name -> the mmpar packages that register into it, imported on first need.
LOCATIONS = {
    "dataset": ("mmpar.data",),
    "transform": ("mmpar.data",),
    "model": ("mmpar.models",),
    "optimizer": ("mmpar.models",),
}

#: Classes whose instances wrap a model in ``.module``. Register your own wrapper
#: here (or in a child registry: ``Registry("x", parent=MODULE_WRAPPERS, scope="x")``)
#: so that :func:`mmpar.is_module_wrapper` recognises it. MMDataParallel and
#: MMDistributedDataParallel register themselves.
MODULE_WRAPPERS = Registry("module wrapper")
MODULE_WRAPPERS.register_module(module=DataParallel)
MODULE_WRAPPERS.register_module(module=DistributedDataParallel)

#: Datasets, e.g. ``DATASETS.build(dict(type="SyntheticShapes", num_samples=64))``.
DATASETS = Registry("dataset", locations=LOCATIONS["dataset"])

#: Pipeline steps, e.g. ``TRANSFORMS.build(dict(type="Resize", img_scale=(1333, 800)))``.
TRANSFORMS = Registry("transform", locations=LOCATIONS["transform"])

#: Models, e.g. ``MODELS.build(dict(type="TinyDet", num_classes=3))``.
MODELS = Registry("model", locations=LOCATIONS["model"])

#: Optimizers; ``torch.optim``'s SGD, Adam and AdamW are registered.
OPTIMIZERS = Registry("optimizer", locations=LOCATIONS["optimizer"])
for _cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
    OPTIMIZERS.register_module(module=_cls)
