"""nuScenes-devkit's evaluation configs, picklable, for spawned DataLoader workers.

nuScenes-devkit's ``DetectionConfig`` and ``TrackingConfig`` keep their class names as
``class_range.keys()``, a ``dict_keys`` view, which cannot be pickled. mmdet3d's
``NuScenesDataset`` holds a ``DetectionConfig`` (``eval_detection_configs``), and mmcv's
``init_dist`` sets the ``spawn`` start method, so every distributed run on nuScenes
with DataLoader workers stops when the workers start, pickling the dataset: "cannot
pickle 'dict_keys' object" (mmdet3d #890, UniAD #230, PETR #112, nuScenes-devkit #1155),
on a GPU as on the CPU.

:func:`mend_nuscenes_configs` (called by ``patch_mmcv()``) makes each config's
``class_names`` a list of the same names in the same order, right after the config's
own ``__init__``; the metrics read it only by iteration and membership, which a list
answers as the view did.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable

from mmpar.compat.import_hook import on_import

__all__ = ["CONFIG_CLASSES", "mend_nuscenes_configs"]

#: The devkit's configs, as (module, class) pairs, whose ``class_names`` is a dict view.
CONFIG_CLASSES = (
    ("nuscenes.eval.detection.data_classes", "DetectionConfig"),
    ("nuscenes.eval.tracking.data_classes", "TrackingConfig"),
)


@functools.lru_cache(maxsize=None)  # hooked once, however often patch_mmcv() runs
def mend_nuscenes_configs() -> None:
    """Mend each class of :data:`CONFIG_CLASSES` once its module is imported."""
    for name, cls in CONFIG_CLASSES:
        on_import(name, functools.partial(_mend, cls=cls))


def _mend(module: ModuleType, cls: str) -> None:
    config = getattr(module, cls, None)
    if config is None or getattr(config.__init__, "__mmpar_listed__", False):
        return
    original: Callable[..., None] = config.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        names = getattr(self, "class_names", None)
        if names is not None and not isinstance(names, list):
            self.class_names = list(names)

    __init__.__mmpar_listed__ = True  # type: ignore[attr-defined]
    config.__init__ = __init__
