"""A hook that reports which classes an mmdet3d 1.x training run used (a test plugin).

``tests/compat/test_mmdet3d_end_to_end.py`` trains with mmdet3d's own
``tools/train.py``; its configs load this module through mmcv's
``custom_imports`` and add ``dict(type="Mmdet3dReportHook")`` to
``custom_hooks``. At the first training iteration each rank writes
``<work_dir>/mmpar_report_rank<r>.json``:

- ``model_wrapper``: the class of ``runner.model`` (``module.qualname``);
- ``batch_points``: the class of the batch's ``points`` (a ``DataContainer``);
- ``collate``: the function the train DataLoader collates with;
- ``ops``: ``{submodule path: class}`` for every submodule of the detector whose
  class comes from ``mmcv.ops`` or mmpar's ops (as its ``__module__`` says): the
  voxelization layer, the sparse convolutions of SECOND's middle encoder;
- ``world_size``, ``rank``.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from mmcv.runner import HOOKS, Hook, get_dist_info

__all__ = ["Mmdet3dReportHook"]


def qualified_name(obj: Any) -> str:
    """``module.qualname`` of ``obj``'s class (of ``obj`` itself if it is a class)."""
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def function_name(fn: Any) -> str:
    """``module.qualname`` of a function, through ``functools.partial``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


@HOOKS.register_module()
class Mmdet3dReportHook(Hook):
    """Writes the report described in the module docstring, once per rank."""

    def __init__(self) -> None:
        self.done = False

    def before_train_iter(self, runner: Any) -> None:
        if self.done:
            return
        self.done = True
        rank, world_size = get_dist_info()
        detector = getattr(runner.model, "module", runner.model)
        ops = {
            name: qualified_name(module)
            for name, module in detector.named_modules()
            if name and qualified_name(module).startswith(("mmcv.ops", "mmpar.compat.ops"))
        }
        report = dict(
            rank=rank,
            world_size=world_size,
            model_wrapper=qualified_name(runner.model),
            batch_points=qualified_name(runner.data_batch["points"]),
            collate=function_name(runner.data_loader.collate_fn),
            ops=ops,
        )
        path = os.path.join(runner.work_dir, f"mmpar_report_rank{rank}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
