"""Argument checks shared by the point ops: one-line errors naming the op and parameter."""

from __future__ import annotations

from typing import Any, List, Sequence

import torch
from torch import Tensor

__all__ = [
    "check_batch_cnt",
    "check_index",
    "check_index_range",
    "check_like",
    "check_points",
    "kernel_xyz",
]


def _found(value: Any) -> str:
    return str(value.dtype) if isinstance(value, Tensor) else type(value).__name__


def _check_shape(op: str, name: str, value: Tensor, layout: str) -> None:
    dims = [d.strip() for d in layout.strip("()").split(",")]
    wrong = value.dim() != len(dims) or any(
        d.isdigit() and value.shape[i] != int(d) for i, d in enumerate(dims)
    )
    if wrong:
        raise ValueError(f"{op}: {name} must have shape {layout}, found {tuple(value.shape)}")


def check_points(op: str, name: str, value: Any, layout: str) -> Tensor:
    """``value`` if it is a floating-point tensor of ``layout``'s rank, else an error.

    Args:
        op: The op's name for the message, e.g. ``"mmcv.ops.knn"``.
        name: The argument's name.
        value: The argument.
        layout: Its shape in words, one letter or digit per dimension, e.g. ``"(B, N, 3)"``;
            a digit is a size the dimension must have.

    Raises:
        TypeError: not a floating-point tensor.
        ValueError: another rank, or a fixed size differs.
    """
    if not isinstance(value, Tensor) or not value.is_floating_point():
        raise TypeError(f"{op}: {name} must be a floating-point tensor, found {_found(value)}")
    _check_shape(op, name, value, layout)
    return value


def kernel_xyz(op: str, name: str, rows: Tensor) -> Tensor:
    """The ``(B, N, 3)`` points that mmcv's point kernels read from a ``(B, N, C)`` buffer.

    The kernels read point ``i`` of cloud ``b`` at offset ``(b * N + i) * 3`` of the
    contiguous buffer, whatever ``C`` is: with ``C > 3`` (mmdet3d's DGCNN features, SASSD's
    points with their intensity) they read the buffer's first ``B * N * 3`` values as
    ``(B, N, 3)`` points, and models trained with mmcv-full saw those.

    Args:
        op: The op's name for the message.
        name: The argument's name.
        rows: ``(B, N, C)`` float.

    Raises:
        ValueError: ``C < 3`` (mmcv's kernels read past the buffer).
    """
    b, n, dims = rows.shape
    if dims == 3:
        return rows
    if dims < 3:
        raise ValueError(
            f"{op}: {name} must have 3 coordinates per point (or more, read as mmcv reads "
            f"them), found {dims}"
        )
    return rows.contiguous().view(-1)[: b * n * 3].view(b, n, 3)


def check_like(op: str, name: str, value: Tensor, ref_name: str, ref: Tensor) -> None:
    """Raises unless ``value`` has ``ref``'s dtype and device.

    Raises:
        TypeError: another dtype.
        ValueError: another device.
    """
    if value.dtype != ref.dtype:
        raise TypeError(
            f"{op}: {name} must have the dtype of {ref_name} ({ref.dtype}), found {value.dtype}"
        )
    if value.device != ref.device:
        raise ValueError(
            f"{op}: {name} must be on the device of {ref_name} ({ref.device}), found {value.device}"
        )


def check_index(op: str, name: str, value: Any, layout: str, device: torch.device) -> Tensor:
    """``value`` if it is an int32 or int64 tensor of ``layout``'s rank on ``device``.

    Raises:
        TypeError: not a tensor of int32 or int64.
        ValueError: another rank, a fixed size differs, or another device.
    """
    if not isinstance(value, Tensor) or value.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: {name} must be an int32 (or int64) tensor, found {_found(value)}")
    _check_shape(op, name, value, layout)
    if value.device != device:
        raise ValueError(f"{op}: {name} must be on {device}, found {value.device}")
    return value


def check_index_range(op: str, name: str, index: Tensor, upper: int) -> None:
    """Raises ``ValueError`` unless every entry of ``index`` is in ``[0, upper)``."""
    if index.numel() == 0:
        return
    low, high = int(index.min()), int(index.max())
    if low < 0 or high >= upper:
        raise ValueError(
            f"{op}: {name} must be in [0, {upper}) (the points it indexes), "
            f"found values in [{low}, {high}]"
        )


def check_batch_cnt(op: str, name: str, value: Any, total: int, of: str) -> List[int]:
    """The counts of a stacked batch, ``value`` an int32 ``(B,)`` tensor summing to ``total``.

    Args:
        op: The op's name for the message.
        name: The argument's name, e.g. ``"xyz_batch_cnt"``.
        value: The argument.
        total: The rows of the stacked tensor it counts.
        of: That tensor's name, for the message.

    Returns:
        The counts as Python ints.

    Raises:
        TypeError: not an int32 tensor (mmcv asserts ``torch.int``).
        ValueError: not 1-D, a negative count, or a sum other than ``total``.
    """
    if not isinstance(value, Tensor) or value.dtype != torch.int32:
        raise TypeError(f"{op}: {name} must be an int32 tensor, found {_found(value)}")
    if value.dim() != 1:
        raise ValueError(f"{op}: {name} must have shape (B,), found {tuple(value.shape)}")
    counts: Sequence[int] = value.tolist()
    if any(c < 0 for c in counts) or sum(counts) != total:
        raise ValueError(
            f"{op}: {name} must be counts >= 0 adding up to the {total} rows of {of}, "
            f"found {list(counts)}"
        )
    return list(counts)
