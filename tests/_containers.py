"""Test helpers: does a structure still hold a DataContainer, are two batches the same; a
train_step insisting it holds no container."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mmpar.data_container import DataContainer, container_classes


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


def assert_same(a: Any, b: Any) -> None:
    """``a`` and ``b`` hold the same containers (flags included), tensors (dtype, shape,
    values, NaN equal to NaN), arrays and values, in the same structure."""
    assert type(a) is type(b)
    if isinstance(a, DataContainer):
        for flag in ("stack", "padding_value", "cpu_only", "pad_dims", "size_divisor"):
            assert_same(getattr(a, flag), getattr(b, flag))
        assert_same(a.data, b.data)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    elif isinstance(a, float):
        assert a == b or (a != a and b != b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b
