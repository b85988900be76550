"""The intersection area of two polygons as mmcv's ``convex_giou`` kernel sums it.

Not an mmcv module: :func:`~mmpar.compat.ops.convex_iou.convex_giou` returns the
gradient of its GIoU with respect to the points, and mmcv's kernel computes that
gradient by differentiating its own way of measuring the intersection, with its
own branch decisions. Where a point set touches the polygon (an edge along the
polygon's edge, a vertex on it: mmcv's own test has both) the area has no
derivative, and the one mmcv returns is that of those decisions. So here is that
way, batched, for autograd to differentiate; IoU values need no such fidelity
and come from :func:`~mmpar.compat.ops.geometry.polygon.convex_intersection_area`.

The area is a sum over every edge ``a -> b`` of one polygon and ``c -> d`` of the
other, both counter-clockwise: the triangle ``(o, a, b)``, ``o`` the origin, cut by
the lines ``o -> c``, ``c -> d`` and ``d -> o`` (each keeps the points more than
``1e-8`` to its left), signed by the two triangles' orientations. Sutherland-Hodgman
cuts on padded vertex lists, in float64 as in the kernel. Only ``a`` and ``b`` are
differentiated through, as in the kernel.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.geometry.polygon import polygon_area

__all__ = ["fan_intersection_area"]

_EPS = 1e-8


def _sig(value: Tensor) -> Tensor:
    """-1, 0 or 1: the sign of ``value`` beyond ``1e-8`` (the kernel's ``sig``)."""
    return (value > _EPS).to(torch.int8) - (value < -_EPS).to(torch.int8)


def _cross(o: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``(a - o) x (b - o)`` of ``(..., 2)`` points."""
    return (a[..., 0] - o[..., 0]) * (b[..., 1] - o[..., 1]) - (b[..., 0] - o[..., 0]) * (
        a[..., 1] - o[..., 1]
    )


def _same(a: Tensor, b: Tensor) -> Tensor:
    """Points within ``1e-8`` in both coordinates (the kernel's ``point_same``)."""
    return (_sig(a[..., 0] - b[..., 0]) == 0) & (_sig(a[..., 1] - b[..., 1]) == 0)


def _compact(points: Tensor, keep: Tensor, slots: int) -> tuple[Tensor, Tensor]:
    """The kept points moved to the front, in order, in ``slots`` slots; and their count."""
    order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)[:, :slots]
    moved = points.gather(1, order[..., None].expand(-1, -1, 2))
    return moved, keep.sum(1).clamp(max=slots)


def _cut(poly: Tensor, count: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """The kernel's ``polygon_cut``: ``(T, S, 2)`` polygons of ``count`` vertices, cut by
    the lines ``a -> b`` ``(T, 2)``; the part left of the line, in ``S + 2`` slots."""
    t, s = poly.shape[:2]
    index = torch.arange(s, device=poly.device)
    valid = index < count[:, None]
    following = torch.where(index + 1 < count[:, None], index + 1, 0)
    nxt = poly.gather(1, following[..., None].expand(-1, -1, 2))
    side = _cross(a[:, None], b[:, None], poly)
    side_next = _cross(a[:, None], b[:, None], nxt)
    sig, sig_next = _sig(side.detach()), _sig(side_next.detach())
    keep = valid & (sig > 0)
    crosses = valid & (sig != sig_next)
    denom = side_next - side
    denom = torch.where(_sig(denom.detach()) == 0, torch.ones_like(denom), denom)
    meet = (poly * side_next[..., None] - nxt * side[..., None]) / denom[..., None]
    # Each vertex, then its edge's crossing: the kernel's order of the new vertices.
    points = torch.stack((poly, meet), 2).reshape(t, 2 * s, 2)
    points, count = _compact(points, torch.stack((keep, crosses), 2).reshape(t, 2 * s), s + 2)
    # Consecutive equal vertices: the first stays. Then the last ones equal to the first go.
    index = torch.arange(s + 2, device=poly.device)
    valid = index < count[:, None]
    repeat = _same(points.detach(), points.detach().roll(1, 1)) & (index > 0)
    points, count = _compact(points, valid & ~repeat, s + 2)
    valid = index < count[:, None]
    like_first = _same(points.detach(), points[:, :1].detach()) & (index > 0)
    tail = (like_first | ~valid).flip(1).cumprod(1).flip(1).bool() & valid
    return points, count - tail.sum(1)


def fan_intersection_area(p: Tensor, q: Tensor) -> Tensor:
    """The intersection area of polygons, summed over triangle pairs as mmcv's kernel does.

    Args:
        p: ``(T, P, 2)`` float64, counter-clockwise (repeated vertices allowed); the
            gradient flows to it.
        q: ``(T, Q, 2)`` float64, counter-clockwise; treated as constant.

    Returns:
        ``(T,)`` areas, differentiable in ``p`` as mmcv's kernel differentiates them.
    """
    t, np_, nq = p.shape[0], p.shape[1], q.shape[1]
    a = p[:, :, None].expand(t, np_, nq, 2).reshape(-1, 2)
    b = p.roll(-1, 1)[:, :, None].expand(t, np_, nq, 2).reshape(-1, 2)
    q = q.detach()
    c = q[:, None].expand(t, np_, nq, 2).reshape(-1, 2)
    d = q.roll(-1, 1)[:, None].expand(t, np_, nq, 2).reshape(-1, 2)
    origin = torch.zeros_like(c)
    s1, s2 = _sig(_cross(origin, a, b).detach()), _sig(_cross(origin, c, d))
    a, b = torch.where((s1 < 0)[:, None], b, a), torch.where((s1 < 0)[:, None], a, b)
    c, d = torch.where((s2 < 0)[:, None], d, c), torch.where((s2 < 0)[:, None], c, d)
    poly = torch.stack((origin, a, b), 1)
    count = torch.full((poly.shape[0],), 3, dtype=torch.long, device=p.device)
    for start, end in ((origin, c), (c, d), (d, origin)):
        poly, count = _cut(poly, count, start, end)
    # Slots past the count repeat the first vertex: they add nothing to the area.
    index = torch.arange(poly.shape[1], device=p.device)
    poly = torch.where((index < count[:, None])[..., None], poly, poly[:, :1])
    area = polygon_area(poly) * (s1 * s2).to(poly.dtype)
    return area.reshape(t, np_ * nq).sum(1)
