"""The argument checks of the nms family, and the order boxes are visited in.

Not an mmcv module: :mod:`mmpar.compat.ops.nms` and :mod:`mmpar.compat.ops.suppression.class_nms`
check mmcv's arguments with these. Each check raises one line naming the op
(``mmcv.ops.<op>``), the parameter, what was expected and what was found: a
``TypeError`` for a wrong type, a ``ValueError`` for a wrong value, an
:class:`~mmpar.compat.ops.backend.ArgumentError` (an ``AssertionError`` too) where
mmcv asserts.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from mmpar.compat.ops.backend import ArgumentError, renamed_kwargs, unsupported
from mmpar.compat.ops.suppression.soft_nms_kernel import ranking

__all__ = [
    "ArrayLike",
    "box_score_tensors",
    "check_offset",
    "descending",
    "finite_number",
    "fraction",
    "integer",
    "nms_args",
    "ranking",
    "real_number",
]

ArrayLike = Union[Tensor, np.ndarray]


def real_number(op: str, name: str, value: Any) -> float:
    """``value`` as a float, if it is a real number (a bool is not; a one-number tensor is)."""
    if isinstance(value, Tensor) and value.numel() == 1 and value.dtype != torch.bool:
        value = value.item() if not value.is_complex() else value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"mmcv.ops.{op}: {name} must be a real number, got {type(value).__name__} {value!r}"
        )
    return float(value)


def fraction(op: str, name: str, value: Any) -> float:
    """``value`` as a float in ``[0, 1]``."""
    number = real_number(op, name, value)
    if not 0.0 <= number <= 1.0:  # NaN too
        raise ValueError(f"mmcv.ops.{op}: {name} must be in [0, 1], got {value!r}")
    return number


def finite_number(op: str, name: str, value: Any) -> float:
    number = real_number(op, name, value)
    if not np.isfinite(number):
        raise ValueError(f"mmcv.ops.{op}: {name} must be finite, got {value!r}")
    return number


def integer(op: str, name: str, value: Any) -> int:
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"mmcv.ops.{op}: {name} must be an int, got {type(value).__name__} {value!r}")


def box_score_tensors(op: str, boxes: ArrayLike, scores: ArrayLike) -> Tuple[Tensor, Tensor, bool]:
    """``boxes`` ``(N, 4)`` and ``scores`` ``(N,)`` as tensors, and whether ``boxes`` was numpy."""
    for name, value in (("boxes", boxes), ("scores", scores)):
        if not isinstance(value, (Tensor, np.ndarray)):
            raise TypeError(
                f"mmcv.ops.{op}: {name} must be a torch.Tensor or a numpy.ndarray, "
                f"got {type(value).__name__}"
            )
    is_numpy = isinstance(boxes, np.ndarray)
    boxes_t = torch.from_numpy(boxes) if isinstance(boxes, np.ndarray) else boxes
    scores_t = torch.from_numpy(scores) if isinstance(scores, np.ndarray) else scores
    if boxes_t.dim() != 2 or boxes_t.shape[1] != 4:
        raise ArgumentError(
            f"mmcv.ops.{op}: boxes must have shape (N, 4), got {tuple(boxes_t.shape)}"
        )
    if scores_t.dim() != 1 or scores_t.shape[0] != boxes_t.shape[0]:
        raise ArgumentError(
            f"mmcv.ops.{op}: scores must have shape (N,) = ({boxes_t.shape[0]},), "
            f"got {tuple(scores_t.shape)}"
        )
    for name, value in (("boxes", boxes_t), ("scores", scores_t)):
        if not value.is_floating_point():
            raise TypeError(f"mmcv.ops.{op}: {name} must be floating point, got {value.dtype}")
    if scores_t.device != boxes_t.device:
        raise ValueError(
            f"mmcv.ops.{op}: boxes and scores must be on the same device, "
            f"got {boxes_t.device} and {scores_t.device}"
        )
    return boxes_t, scores_t, is_numpy


def check_offset(op: str, offset: int, supported: Tuple[int, ...]) -> None:
    if offset in supported and not isinstance(offset, bool):
        return
    if offset in (0, 1) and not isinstance(offset, bool):
        raise unsupported(op, "offset", offset, " or ".join(f"offset={o}" for o in supported))
    raise ArgumentError(f"mmcv.ops.{op}: offset must be 0 or 1, got {offset!r}")


def descending(scores: Tensor) -> Tensor:
    """Indices of ``scores`` from highest to lowest, NaN as ``-inf``; equal ones in input order."""
    return torch.sort(ranking(scores), descending=True, stable=True).indices


@renamed_kwargs(
    {"iou_thr": "iou_threshold"},
    "mmcv.ops.{owner}: got both {old} (deprecated) and {new}; pass {new} only",
    owner="nms",
)
def nms_args(iou_threshold: Any, offset: Any = 0, score_threshold: Any = 0) -> Tuple[float, float]:
    """``nms``'s ``iou_threshold`` and ``score_threshold``, checked (``offset`` 0 only)."""
    check_offset("nms", offset, (0,))
    score_threshold = real_number("nms", "score_threshold", score_threshold)
    if np.isnan(score_threshold):
        raise ValueError("mmcv.ops.nms: score_threshold must be a number, got nan")
    return fraction("nms", "iou_threshold", iou_threshold), score_threshold
