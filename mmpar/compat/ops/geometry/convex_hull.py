"""Batched convex hulls of small point sets, for the point-set ops of mmcv's ``mmcv.ops``.

Not an mmcv module: :mod:`~mmpar.compat.ops.min_area_polygons` and
:mod:`~mmpar.compat.ops.convex_iou` share it. mmcv's kernels wrap each set with a
Jarvis march; :func:`convex_hull` gives the hull those kernels reach: the extreme
vertices (a point in the middle of a hull edge is left out), counter-clockwise
(positive signed area with ``x`` right and ``y`` up), starting at the lowest point
(least ``y``, then least ``x``). Of points with equal coordinates the first one
stands for all.

Every pair ``(i, j)`` of a set is tested as a hull edge at once: ``j`` follows ``i``
when no point lies right of ``i -> j`` and the points on its line lie between
``i`` and ``j``. The tests run in float64, each product rounded on its own (never fused
into a sum), on every device alike, so that a point's test against its own edge is
exactly 0; a set costs ``K**3`` comparisons, so sets are taken in chunks.

:func:`convex_hull_area` gives only the area, for larger sets (mmcv's
quadrilateral overlap takes the hull of up to 24 points per pair): about
``K * log K`` work per set and round, over a few rounds.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["convex_hull", "convex_hull_area", "gather_points", "hull_mask"]

# Elements of the largest (chunk, K, K, K) tensor of the edge tests.
_CHUNK_ELEMENTS = 1 << 22
# convex_hull_area: a turn below this many machine epsilons of the squared extent of
# the set counts as no turn (its vertex is dropped, changing the area by as little).
_TURN_TOLERANCE_EPS = 16


def convex_hull(points: Tensor) -> tuple[Tensor, Tensor]:
    """The convex hull of each point set, as indices into the set.

    Args:
        points: ``(..., K, 2)`` float, ``K >= 1``; finite.

    Returns:
        ``(order, count)``: ``order`` ``(..., K)`` long, the hull's vertices in
        counter-clockwise order from the lowest point, then padded with that first
        vertex again; ``count`` ``(...,)`` long, the number of hull vertices: 1 when
        all the points are equal, 2 when they lie on one line.
    """
    batch, k = points.shape[:-2], points.shape[-2]
    flat = points.detach().reshape(-1, k, 2).to(torch.float64)
    orders, counts = [], []
    step = max(1, _CHUNK_ELEMENTS // (k**3))
    for start in range(0, flat.shape[0], step):
        order, count = _hull(flat[start : start + step])
        orders.append(order)
        counts.append(count)
    if not orders:
        empty = torch.zeros((0, k), dtype=torch.long, device=points.device)
        return empty.reshape(*batch, k), empty[:, 0].reshape(batch)
    return torch.cat(orders).reshape(*batch, k), torch.cat(counts).reshape(batch)


def _hull(pts: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`convex_hull` of ``(B, K, 2)`` float64 points."""
    n, k = pts.shape[:2]
    arange = torch.arange(k, device=pts.device)
    d = pts[:, None, :, :] - pts[:, :, None, :]  # d[b, i, j] = p_j - p_i
    # cross[b, i, j, m] = (p_j - p_i) x (p_m - p_i): > 0 when m is left of i -> j. Each
    # product is rounded on its own, never fused: a matmul may fuse one product into the
    # sum (cuBLAS does), and then cross[i, j, j] is a rounding error instead of 0.
    dx, dy = d[..., 0], d[..., 1]
    cross = dx[..., :, None] * dy[..., None, :] - dy[..., :, None] * dx[..., None, :]
    dot = dx[..., :, None] * dx[..., None, :] + dy[..., :, None] * dy[..., None, :]
    length2 = dot.diagonal(dim1=-2, dim2=-1)[..., None]
    between = (dot >= 0) & (dot <= length2)
    is_edge = ((cross > 0) | ((cross == 0) & between)).all(-1) & (length2[..., 0] > 0)
    # Of equal points only the first is a vertex; argmax picks the first such j.
    same = (d == 0).all(-1)
    first = ~(same & (arange[None, :] < arange[:, None])).any(-1)  # (B, K)
    is_edge &= first[:, None, :]
    has_next = is_edge.any(-1)
    succ = torch.where(has_next, is_edge.to(torch.uint8).argmax(-1), arange)
    # The lowest point, then the leftmost of those: the first index among ties.
    low = pts[..., 1] == pts[..., 1].amin(-1, keepdim=True)
    start = torch.where(low, pts[..., 0], torch.inf).argmin(-1)
    order = [start]
    for _ in range(k - 1):
        order.append(succ.gather(1, order[-1][:, None])[:, 0])
    walk = torch.stack(order, 1)
    back = (walk == start[:, None]) & (arange > 0)
    count = torch.where(back.any(1), back.to(torch.uint8).argmax(1), k)
    walk = torch.where(arange < count[:, None], walk, start[:, None])
    return walk, count


def gather_points(points: Tensor, order: Tensor) -> Tensor:
    """``points[..., order, :]``: ``(..., K, 2)`` and ``(..., V)`` long -> ``(..., V, 2)``."""
    return points.gather(-2, order[..., None].expand(*order.shape, 2))


