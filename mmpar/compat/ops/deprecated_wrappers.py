"""mmcv's ``Conv2d``, ``ConvTranspose2d``, ``Linear`` and ``MaxPool2d`` under ``mmcv.ops``.

mmcv 1.x re-exports its empty-tensor-safe layers from ``mmcv.cnn`` here, for old
imports. They are mmcv's own pure-Python classes, so they are mmcv's, looked up
on first access: this module imports without mmcv.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Conv2d", "ConvTranspose2d", "Linear", "MaxPool2d"]  # noqa: F822 (see __getattr__)


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from mmcv.cnn.bricks import wrappers

    return getattr(wrappers, name)
