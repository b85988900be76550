"""Minimum-area rectangles of point sets: mmcv 1.7.2's ``mmcv.ops.min_area_polygons``.

mmcv's kernel takes each set's convex hull (counter-clockwise from its lowest
point, see :mod:`~mmpar.compat.ops.geometry.convex_hull`), and tries the direction of each
hull edge in turn, from the edge leaving that first vertex: the edge's angle folded
into ``[0, pi/2)`` with mmcv's float32 constant ``pi = 3.1415926``, the hull
rotated by it, the box of the rotated points. The first angle of least area wins,
and its box, rotated back, is the rectangle, written from the corner
``(x_max, y_min)`` of the rotated frame: ``(x_max, y_min), (x_min, y_min),
(x_min, y_max), (x_max, y_max)``. Here every edge is tried at once, in float32 for
every input dtype as in the kernel (which reads the points into floats), so that
the same angle, hence the same first corner, wins.

Several orientations often give the same least area in real numbers (a rectangle
flush with any side of a triangle of hull points has twice the triangle's area),
and the kernel's choice between those rectangles is float32 rounding. The same
float32 steps here make the same choice in most such ties; where the rounding of
``cos``/``sin`` (which differs between devices) decides otherwise, the rectangle
is another one of the same area.

Differences from mmcv-full: any number ``K >= 1`` of points per set is taken (the
kernel reads 9); a set with a non-finite coordinate gives NaN (the kernel skips
such values); a set whose least area reaches ``1e12`` gets its rectangle (the
kernel writes zeros). Not differentiable, as in mmcv.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mmpar.compat.ops.geometry.convex_hull import convex_hull, gather_points, hull_mask

__all__ = ["min_area_polygons"]

# mmcv's float32 pi and its half, in float32 and float64.
_PI32 = torch.tensor(3.1415926, dtype=torch.float32)
_HALF_PI32 = (_PI32 / 2).item()
_HALF_PI64 = _PI32.item() / 2


def _check(pointsets: object) -> Tensor:
    if not isinstance(pointsets, Tensor) or not pointsets.is_floating_point():
        found = pointsets.dtype if isinstance(pointsets, Tensor) else type(pointsets).__name__
        raise TypeError(
            f"mmcv.ops.min_area_polygons: pointsets must be a floating-point tensor, got {found}"
        )
    if pointsets.dim() != 2 or pointsets.shape[1] == 0 or pointsets.shape[1] % 2:
        raise ValueError(
            "mmcv.ops.min_area_polygons: pointsets must have shape (N, 2K), K >= 1 "
            f"(mmcv's (N, 18): 9 points x, y), got {tuple(pointsets.shape)}"
        )
    return pointsets


def _edge_angles(edges: Tensor) -> Tensor:
    """The kernel's orientation of each ``(..., 2)`` float32 edge, in about ``[0, pi/2]``.

    ``atan2`` in float64, rounded to float32; a non-negative angle is reduced by
    ``fmod`` (in float64), a negative one by adding whole quarter turns (in float32),
    with mmcv's truncation: an edge pointing straight down gives almost ``pi/2``.
    """
    angle = torch.atan2(edges[..., 1].double(), edges[..., 0].double()).float()
    folded_up = torch.fmod(angle.double(), _HALF_PI64).float()
    half_pi = torch.full_like(angle, _HALF_PI32)
    turns = (angle / half_pi - 1).trunc()
    folded_down = angle - turns * half_pi
    return torch.where(angle >= 0, folded_up, folded_down)


def min_area_polygons(pointsets: Tensor) -> Tensor:
    """The smallest rectangle around each point set (oriented RepPoints' boxes).

    Args:
        pointsets: ``(N, 2K)`` float, ``x1, y1, ..., xK, yK`` per row; mmcv's sets
            have 9 points (``(N, 18)``).

    Returns:
        ``(N, 8)`` in ``pointsets``' dtype: the rectangle's corners ``x1, y1, ...,
        x4, y4`` in mmcv's order (see the module docstring). A set of equal points
        gives that point four times; points on a line give the segment twice.

    Raises:
        TypeError: ``pointsets`` is not a floating-point tensor.
        ValueError: ``pointsets`` is not ``(N, 2K)``.
    """
    pointsets = _check(pointsets)
    n, k = pointsets.shape[0], pointsets.shape[1] // 2
    if n == 0:
        return pointsets.new_zeros((0, 8))
    pts = pointsets.detach().float().reshape(n, k, 2)
    finite = torch.isfinite(pts).all(-1).all(-1)
    pts = torch.where(finite[:, None, None], pts, torch.zeros_like(pts))
    order, count = convex_hull(pts)
    hull = gather_points(pts, order)
    # The padding repeats the first vertex: the last hull edge closes the hull, and the
    # padding's edges, of length 0, are masked out below.
    edges = hull.roll(-1, 1) - hull
    angle = _edge_angles(edges)  # (n, K) one candidate per hull edge
    # float32 cos and sin as correctly rounded as can be: those of the angle in float64.
    cos, sin = (f(angle.double()).float()[..., None] for f in (torch.cos, torch.sin))
    x, y = pts[:, None, :, 0], pts[:, None, :, 1]
    rot_x = cos * x + sin * y  # (n, K angles, K points)
    rot_y = -sin * x + cos * y
    vertex = hull_mask(order, count)[:, None, :]
    x_min = torch.where(vertex, rot_x, math.inf).amin(-1)
    x_max = torch.where(vertex, rot_x, -math.inf).amax(-1)
    y_min = torch.where(vertex, rot_y, math.inf).amin(-1)
    y_max = torch.where(vertex, rot_y, -math.inf).amax(-1)
    area = (x_max - x_min) * (y_max - y_min)
    # A single point's hull has one edge, of length 0 (the kernel's angle 0).
    tried = torch.arange(k, device=pts.device) < count[:, None]
    best = torch.where(tried, area, math.inf).argmin(1, keepdim=True)
    c, s, x0, x1, y0, y1 = (
        t.gather(1, best)[:, 0] for t in (cos[..., 0], sin[..., 0], x_min, x_max, y_min, y_max)
    )
    corners = [(x1, y0), (x0, y0), (x0, y1), (x1, y1)]
    out = torch.stack([v for u, w in corners for v in (u * c - w * s, u * s + w * c)], 1)
    out = torch.where(finite[:, None], out, torch.full_like(out, math.nan))
    return out.to(pointsets.dtype)