def hull_mask(order: Tensor, count: Tensor) -> Tensor:
    """``(..., K)`` bool: which points of each set are hull vertices.

    Args:
        order: ``(..., K)`` from :func:`convex_hull`.
        count: ``(...,)`` from :func:`convex_hull`.
    """
    k = order.shape[-1]
    valid = torch.arange(k, device=order.device) < count[..., None]
    mask = torch.zeros(order.shape, dtype=torch.bool, device=order.device)
    return mask.scatter(-1, torch.where(valid, order, order[..., :1]), True)


def convex_hull_area(points: Tensor, valid: Tensor) -> Tensor:
    """The area of the convex hull of each set's valid points, batched and differentiable.

    The valid points are sorted by angle around their mean (inside the hull), which
    lists them as a polygon that the mean sees whole. Round after round, of each run
    of neighbouring vertices where that polygon does not turn left, the first is
    dropped: it lies in the triangle of its neighbours and the mean, so it is no hull
    vertex, and its neighbours stay. When every vertex turns left, what stays is the
    hull. Turns within a tolerance of the set's extent count as none, so that
    repeated and collinear points go (changing the area by as little).

    Args:
        points: ``(B, K, 2)`` float; invalid points may hold anything finite.
        valid: ``(B, K)`` bool.

    Returns:
        ``(B,)`` areas, ``>= 0``, in ``points``' dtype: 0 for fewer than 3 valid
        points, or points on one line. The gradient reaches the hull's vertices.
    """
    n, k = valid.shape
    if n == 0:
        return points.sum((1, 2))
    arange = torch.arange(k, device=points.device)
    pts = torch.where(valid[..., None], points.detach(), 0)
    count = valid.sum(1, keepdim=True)
    centre = pts.sum(1) / count.clamp(min=1)
    # The area does not depend on the origin: a detached centre loses no gradient.
    rel = points - centre[:, None]
    flat = torch.where(valid[..., None], rel.detach(), 0)
    scale = flat.abs().flatten(1).amax(1)
    tol = _TURN_TOLERANCE_EPS * torch.finfo(points.dtype).eps * scale * scale
    # By angle, then by distance (stable sorts): equal points end up side by side.
    distance = flat.square().sum(-1)
    alive = valid & (distance > 0)  # a point at the mean is inside the hull, or all are
    by_distance = distance.argsort(dim=1, stable=True)
    angle = torch.atan2(flat[..., 1], flat[..., 0]).gather(1, by_distance)
    key = torch.where(alive.gather(1, by_distance), angle, torch.inf)
    order = by_distance.gather(1, key.argsort(dim=1, stable=True))
    width = max(1, int(alive.sum(1).max()))  # the alive points come first
    order = order[:, :width]
    arange = arange[:width]
    rel = rel.gather(1, order[..., None].expand(-1, -1, 2))
    flat = flat.gather(1, order[..., None].expand(-1, -1, 2))
    alive = alive.gather(1, order)
    rows = torch.arange(n, device=points.device)  # the sets that may still drop a vertex
    while rows.numel() > 0:
        live = alive.index_select(0, rows)
        drop = _flat_vertices(flat.index_select(0, rows), live, tol.index_select(0, rows), arange)
        alive = alive.index_put((rows,), live & ~drop)
        rows = rows[drop.any(1)]
    _, nxt = _neighbours(alive, arange)
    after = rel.gather(1, nxt[..., None].expand(-1, -1, 2))
    twice = torch.where(alive, _cross(rel, after), 0).sum(1)
    return 0.5 * twice.abs()


def _neighbours(alive: Tensor, arange: Tensor) -> tuple[Tensor, Tensor]:
    """``(B, K)`` indices of each position's previous and next alive position, cyclically.

    Rows without an alive position get valid indices that mean nothing.
    """
    k = alive.shape[1]
    ahead = torch.where(alive, arange, k).flip(1).cummin(1).values.flip(1)  # first alive >= i
    nxt = torch.cat((ahead[:, 1:], ahead.new_full((ahead.shape[0], 1), k)), 1)
    nxt = torch.where(nxt == k, ahead[:, :1], nxt).clamp(max=k - 1)
    behind = torch.where(alive, arange, -1).cummax(1).values  # last alive <= i
    prev = torch.cat((behind.new_full((behind.shape[0], 1), -1), behind[:, :-1]), 1)
    prev = torch.where(prev < 0, behind[:, -1:], prev).clamp(min=0)
    return prev, nxt


def _flat_vertices(flat: Tensor, alive: Tensor, tol: Tensor, arange: Tensor) -> Tensor:
    """``(B, K)`` bool: the vertices one round of :func:`convex_hull_area` drops.

    Of each run of neighbouring vertices where the polygon turns right or not above
    ``tol``, the first; where every vertex is flat, every other one.
    """
    prev, nxt = _neighbours(alive, arange)
    before = flat.gather(1, prev[..., None].expand(-1, -1, 2))
    after = flat.gather(1, nxt[..., None].expand(-1, -1, 2))
    flat_turn = alive & (_cross(flat - before, after - flat) <= tol[:, None])
    drop = flat_turn & ~flat_turn.gather(1, prev)
    rank = alive.cumsum(1) - 1
    size = alive.sum(1, keepdim=True)
    all_flat = (flat_turn == alive).all(1, keepdim=True) & (size > 0)
    alternate = alive & (rank % 2 == 0) & ~((rank == size - 1) & (size % 2 == 1))
    return torch.where(all_flat, alternate, drop)


def _cross(a: Tensor, b: Tensor) -> Tensor:
    """``a x b`` of ``(..., 2)`` vectors."""
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
