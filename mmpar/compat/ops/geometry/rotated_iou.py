"""Rotated-box overlaps: mmcv 1.7.2's ``mmcv.ops.box_iou_rotated`` in plain torch.

Follows mmcv's kernel (``box_iou_rotated_utils.hpp``): a box's area is ``w * h``; a
pair where either area is below ``1e-14`` gives 0; otherwise ``iou = inter / (area1
+ area2 - inter)`` and ``iof = inter / area1``, without an epsilon. Each pair is
computed on coordinates centred on the pair, the intersection being
:func:`mmpar.compat.ops.geometry.polygon.convex_intersection_area` of the boxes' corners.

Differences from mmcv-full: mmcv's CPU and CUDA kernels take float32 only; here
float64 runs in float64 and float16/bfloat16 in float32, returned in the input's
dtype. The result is differentiable (mmcv's has no backward). The pairs whose
enclosing circles are apart are 0 without clipping (exactly what clipping gives
them); the others are computed in chunks of at most ``_CHUNK_PAIRS`` pairs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.geometry.pairwise import BoxKind, pairwise_overlaps
from mmpar.compat.ops.geometry.polygon import convex_intersection_area, rotated_box_corners

__all__ = ["box_iou_rotated"]

# Pairs per chunk: bounds the memory of the clipping's intermediates (~100 MB).
_CHUNK_PAIRS = 1 << 15
# mmcv's kernel gives 0 for a pair where either box's area is below this.
_MIN_AREA = 1e-14


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
            :func:`mmpar.compat.ops.geometry.polygon.rotated_box_corners`.

    Returns:
        ``(n, m)`` overlaps, or ``(n,)`` with ``aligned``, in ``bboxes1``'s dtype.

    Raises:
        TypeError: A box set is not a floating-point tensor, or the dtypes differ.
        ValueError: A bad shape or ``mode``, or different devices.
    """

    def overlaps(b1: Tensor, b2: Tensor, iof: bool) -> Tensor:
        return _pair_overlaps(b1, b2, iof, clockwise)

    kind = BoxKind(
        "box_iou_rotated", 5, "(x, y, w, h, angle)", _may_overlap, overlaps, _CHUNK_PAIRS
    )
    return pairwise_overlaps(kind, bboxes1, bboxes2, mode, aligned)


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
