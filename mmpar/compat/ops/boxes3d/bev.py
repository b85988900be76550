"""3D boxes seen from above: mmcv's overlap of every pair, and extents (not an mmcv module).

A box ``(x, y, z, dx, dy, dz, heading)`` seen from above is the rectangle of centre
``(x, y)`` and sides ``dx`` (along the heading) and ``dy``, turned by ``heading``
counter-clockwise (x right, y up). Its overlap with another is mmcv's kernel's
(:mod:`mmpar.compat.ops.boxes3d.bev_kernel`), computed only for the pairs whose
rectangles, widened by the kernel's ``1e-2`` margin, may meet: the others are 0, as
in the kernel. The walk over the pairs, in chunks, is
:func:`mmpar.compat.ops.geometry.pairwise.pairwise_overlaps`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.boxes3d.bev_kernel import MARGIN, kernel_bev_overlap
from mmpar.compat.ops.boxes3d.greedy import Extents
from mmpar.compat.ops.geometry.pairwise import BoxKind, pairwise_overlaps

__all__ = ["bev_extents", "bev_overlap_areas"]

# Pairs computed at once: bounds the intermediates (~24 points a pair, ~100 MB).
_CHUNK_PAIRS = 1 << 15
# How far, beyond the rectangles, the kernel may take a point: a corner within the
# margin of the other rectangle on both axes (sqrt(2) * margin), widened for rounding.
_REACH = 1.5 * MARGIN


def bev_overlap_areas(boxes_a: Tensor, boxes_b: Tensor) -> Tensor:
    """mmcv's BEV overlap of every pair of 3D boxes.

    Args:
        boxes_a: ``(n, 7)`` float 3D boxes.
        boxes_b: ``(m, 7)`` float 3D boxes, same dtype and device.

    Returns:
        ``(n, m)`` areas in ``boxes_a``'s dtype, computed in float32 (float64 for
        float64 boxes). Differentiable. A pair with a non-finite coordinate is 0.
    """
    kind = BoxKind("boxes_overlap_bev", 7, "", _may_overlap, _areas, _CHUNK_PAIRS)
    return pairwise_overlaps(kind, boxes_a, boxes_b, "iou", False)


def bev_extents(boxes: Tensor) -> Extents:
    """``(left, right, bottom, top)`` of ``(N, 7)`` boxes' rectangles, widened by the
    kernel's reach: a pair whose extents do not meet has an overlap of 0."""
    cos, sin = torch.cos(boxes[:, 6]).abs(), torch.sin(boxes[:, 6]).abs()
    half_x, half_y = boxes[:, 3].abs() / 2, boxes[:, 4].abs() / 2
    slack = 1e-5 * (boxes[:, :2].abs() + boxes[:, 3:5].abs().sum(1, keepdim=True)) + _REACH
    reach_x = half_x * cos + half_y * sin + slack[:, 0]
    reach_y = half_x * sin + half_y * cos + slack[:, 1]
    x, y = boxes[:, 0], boxes[:, 1]
    return x - reach_x, x + reach_x, y - reach_y, y + reach_y


def _may_overlap(b1: Tensor, b2: Tensor) -> Tensor:
    """False where the rectangles of boxes ``(..., 7)`` certainly have no overlap."""
    reach = (torch.hypot(b1[..., 3], b1[..., 4]) + torch.hypot(b2[..., 3], b2[..., 4])) / 2
    apart = torch.hypot(b1[..., 0] - b2[..., 0], b1[..., 1] - b2[..., 1])
    finite = torch.isfinite(b1).all(-1) & torch.isfinite(b2).all(-1)
    return (apart <= reach * (1 + 1e-5) + 2 * _REACH) & finite


def _areas(b1: Tensor, b2: Tensor, iof: bool) -> Tensor:
    """``(k,)`` overlaps of the aligned pairs of ``(k, 7)`` boxes (``iof`` unused)."""
    del iof
    return kernel_bev_overlap(b1, b2)
