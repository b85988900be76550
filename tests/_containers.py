"""Test helpers: does a structure still hold a DataContainer; a train_step insisting it does not."""

from __future__ import annotations

from typing import Any

from mmpar.data_container import container_classes


def has_container(obj: Any) -> bool:
    """Whether ``obj`` holds a container of mmpar or (once loaded) mmcv 1.x."""
    if isinstance(obj, container_classes()):
        return True
    if isinstance(obj, dict):
        return any(has_container(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(has_container(v) for v in obj)
    return False


class UnwrappedSteps:
    """Mixin for test models: ``train_step`` in the mmcv style (``self(**data)``)
    that fails if a wrapper handed it a DataContainer."""

    def train_step(self, data: dict, optimizer: Any = None) -> dict:
        if has_container(data):
            raise TypeError("train_step got a DataContainer")
        out = self(**data)
        return dict(
            loss=out["loss"],
            log_vars=dict(loss=out["loss"].item()),
            num_samples=len(data["img_metas"]),
        )
