"""Rotated-box overlaps: mmcv 1.7.2's ``mmcv.ops.box_iou_rotated`` in plain torch.

Follows mmcv's kernel (``box_iou_rotated_utils.hpp``): a box's area is ``w * h``; a
pair where either area is below ``1e-14`` gives 0; otherwise ``iou = inter / (area1
+ area2 - inter)`` and ``iof = inter / area1``, without an epsilon. Each pair is
computed on coordinates centred on the pair, the intersection being
:func:`mmpar.compat.ops.polygon.convex_intersection_area` of the boxes' corners.

Differences from mmcv-full: mmcv's CPU and CUDA kernels take float32 only; here
float64 runs in float64 and float16/bfloat16 in float32, returned in the input's
dtype. The result is differentiable (mmcv's has no backward). The pairs whose
enclosing circles are apart are 0 without clipping (exactly what clipping gives
them); the others are computed in chunks of at most ``_CHUNK_PAIRS`` pairs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.polygon import convex_intersection_area, rotated_box_corners

__all__ = ["box_iou_rotated"]

_MODES = ("iou", "iof")
# Pairs per chunk: bounds the memory of the clipping's intermediates (~100 MB).
_CHUNK_PAIRS = 1 << 15
# mmcv's kernel gives 0 for a pair where either box's area is below this.
_MIN_AREA = 1e-14


def _check_boxes(name: str, boxes: object) -> Tensor:
    """``boxes`` if it is ``(n, 5)`` float, or empty (``n == 0``, any shape); else an error."""
    if not isinstance(boxes, Tensor):
        raise TypeError(
            f"mmcv.ops.box_iou_rotated: {name} must be a torch.Tensor, got {type(boxes).__name__}"
        )
    if not boxes.is_floating_point():
        raise TypeError(
            f"mmcv.ops.box_iou_rotated: {name} must be a floating-point tensor, got {boxes.dtype}"
        )
    empty = boxes.dim() >= 1 and boxes.shape[0] == 0
    if not empty and (boxes.dim() != 2 or boxes.shape[1] != 5):
        raise ValueError(
            f"mmcv.ops.box_iou_rotated: {name} must have shape (n, 5) (x, y, w, h, angle) "
            f"or be empty, got {tuple(boxes.shape)}"
        )
    return boxes


def box_iou_rotated(
    bboxes1: Tensor,
    bboxes2: Tensor,
    mode: str = "iou",
    aligned: bool = False,
    clockwise: bool = True,
) -> Tensor:
    """Overlaps of rotated boxes: IoU, or intersection over the first box's area.

    Args:
        bboxes1: ``(n, 5)`` float, ``(x_center, y_center, w, h, angle)``, the angle
            in radians; or empty (``n == 0``).
        bboxes2: ``(m, 5)`` float, same layout and dtype; or empty. With
            ``aligned``, ``m == n``.
        mode: ``"iou"`` (intersection over union) or ``"iof"`` (intersection over
            the area of the box from ``bboxes1``).
        aligned: Overlap of each pair ``(bboxes1[i], bboxes2[i])`` instead of every
            pair.
        clockwise: With ``True`` (mmcv's default) a positive angle turns a box
            clockwise on an image (x right, y down); ``False`` for the
            counter-clockwise definition. See
            :func:`mmpar.compat.ops.polygon.rotated_box_corners`.

    Returns:
        ``(n, m)`` overlaps, or ``(n,)`` with ``aligned``, in ``bboxes1``'s dtype.

    Raises:
        TypeError: A box set is not a floating-point tensor, or the dtypes differ.
        ValueError: A bad shape or ``mode``, or different devices.
    """
    if mode not in _MODES:
        raise ValueError(f"mmcv.ops.box_iou_rotated: mode must be 'iou' or 'iof', got {mode!r}")
    bboxes1 = _check_boxes("bboxes1", bboxes1)
    bboxes2 = _check_boxes("bboxes2", bboxes2)
    rows, cols = bboxes1.shape[0], bboxes2.shape[0]
    if aligned and rows != cols:
        raise ValueError(
            "mmcv.ops.box_iou_rotated: with aligned=True bboxes1 and bboxes2 must have as many "
            f"boxes, got {rows} and {cols}"
        )
    if rows * cols == 0:
        return bboxes1.new_zeros((rows,) if aligned else (rows, cols))
    if bboxes1.dtype != bboxes2.dtype:
        raise TypeError(
            "mmcv.ops.box_iou_rotated: bboxes1 and bboxes2 must have the same dtype, "
            f"got {bboxes1.dtype} and {bboxes2.dtype}"
        )
    if bboxes1.device != bboxes2.device:
        raise ValueError(
            "mmcv.ops.box_iou_rotated: bboxes1 and bboxes2 must be on the same device, "
            f"got {bboxes1.device} and {bboxes2.device}"
        )
    dtype = float_compute_dtype(bboxes1.dtype)
    b1, b2 = bboxes1.to(dtype), bboxes2.to(dtype)
    iof = mode == "iof"
    if aligned:
        out = b1.new_zeros(rows)
        for start in range(0, rows, _CHUNK_PAIRS):
            pair = torch.arange(start, min(start + _CHUNK_PAIRS, rows), device=b1.device)
            near = pair[_may_overlap(b1[pair], b2[pair])]
            out.index_put_((near,), _pair_overlaps(b1[near], b2[near], iof, clockwise))
        return out.to(bboxes1.dtype)
    out = b1.new_zeros(rows * cols)
    block = max(1, _CHUNK_PAIRS * 8 // cols)  # rows whose pairs are screened at once
    for start in range(0, rows, block):
        near = _may_overlap(b1[start : start + block, None], b2[None])
        first, second = near.nonzero(as_tuple=True)
        first = first + start
        for at in range(0, first.numel(), _CHUNK_PAIRS):
            i, j = first[at : at + _CHUNK_PAIRS], second[at : at + _CHUNK_PAIRS]
            out.index_put_((i * cols + j,), _pair_overlaps(b1[i], b2[j], iof, clockwise))
    return out.view(rows, cols).to(bboxes1.dtype)


def _may_overlap(b1: Tensor, b2: Tensor) -> Tensor:
    """Whether boxes ``b1`` and ``b2`` (broadcasting ``(..., 5)``) can have a non-zero overlap.

    False where the boxes' enclosing circles are apart (the intersection is empty)
    or where mmcv's kernel gives 0 for a box's area.
    """
    reach = (torch.hypot(b1[..., 2], b1[..., 3]) + torch.hypot(b2[..., 2], b2[..., 3])) / 2
    apart = torch.hypot(b1[..., 0] - b2[..., 0], b1[..., 1] - b2[..., 1])
    valid = (b1[..., 2] * b1[..., 3] >= _MIN_AREA) & (b2[..., 2] * b2[..., 3] >= _MIN_AREA)
    return (apart <= reach * (1 + 1e-5)) & valid


def _pair_overlaps(b1: Tensor, b2: Tensor, iof: bool, clockwise: bool) -> Tensor:
    """``(k,)`` overlaps of the pairs ``(b1[i], b2[i])`` of ``(k, 5)`` boxes of valid areas."""
    # Centred on the pair, as mmcv's kernel does: the corners keep their precision.
    shift = (b1[:, :2] + b2[:, :2]) / 2
    corners1 = rotated_box_corners(torch.cat((b1[:, :2] - shift, b1[:, 2:]), 1), clockwise)
    corners2 = rotated_box_corners(torch.cat((b2[:, :2] - shift, b2[:, 2:]), 1), clockwise)
    inter = convex_intersection_area(corners1, corners2)
    area1 = b1[:, 2] * b1[:, 3]
    return inter / (area1 if iof else area1 + b2[:, 2] * b2[:, 3] - inter)
