"""What every stand-in op shares: torchvision's kernels, and how an op says no.

mmpar's ops are built on ``torchvision.ops`` and plain torch; mmpar compiles
nothing. torchvision is optional (the ``mmcv-ops`` extra): an op that needs it
imports it through :func:`torchvision_ops`, which says how to install it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

__all__ = ["INSTALL_HINT", "UnsupportedOpError", "torchvision_ops", "unsupported"]

INSTALL_HINT = (
    'pip install -e ".[mmcv-ops]" (or pip install torchvision, the build that matches your torch)'
)


class UnsupportedOpError(NotImplementedError):
    """An op, or a mode of an op, that mmpar's stand-in for ``mmcv.ops`` does not supply."""


def unsupported(op: str, param: str, found: Any, supported: str) -> UnsupportedOpError:
    """The one-line error for a parameter value that mmpar's op does not support.

    Args:
        op: The op's mmcv name, e.g. ``"nms"``.
        param: The parameter, e.g. ``"offset"``.
        found: The value that was given.
        supported: What mmpar supports, e.g. ``"offset=0"``.

    Returns:
        The error, for the caller to raise.
    """
    return UnsupportedOpError(
        f"mmcv.ops.{op}: {param}={found!r} is not supported by mmpar's ops (only {supported}); "
        f"change {param}, or install an mmcv-full whose compiled ops load for your torch "
        "(then mmpar keeps mmcv's ops)"
    )


def torchvision_ops() -> ModuleType:
    """``torchvision.ops``, with its compiled kernels loaded.

    Raises:
        ImportError: torchvision is not installed, or its kernels do not load
            for this torch (a torchvision built for another torch).
    """
    try:
        import torchvision.ops as ops
    except ImportError as err:
        raise ImportError(
            f"mmpar's mmcv.ops need torchvision, which could not be imported ({err}); "
            + INSTALL_HINT
        ) from err
    import torch

    if not hasattr(torch.ops.torchvision, "nms"):
        raise ImportError(
            "mmpar's mmcv.ops need torchvision's compiled kernels, which did not load "
            "(torchvision::nms does not exist: this torchvision was built for another torch); "
            + INSTALL_HINT
        )
    return ops
