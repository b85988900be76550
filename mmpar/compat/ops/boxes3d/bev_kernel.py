"""The BEV overlap and IoUs of 3D boxes as mmcv's ``iou3d`` kernel computes them.

Not an mmcv module. mmcv's ``box_overlap`` (``iou3d_cuda_kernel.cuh``) does not clip
polygons: it collects

1. the crossings of each edge of one rectangle with each edge of the other (edge
   ``i`` of ``a``, then edge ``j`` of ``b``), where the edges' bounding boxes meet and
   each edge's ends lie strictly on both sides of the other's line;
2. then, per corner ``k``, ``b``'s corner ``k`` if it is within ``1e-2`` (absolute,
   ``MARGIN``) of inside ``a``, and ``a``'s corner ``k`` if within ``1e-2`` of inside ``b``;

sorts them by angle about their mean (a stable bubble sort) and sums the fan of
triangles from the first point. Corners a little outside the other rectangle are
thus counted, and the area is larger than the exact one by up to about ``1e-2``
times a side. :func:`kernel_bev_overlap` reproduces that with the kernel's operations
in its order, in the boxes' dtype (the kernel's is float32; where CUDA fuses a
multiply-add the last bit may differ), ``cos`` and ``sin`` rounded from float64 as C's.
:func:`kernel_bev_iou` is the kernel's ``iou_bev``, :func:`kernel_normal_iou` its
``iou_normal`` (the rectangles with the heading set to 0).
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

__all__ = ["MARGIN", "kernel_bev_iou", "kernel_bev_overlap", "kernel_normal_iou"]

#: How far outside a rectangle the kernel still takes a corner as inside.
MARGIN = 1e-2
_EPS = 1e-8
_CORNER_X = (-1, 1, 1, -1)
_CORNER_Y = (-1, -1, 1, 1)


def _corners(box: Tensor) -> Tuple[Tensor, Tensor]:
    """``(K, 4)`` x and y of the corners: ``(x -+ dx/2, y -+ dy/2)`` turned about ``(x, y)``."""
    cx, cy = box[:, 0:1], box[:, 1:2]
    half_x, half_y = box[:, 3:4] / 2, box[:, 4:5] / 2
    sx, sy = box.new_tensor(_CORNER_X) > 0, box.new_tensor(_CORNER_Y) > 0
    x = torch.where(sx, cx + half_x, cx - half_x) - cx
    y = torch.where(sy, cy + half_y, cy - half_y) - cy
    angle = box[:, 6:7].to(torch.float64)
    cos, sin = torch.cos(angle).to(box.dtype), torch.sin(angle).to(box.dtype)
    return x * cos - y * sin + cx, x * sin + y * cos + cy


def _crossings(a: Tuple[Tensor, Tensor], b: Tuple[Tensor, Tensor]) -> Tuple[Tensor, ...]:
    """``(x, y, take)``, ``(K, 16)`` each: the crossing of edge ``i`` of ``a`` (from corner
    ``i`` to ``i + 1``) with edge ``j`` of ``b`` (at ``4 i + j``), and whether the kernel
    takes it.

    The kernel's cross products, from shared differences: ``d = b_j - a_i``, whose
    neighbours give ``b_{j+1} - a_i`` and ``a_{i+1} - b_j = -(b_j - a_{i+1})`` exactly
    (IEEE subtraction is antisymmetric), and the edges ``a_{i+1} - a_i``, ``b_{j+1} - b_j``.
    """
    (ax, ay), (bx, by) = a, b
    k = ax.shape[0]
    dx, dy = bx[:, None, :] - ax[:, :, None], by[:, None, :] - ay[:, :, None]  # (K, 4, 4)
    next_bx, next_by = dx.roll(-1, 2), dy.roll(-1, 2)  # b_{j+1} - a_i
    next_ax, next_ay = dx.roll(-1, 1), dy.roll(-1, 1)  # b_j - a_{i+1}
    eax, eay = (ax.roll(-1, 1) - ax)[:, :, None], (ay.roll(-1, 1) - ay)[:, :, None]
    ebx, eby = (bx.roll(-1, 1) - bx)[:, None, :], (by.roll(-1, 1) - by)[:, None, :]
    s1 = dx * eay - eax * dy  # cross(q0, p1, p0)
    s5 = next_bx * eay - eax * next_by  # cross(q1, p1, p0); cross(p1, q1, p0) is -s5
    s3 = dy * ebx - dx * eby  # cross(p0, q1, q0)
    s4 = next_ax * eby - ebx * next_ay  # cross(q1, p1, q0)
    take = (s1 * s5 < 0) & (s3 * s4 > 0)
    take &= _spans_meet(ax, bx) & _spans_meet(ay, by)
    gap = s5 - s1
    qx0, qy0 = bx[:, None, :], by[:, None, :]
    qx1, qy1 = bx.roll(-1, 1)[:, None, :], by.roll(-1, 1)[:, None, :]
    x, y = (s5 * qx0 - s1 * qx1) / gap, (s5 * qy0 - s1 * qy1) / gap
    lines = (gap.abs() <= _EPS) & take
    if bool(lines.any()):  # nearly equal areas: the kernel intersects the two lines
        x, y = _line_crossings(a, b, lines, x, y)
    return x.reshape(k, 16), y.reshape(k, 16), take.reshape(k, 16)


def _spans_meet(a: Tensor, b: Tensor) -> Tensor:
    """``(K, 4, 4)``: whether the spans of edge ``i`` of ``a`` and edge ``j`` of ``b`` on
    one axis meet (the kernel's ``check_rect_cross``, one axis), from ``(K, 4)`` ends."""
    a_next, b_next = a.roll(-1, 1), b.roll(-1, 1)
    a_lo, a_hi = torch.minimum(a, a_next)[:, :, None], torch.maximum(a, a_next)[:, :, None]
    b_lo, b_hi = torch.minimum(b, b_next)[:, None, :], torch.maximum(b, b_next)[:, None, :]
    return (a_lo <= b_hi) & (b_lo <= a_hi)


def _line_crossings(
    a: Tuple[Tensor, Tensor], b: Tuple[Tensor, Tensor], lines: Tensor, x: Tensor, y: Tensor
) -> Tuple[Tensor, Tensor]:
    """``x``, ``y`` ``(K, 4, 4)`` with the kernel's line-line crossing where ``lines``."""
    (ax, ay), (bx, by) = a, b
    px0, py0 = ax[:, :, None], ay[:, :, None]
    px1, py1 = ax.roll(-1, 1)[:, :, None], ay.roll(-1, 1)[:, :, None]
    qx0, qy0 = bx[:, None, :], by[:, None, :]
    qx1, qy1 = bx.roll(-1, 1)[:, None, :], by.roll(-1, 1)[:, None, :]
    a0, b0, c0 = py0 - py1, px1 - px0, px0 * py1 - px1 * py0
    a1, b1, c1 = qy0 - qy1, qx1 - qx0, qx0 * qy1 - qx1 * qy0
    det = a0 * b1 - a1 * b0
    x = torch.where(lines, (b0 * c1 - b1 * c0) / det, x)
    y = torch.where(lines, (a1 * c0 - a0 * c1) / det, y)
    return x, y


def _near_inside(box: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """``(K, 4)``: the kernel's ``check_in_box2d`` (within ``MARGIN``) of ``(K, 4)`` points."""
    angle = -box[:, 6:7].to(torch.float64)
    cos, sin = torch.cos(angle).to(box.dtype), torch.sin(angle).to(box.dtype)
    dx, dy = x - box[:, 0:1], y - box[:, 1:2]
    rot_x, rot_y = dx * cos + dy * -sin, dx * sin + dy * cos
    return (rot_x.abs() < box[:, 3:4] / 2 + MARGIN) & (rot_y.abs() < box[:, 4:5] / 2 + MARGIN)


def kernel_bev_overlap(box_a: Tensor, box_b: Tensor) -> Tensor:
    """mmcv's BEV overlap of the aligned pairs of ``(K, 7)`` boxes: ``(K,)``, differentiable."""
    a, b = _corners(box_a), _corners(box_b)
    cross_x, cross_y, cross_take = _crossings(a, b)
    k = box_a.shape[0]
    # Corner j of b, then corner j of a, for j = 0..3.
    corner_x = torch.stack((b[0], a[0]), 2).reshape(k, 8)
    corner_y = torch.stack((b[1], a[1]), 2).reshape(k, 8)
    corner_take = torch.stack((_near_inside(box_a, *b), _near_inside(box_b, *a)), 2).reshape(k, 8)
    take = torch.cat((cross_take, corner_take), 1)
    x = torch.cat((cross_x, corner_x), 1).where(take, 0.0)
    y = torch.cat((cross_y, corner_y), 1).where(take, 0.0)
    count = take.sum(1, keepdim=True).clamp(min=1).to(x.dtype)
    angle = torch.atan2(y - y.sum(1, keepdim=True) / count, x - x.sum(1, keepdim=True) / count)
    order = torch.sort(angle.where(take, torch.inf), dim=1, stable=True).indices
    x, y, take = x.gather(1, order), y.gather(1, order), take.gather(1, order)
    # Points past the count become the first one: their triangles are empty.
    x, y = x.where(take, x[:, :1]) - x[:, :1], y.where(take, y[:, :1]) - y[:, :1]
    fan = x[:, :-1] * y[:, 1:] - y[:, :-1] * x[:, 1:]
    return fan.sum(1).abs() / 2


def kernel_bev_iou(box_a: Tensor, box_b: Tensor) -> Tensor:
    """mmcv's ``iou_bev`` of aligned pairs: ``overlap / fmax(area_a + area_b - overlap, 1e-8)``."""
    overlap = kernel_bev_overlap(box_a, box_b)
    union = box_a[:, 3] * box_a[:, 4] + box_b[:, 3] * box_b[:, 4] - overlap
    return overlap / torch.fmax(union, union.new_tensor(_EPS))


def kernel_normal_iou(a: Tensor, b: Tensor) -> Tensor:
    """mmcv's ``iou_normal`` of the aligned pairs of ``(K, 7)`` boxes, heading ignored.

    The rectangles ``(x -+ dx/2, y -+ dy/2)``; ``overlap / fmax(dx_a dy_a + dx_b dy_b -
    overlap, 1e-8)``. ``fmax``/``fmin`` as the kernel's ``fmaxf``/``fminf``: a NaN
    operand gives the other.
    """
    half_a, half_b = a[:, 3:5] / 2, b[:, 3:5] / 2
    low = torch.fmax(a[:, :2] - half_a, b[:, :2] - half_b)
    high = torch.fmin(a[:, :2] + half_a, b[:, :2] + half_b)
    side = torch.fmax(high - low, high.new_zeros(()))
    inter = side[:, 0] * side[:, 1]
    union = a[:, 3] * a[:, 4] + b[:, 3] * b[:, 4] - inter
    return inter / torch.fmax(union, union.new_tensor(_EPS))
