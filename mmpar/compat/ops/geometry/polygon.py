"""Convex-polygon geometry shared by the rotated-box ops (not an mmcv module).

Batched, differentiable, plain torch on any device. A polygon is a ``(..., V, 2)``
tensor of ``(x, y)`` vertices listed in order around it; a polygon with fewer real
vertices may repeat one (zero-length edges are harmless everywhere here).

Orientation: a polygon is *positively oriented* when its shoelace signed area
``sum(x_i * y_{i+1} - x_{i+1} * y_i) / 2`` is positive: counter-clockwise with the
y axis up, which is clockwise on an image, whose y axis points down.

* :func:`rotated_box_corners`: the 4 corners of ``(cx, cy, w, h, angle)`` boxes,
  positively oriented, with mmcv's ``clockwise`` angle convention.
* :func:`polygon_area`: the shoelace signed area.
* :func:`convex_intersection_area`: the area of the intersection of two convex
  polygons, by Sutherland-Hodgman clipping in fixed-size tensors.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype

__all__ = ["convex_intersection_area", "polygon_area", "rotated_box_corners"]

# Corners of a box in its own frame, in units of (w, h): A, B, C, D of mmcv's
# box_iou_rotated docstring (on an image at angle 0: top-left, top-right,
# bottom-right, bottom-left).
_CORNER_X = (-0.5, 0.5, 0.5, -0.5)
_CORNER_Y = (-0.5, -0.5, 0.5, 0.5)
# A vertex counts as inside a clipping edge's half-plane up to this many machine
# epsilons of the pair's coordinate scale outside it: rounding never splits the
# outside vertices of a convex polygon into two runs.
_TOLERANCE_EPS = 32


def rotated_box_corners(boxes: Tensor, clockwise: bool = True) -> Tensor:
    """The corners of rotated boxes.

    Args:
        boxes: ``(..., 5)`` float, ``(cx, cy, w, h, angle)``, the angle in radians.
        clockwise: mmcv's convention: with ``True`` a positive angle turns the box
            clockwise on an image (x right, y down), i.e. the rotation matrix is
            ``[[cos, -sin], [sin, cos]]``; ``False`` negates the angle.

    Returns:
        ``(..., 4, 2)`` corners in ``boxes``' dtype: ``A = c + R (-w/2, -h/2)``, then
        ``B = c + R (w/2, -h/2)``, ``C = c + R (w/2, h/2)``, ``D = c + R (-w/2, h/2)``.
        Positively oriented when ``w * h > 0``.
    """
    if not isinstance(boxes, Tensor) or not boxes.is_floating_point():
        found = boxes.dtype if isinstance(boxes, Tensor) else type(boxes).__name__
        raise TypeError(f"polygon.rotated_box_corners: boxes must be a float tensor, got {found}")
    if boxes.dim() == 0 or boxes.shape[-1] != 5:
        raise ValueError(
            f"polygon.rotated_box_corners: boxes must have shape (..., 5), got {tuple(boxes.shape)}"
        )
    cx, cy, w, h, angle = (t[..., None] for t in boxes.unbind(-1))
    if not clockwise:
        angle = -angle
    cos, sin = torch.cos(angle), torch.sin(angle)
    local_x = w * boxes.new_tensor(_CORNER_X)
    local_y = h * boxes.new_tensor(_CORNER_Y)
    x = cx + local_x * cos - local_y * sin
    y = cy + local_x * sin + local_y * cos
    return torch.stack((x, y), -1)


def polygon_area(poly: Tensor) -> Tensor:
    """The shoelace signed area of polygons.

    Args:
        poly: ``(..., V, 2)`` float vertices.

    Returns:
        ``(...)`` signed areas: positive for positively oriented polygons (see the
        module docstring), negative for the reverse order; ``abs()`` is the area.
    """
    nxt = poly.roll(-1, dims=-2)
    return 0.5 * (poly[..., 0] * nxt[..., 1] - poly[..., 1] * nxt[..., 0]).sum(-1)


def _check_polygon(name: str, poly: object) -> Tensor:
    if not isinstance(poly, Tensor) or not poly.is_floating_point():
        found = poly.dtype if isinstance(poly, Tensor) else type(poly).__name__
        raise TypeError(
            f"polygon.convex_intersection_area: {name} must be a float tensor, got {found}"
        )
    if poly.dim() < 2 or poly.shape[-1] != 2 or poly.shape[-2] == 0:
        raise ValueError(
            f"polygon.convex_intersection_area: {name} must have shape (..., V, 2) with V >= 1, "
            f"got {tuple(poly.shape)}"
        )
    return poly


def convex_intersection_area(p: Tensor, q: Tensor) -> Tensor:
    """The area of the intersection of two convex polygons, batched and differentiable.

    Each polygon must be convex and listed in order around it, in either orientation
    (each polygon's own orientation is read from its signed area). Repeated vertices
    (padding), collinear and parallel edges, identical or touching polygons and
    zero-area polygons give finite results and finite gradients. The result is
    clamped to ``[0, min(|area(p)|, |area(q)|)]``, and is exactly 0 (with a 0
    gradient) where an edge of one polygon has the other wholly outside it.

    Computed in float32 (float64 for float64 input), on coordinates centred on the
    pair, by clipping the polygon with more vertices by each edge of the other:
    about ``(P + Q) * min(P, Q)`` work per pair, all pairs at once (no chunking:
    callers bound the batch).

    Args:
        p: ``(..., P, 2)`` float vertices.
        q: ``(..., Q, 2)`` float vertices; the leading dimensions of ``p`` and ``q``
            broadcast together.

    Returns:
        ``(...)`` areas, in the dtype ``p`` and ``q`` promote to.
    """
    p, q = _check_polygon("p", p), _check_polygon("q", q)
    # (torch.broadcast_shapes imports torch._refs on first use: a second or more.)
    batch = torch.broadcast_tensors(p[..., 0, 0], q[..., 0, 0])[0].shape
    out_dtype = torch.promote_types(p.dtype, q.dtype)
    dtype = float_compute_dtype(out_dtype)
    if p.shape[-2] > q.shape[-2]:  # the intersection is symmetric: fewer clipping edges
        p, q = q, p
    p = p.to(dtype).expand(*batch, *p.shape[-2:]).reshape(-1, p.shape[-2], 2)
    q = q.to(dtype).expand(*batch, *q.shape[-2:]).reshape(-1, q.shape[-2], 2)
    # The area does not depend on the origin: a detached centre loses no gradient.
    centre = torch.cat((p, q), 1).detach().mean(1, keepdim=True)
    p, q = p - centre, q - centre
    area_p, area_q = polygon_area(p), polygon_area(q)
    eps = torch.finfo(dtype).eps
    scale = torch.cat((p, q), 1).detach().abs().flatten(1).amax(1)
    tol = _TOLERANCE_EPS * eps * scale
    floor = (eps * scale * scale).clamp(min=torch.finfo(dtype).tiny)
    # Inward normals: left of each edge for a positively oriented p, else right.
    sign = torch.where(area_p.detach() < 0, -1.0, 1.0).to(dtype)[:, None]
    edges = p.roll(-1, dims=1) - p
    normals = torch.stack((-edges[..., 1], edges[..., 0])) * sign  # (2, K, P)
    # (2, K, Q + 1): the x and y planes, each contiguous, the first vertex repeated
    # at the end so that every edge is a pair of neighbours.
    poly = q.permute(2, 0, 1)
    poly = torch.cat((poly, poly[..., :1]), 2)
    empty = torch.zeros(poly.shape[1], dtype=torch.bool, device=poly.device)
    for i in range(p.shape[1]):
        poly, outside = _clip(poly, p[:, i].T, normals[:, :, i], tol, floor)
        empty = empty | outside
    x, y = poly[0], poly[1]
    inter = 0.5 * (x[:, :-1] * y[:, 1:] - x[:, 1:] * y[:, :-1]).sum(1).abs()
    bound = torch.minimum(area_p.abs(), area_q.abs())
    inter = torch.where(empty, torch.zeros_like(inter), torch.minimum(inter, bound))
    return inter.reshape(batch).to(out_dtype)


def _clip(
    poly: Tensor, point: Tensor, normal: Tensor, tol: Tensor, floor: Tensor
) -> tuple[Tensor, Tensor]:
    """One Sutherland-Hodgman step: ``poly`` cut by a half-plane, one vertex longer.

    ``poly`` is convex, so its vertices outside the half-plane form one run. Each
    such vertex is replaced by the run's exit crossing (repeated vertices add nothing
    to the shoelace sum), and the entry crossing is inserted after the run: the
    result is the clipped polygon, convex again. With no crossing, the last vertex
    is repeated.

    Args:
        poly: ``(2, K, n + 1)`` closed polygons (the last vertex is the first): the
            x plane, then the y plane.
        point: ``(2, K)`` a point of the boundary line.
        normal: ``(2, K)`` the normal pointing into the half-plane (the edge's length).
        tol: ``(K,)`` how far outside a vertex still counts as inside.
        floor: ``(K,)`` a tiny positive floor for denominators (squared length units).

    Returns:
        ``(2, K, n + 2)`` closed polygons, and ``(K,)`` whether every vertex was outside.
    """
    n = poly.shape[2] - 1
    length = torch.hypot(normal[0], normal[1]).detach()  # for the tolerance only
    rel = poly - point[..., None]
    dist = normal[0][:, None] * rel[0] + normal[1][:, None] * rel[1]  # distance * length
    slack = (tol * length + floor)[:, None]
    inside = dist >= -(tol * length)[:, None]
    cur, prev, in_cur, in_prev = poly[..., 1:], poly[..., :-1], inside[:, 1:], inside[:, :-1]
    exit_point = _crossing(prev, dist[:, :-1], cur, dist[:, 1:], slack)
    # The rest of the run collapses onto the run's exit crossing: projections onto the
    # line could reach past the clipped polygon, which the next cuts take as convex.
    exit_at = (in_prev & ~in_cur).to(torch.uint8).argmax(1)[:, None]  # 0 without an exit
    run_exit = exit_point.gather(2, exit_at.expand(2, -1, -1))
    first = torch.where(in_cur, cur, torch.where(in_prev, exit_point, run_exit))
    # The run of outside vertices ends before the vertex (of ``first``) where it enters.
    enters = in_cur & ~in_prev
    has_entry = enters.any(1)
    at = enters.to(torch.uint8).argmax(1)[:, None]  # 0 without an entry
    entry = _crossing(
        cur.gather(2, at.expand(2, -1, -1)),
        dist[:, 1:].gather(1, at),
        prev.gather(2, at.expand(2, -1, -1)),
        dist[:, :-1].gather(1, at),
        slack,
    )
    extra = torch.where(has_entry[:, None], entry, first.gather(2, at.expand(2, -1, -1)))
    stacked = torch.cat((first, extra), 2)
    j = torch.arange(n + 2, device=poly.device) % (n + 1)
    src = torch.where(j < at, j, torch.where(j == at, n, j - 1))
    return stacked.gather(2, src.expand(2, -1, -1)), ~inside.any(1)


def _crossing(v_in: Tensor, d_in: Tensor, v_out: Tensor, d_out: Tensor, slack: Tensor) -> Tensor:
    """Where the segment from an inside vertex to an outside one meets the line.

    ``v_in``/``v_out`` are ``(2, K, m)`` coordinate planes; ``d_in`` and ``d_out``
    ``(K, m)`` the vertices' signed distances (times the normal's length). Where
    they are not an inside/outside pair the result is finite and unused; the clamp
    keeps that so, and keeps the gradient of the unused lanes 0.
    """
    t = (d_in / (d_in - d_out).clamp(min=slack)).clamp(0, 1)
    return v_in + t * (v_out - v_in)
