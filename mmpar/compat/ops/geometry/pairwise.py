"""Overlaps of two box sets, every pair or aligned pairs, in chunks (not an mmcv module).

:func:`pairwise_overlaps` is what :mod:`~mmpar.compat.ops.box_iou_rotated` and
:mod:`~mmpar.compat.ops.box_iou_quadri` share: their arguments' checks, the empty
cases, the dtype they compute in, and the walk over the pairs. An op supplies two
functions of its boxes: which pairs may overlap at all (a cheap, conservative
screen over broadcast box sets), and the overlaps of aligned pairs. The pairs the
screen rules out are 0 without being computed; the others are computed in chunks of
at most ``chunk_pairs`` pairs, so that memory stays bounded whatever ``n * m``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype

__all__ = ["BoxKind", "pairwise_overlaps"]

_MODES = ("iou", "iof")


class BoxKind(NamedTuple):
    """What an op's boxes are, and how it compares them.

    Attributes:
        op: The op's mmcv name, for the messages.
        width: The number of columns of a box.
        layout: The columns, for the messages, e.g. ``"(x, y, w, h, angle)"``.
        may_overlap: ``(b1, b2) -> bool``, boxes ``(..., width)`` broadcasting
            together: False only where the overlap is certainly 0.
        overlaps: ``(b1, b2, iof) -> (k,)``: the overlaps of the aligned pairs of
            ``(k, width)`` boxes, IoF with ``iof``, else IoU.
        chunk_pairs: The most pairs given to ``overlaps`` at once.
    """

    op: str
    width: int
    layout: str
    may_overlap: Callable[[Tensor, Tensor], Tensor]
    overlaps: Callable[[Tensor, Tensor, bool], Tensor]
    chunk_pairs: int


def _check_boxes(kind: BoxKind, name: str, boxes: object) -> Tensor:
    """The ``(n, width)`` boxes of ``(n, >= width)`` float ``boxes``, or empty ``boxes``.

    Columns past ``width`` are ignored, as mmcv's kernels read the first ``width`` of
    each row: mmrotate's mAP evaluation passes detections with their score, ``(n, 6)``.
    """
    if not isinstance(boxes, Tensor):
        raise TypeError(
            f"mmcv.ops.{kind.op}: {name} must be a torch.Tensor, got {type(boxes).__name__}"
        )
    if not boxes.is_floating_point():
        raise TypeError(
            f"mmcv.ops.{kind.op}: {name} must be a floating-point tensor, got {boxes.dtype}"
        )
    empty = boxes.dim() >= 1 and boxes.shape[0] == 0
    if not empty and (boxes.dim() != 2 or boxes.shape[1] < kind.width):
        raise ValueError(
            f"mmcv.ops.{kind.op}: {name} must have shape (n, {kind.width}) {kind.layout} "
            f"(more columns are ignored) or be empty, got {tuple(boxes.shape)}"
        )
    return boxes if empty else boxes[:, : kind.width]


def pairwise_overlaps(
    kind: BoxKind, bboxes1: Tensor, bboxes2: Tensor, mode: str, aligned: bool
) -> Tensor:
    """The overlaps of every pair of ``bboxes1`` and ``bboxes2``, or of aligned pairs.

    Args:
        kind: The op and its box functions.
        bboxes1: ``(n, width)`` float; or empty (``n == 0``).
        bboxes2: ``(m, width)`` float, same dtype and device; or empty. With
            ``aligned``, ``m == n``.
        mode: ``"iou"`` or ``"iof"``.
        aligned: The overlap of each pair ``(bboxes1[i], bboxes2[i])`` instead of
            every pair.

    Returns:
        ``(n, m)`` overlaps, or ``(n,)`` with ``aligned``, in ``bboxes1``'s dtype;
        computed in float32 (float64 for float64 boxes).

    Raises:
        TypeError: A box set is not a floating-point tensor, or the dtypes differ.
        ValueError: A bad shape or ``mode``, or different devices.
    """
    op = kind.op
    if mode not in _MODES:
        raise ValueError(f"mmcv.ops.{op}: mode must be 'iou' or 'iof', got {mode!r}")
    bboxes1 = _check_boxes(kind, "bboxes1", bboxes1)
    bboxes2 = _check_boxes(kind, "bboxes2", bboxes2)
    rows, cols = bboxes1.shape[0], bboxes2.shape[0]
    if aligned and rows != cols:
        raise ValueError(
            f"mmcv.ops.{op}: with aligned=True bboxes1 and bboxes2 must have as many "
            f"boxes, got {rows} and {cols}"
        )
    if rows * cols == 0:
        return _attached(bboxes1.new_zeros((rows,) if aligned else (rows, cols)), bboxes1, bboxes2)
    if bboxes1.dtype != bboxes2.dtype:
        raise TypeError(
            f"mmcv.ops.{op}: bboxes1 and bboxes2 must have the same dtype, "
            f"got {bboxes1.dtype} and {bboxes2.dtype}"
        )
    if bboxes1.device != bboxes2.device:
        raise ValueError(
            f"mmcv.ops.{op}: bboxes1 and bboxes2 must be on the same device, "
            f"got {bboxes1.device} and {bboxes2.device}"
        )
    dtype = float_compute_dtype(bboxes1.dtype)
    b1, b2 = bboxes1.to(dtype), bboxes2.to(dtype)
    iof = mode == "iof"
    chunk = kind.chunk_pairs
    if aligned:
        out = b1.new_zeros(rows)
        for start in range(0, rows, chunk):
            pair = torch.arange(start, min(start + chunk, rows), device=b1.device)
            near = pair[kind.may_overlap(b1[pair], b2[pair])]
            out.index_put_((near,), kind.overlaps(b1[near], b2[near], iof))
        return _attached(out.to(bboxes1.dtype), bboxes1, bboxes2)
    out = b1.new_zeros(rows * cols)
    block = max(1, chunk * 8 // cols)  # rows whose pairs are screened at once
    for start in range(0, rows, block):
        near = kind.may_overlap(b1[start : start + block, None], b2[None])
        first, second = near.nonzero(as_tuple=True)
        first = first + start
        for at in range(0, first.numel(), chunk):
            i, j = first[at : at + chunk], second[at : at + chunk]
            out.index_put_((i * cols + j,), kind.overlaps(b1[i], b2[j], iof))
    return _attached(out.view(rows, cols).to(bboxes1.dtype), bboxes1, bboxes2)


def _attached(out: Tensor, *inputs: Tensor) -> Tensor:
    """``out``, in the autograd graph of ``inputs`` where they need a gradient.

    Where no pair was computed (no boxes, or all apart) ``out`` is a constant; the
    sum of none of an input's elements ties it to the input, with a 0 gradient.
    """
    if out.requires_grad or not torch.is_grad_enabled():
        return out
    for tensor in inputs:
        if tensor.requires_grad:
            out = out + tensor.flatten()[:0].sum()
    return out
