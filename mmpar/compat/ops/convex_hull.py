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
``i`` and ``j``. The tests run in float64, where they are exact for float32
coordinates; a set costs ``K**3`` comparisons, so sets are taken in chunks.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["convex_hull", "gather_points", "hull_mask"]

# Elements of the largest (chunk, K, K, K) tensor of the edge tests.
_CHUNK_ELEMENTS = 1 << 22


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
    # cross[b, i, j, m] = (p_j - p_i) x (p_m - p_i): > 0 when m is left of i -> j. Sums of
    # two products, as einsum (a batched matmul) is several times faster than broadcasting.
    cross = torch.einsum("bijc,bimc->bijm", torch.stack([d[..., 0], -d[..., 1]], -1), d.flip(-1))
    dot = torch.einsum("bijc,bimc->bijm", d, d)
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
