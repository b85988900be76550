"""A hook that reports which classes an mmdet 2.x training run used (a test plugin).

``tests/compat/test_mmdet_end_to_end.py`` trains with mmdet's own
``tools/train.py``, which it cannot edit; its config loads this module through
mmcv's ``custom_imports`` (the repository root is on ``PYTHONPATH``) and adds
``dict(type="MmparReportHook")`` to ``custom_hooks``. At the first training
iteration each rank writes ``<work_dir>/mmpar_report_rank<r>.json``:

- ``model_wrapper``: the class of ``runner.model`` (``module.qualname``);
- ``batch_img``: the class of the batch's ``img`` (a ``DataContainer``);
- ``collate``: the function the train DataLoader collates with;
- ``num_workers``: the train DataLoader's worker processes;
- ``ops``: ``{submodule path: class}`` for every submodule of the detector
  whose class comes from ``mmcv.ops`` (as its ``__module__`` says), e.g. the
  RoI extractor's ``RoIAlign``;
- ``world_size``, ``rank``.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from mmcv.runner import HOOKS, Hook, get_dist_info

__all__ = ["MmparReportHook"]


def _name(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _function_name(fn: Any) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


@HOOKS.register_module()
class MmparReportHook(Hook):
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
            name: _name(module)
            for name, module in detector.named_modules()
            if name and _name(module).startswith(("mmcv.ops", "mmpar.compat.ops"))
        }
        loader = runner.data_loader
        report = dict(
            rank=rank,
            world_size=world_size,
            model_wrapper=_name(runner.model),
            batch_img=_name(runner.data_batch["img"]),
            collate=_function_name(loader.collate_fn),
            num_workers=loader.num_workers,
            ops=ops,
        )
        path = os.path.join(runner.work_dir, f"mmpar_report_rank{rank}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
