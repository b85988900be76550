"""The BEV overlap of two 3D boxes as mmcv's ``iou3d`` kernel computes it (not an mmcv module).

mmcv's ``box_overlap`` (``iou3d_cuda_kernel.cuh``) does not clip polygons: it collects

1. the crossings of each edge of one rectangle with each edge of the other (edge
   ``i`` of ``a``, then edge ``j`` of ``b``), where the edges' bounding boxes meet and
   each edge's ends lie strictly on both sides of the other's line;
2. then, per corner ``k``, ``b``'s corner ``k`` if it is within ``1e-2`` (absolute,
   ``MARGIN``) of inside ``a``, and ``a``'s corner ``k`` if within ``1e-2`` of inside ``b``;

sorts them by angle about their mean (a stable bubble sort) and sums the fan of
triangles from the first point. Corners a little outside the other rectangle are
thus counted, and the area is larger than the exact one by up to about ``1e-2``
times a side: this module reproduces that, in float32, with the kernel's operations
in its order (where CUDA fuses a multiply-add the last bit may differ), in the boxes'
dtype (the kernel's is float32). ``cos`` and ``sin`` are rounded from float64, as C's.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

__all__ = ["MARGIN", "kernel_bev_iou", "kernel_bev_overlap"]

#: How far outside a rectangle the kernel still takes a corner as inside.
MARGIN = 1e-2
_EPS = 1e-8
_CORNER_X = (-1, 1, 1, -1)
_CORNER_Y = (-1, -1, 1, 1)


def _corners(box: Tensor) -> Tensor:
    """``(K, 4, 2)`` corners: ``(x -+ dx/2, y -+ dy/2)`` turned about ``(x, y)``."""
    cx, cy = box[:, 0:1], box[:, 1:2]
    half_x, half_y = box[:, 3:4] / 2, box[:, 4:5] / 2
    sx, sy = box.new_tensor(_CORNER_X) > 0, box.new_tensor(_CORNER_Y) > 0
    x = torch.where(sx, cx + half_x, cx - half_x) - cx
    y = torch.where(sy, cy + half_y, cy - half_y) - cy
    angle = box[:, 6:7].to(torch.float64)
    cos, sin = torch.cos(angle).to(box.dtype), torch.sin(angle).to(box.dtype)
    return torch.stack((x * cos - y * sin + cx, x * sin + y * cos + cy), -1)


def _cross3(p1: Tensor, p2: Tensor, p0: Tensor) -> Tensor:
    """The kernel's ``cross(p1, p2, p0)`` of ``(..., 2)`` points."""
    return (p1[..., 0] - p0[..., 0]) * (p2[..., 1] - p0[..., 1]) - (p2[..., 0] - p0[..., 0]) * (
        p1[..., 1] - p0[..., 1]
    )


def _crossings(a: Tensor, b: Tensor) -> Tuple[Tensor, Tensor]:
    """``(K, 16, 2)`` crossings of edge ``i`` of ``a`` with edge ``j`` of ``b`` (``i``-major),
    and whether the kernel takes each."""
    p0, p1 = a[:, :, None], a.roll(-1, 1)[:, :, None]  # (K, 4, 1, 2)
    q0, q1 = b[:, None], b.roll(-1, 1)[:, None]  # (K, 1, 4, 2)
    lo_p, hi_p = torch.minimum(p0, p1), torch.maximum(p0, p1)
    lo_q, hi_q = torch.minimum(q0, q1), torch.maximum(q0, q1)
    meet = ((lo_p <= hi_q) & (lo_q <= hi_p)).all(-1)
    s1, s2 = _cross3(q0, p1, p0), _cross3(p1, q1, p0)
    s3, s4 = _cross3(p0, q1, q0), _cross3(q1, p1, q0)
    take = meet & (s1 * s2 > 0) & (s3 * s4 > 0)
    s5 = _cross3(q1, p1, p0)
    by_area = (s5[..., None] * q0 - s1[..., None] * q1) / (s5 - s1)[..., None]
    # Nearly equal areas: the kernel intersects the two lines instead.
    a0, b0 = p0[..., 1] - p1[..., 1], p1[..., 0] - p0[..., 0]
    c0 = p0[..., 0] * p1[..., 1] - p1[..., 0] * p0[..., 1]
    a1, b1 = q0[..., 1] - q1[..., 1], q1[..., 0] - q0[..., 0]
    c1 = q0[..., 0] * q1[..., 1] - q1[..., 0] * q0[..., 1]
    det = a0 * b1 - a1 * b0
    by_lines = torch.stack(((b0 * c1 - b1 * c0) / det, (a1 * c0 - a0 * c1) / det), -1)
    point = torch.where(((s5 - s1).abs() > _EPS)[..., None], by_area, by_lines)
    return point.reshape(-1, 16, 2), take.reshape(-1, 16)


def _near_inside(box: Tensor, points: Tensor) -> Tensor:
    """``(K, 4)``: the kernel's ``check_in_box2d`` (within ``MARGIN``) of ``(K, 4, 2)`` points."""
    angle = -box[:, 6:7].to(torch.float64)
    cos, sin = torch.cos(angle).to(box.dtype), torch.sin(angle).to(box.dtype)
    dx, dy = points[..., 0] - box[:, 0:1], points[..., 1] - box[:, 1:2]
    rot_x, rot_y = dx * cos + dy * -sin, dx * sin + dy * cos
    return (rot_x.abs() < box[:, 3:4] / 2 + MARGIN) & (rot_y.abs() < box[:, 4:5] / 2 + MARGIN)


def kernel_bev_overlap(box_a: Tensor, box_b: Tensor) -> Tensor:
    """mmcv's BEV overlap of the aligned pairs of ``(K, 7)`` boxes: ``(K,)``, differentiable."""
    a, b = _corners(box_a), _corners(box_b)
    cross_pts, cross_take = _crossings(a, b)
    # Corner k of b, then corner k of a, for k = 0..3.
    corner_pts = torch.stack((b, a), 2).reshape(-1, 8, 2)
    corner_take = torch.stack((_near_inside(box_a, b), _near_inside(box_b, a)), 2).reshape(-1, 8)
    pts = torch.cat((cross_pts, corner_pts), 1)
    take = torch.cat((cross_take, corner_take), 1)
    count = take.sum(1)
    pts = torch.where(take[..., None], pts, 0.0)
    centre = pts.sum(1) / count.clamp(min=1)[:, None].to(pts.dtype)
    angle = torch.atan2(pts[..., 1] - centre[:, 1:2], pts[..., 0] - centre[:, 0:1])
    angle = torch.where(take, angle, torch.inf)
    order = torch.sort(angle, dim=1, stable=True).indices
    pts = pts.gather(1, order[..., None].expand(-1, -1, 2))
    first = pts[:, :1]
    # Points past the count become the first one: their triangles are empty.
    pts = torch.where((torch.arange(24, device=pts.device) < count[:, None])[..., None], pts, first)
    rel = pts - first
    fan = rel[:, :-1, 0] * rel[:, 1:, 1] - rel[:, :-1, 1] * rel[:, 1:, 0]
    return fan.sum(1).abs() / 2


def kernel_bev_iou(box_a: Tensor, box_b: Tensor) -> Tensor:
    """mmcv's ``iou_bev`` of aligned pairs: ``overlap / fmax(area_a + area_b - overlap, 1e-8)``."""
    overlap = kernel_bev_overlap(box_a, box_b)
    union = box_a[:, 3] * box_a[:, 4] + box_b[:, 3] * box_b[:, 4] - overlap
    return overlap / torch.fmax(union, union.new_tensor(_EPS))
