"""Quadrilaterals as mmcv's kernels measure them (not an mmcv module).

Shared by :mod:`~mmpar.compat.ops.box_iou_quadri` and ``nms_quadri``
(:mod:`~mmpar.compat.ops.suppression.rotated_nms`). A quadrilateral is 4 vertices ``(..., 4, 2)``
taken in the order given (mmcv does not reorder them). mmcv 1.7.2's
``single_box_iou_quadri`` (``box_iou_rotated_utils.hpp``) defines:

* the area (:func:`quadri_area`): the two triangles of the fan from the first
  vertex, each counted positive: ``(|(v1 - v0) x (v2 - v0)| + |(v2 - v0) x (v3 -
  v0)|) / 2``, the area of a convex quadrilateral listed either way round;
* the intersection (:func:`quadri_intersection_area`): the area of the convex hull
  of the points it collects, 0 with fewer than 3: where an edge of one crosses an
  edge of the other (edges ``v_i -> v_{i+1}``; the pair skipped where ``|det| <=
  1e-14``, kept where both edge parameters lie in ``[0, 1]``), and the vertices of
  each that it judges inside the other. That judgement projects the vertex ``P``
  onto the other's first and last edges, ``A = v0``, ``B = v1``, ``D = v3``:
  inside when ``0 <= AP.AB <= AB.AB`` and ``0 <= AP.AD <= AD.AD``.

The judgement is exact for rectangles (of any orientation, either way round), so
the intersection of two rectangles is their exact overlap. For other
quadrilaterals it tests the region between the two strips square to ``AB`` and
``AD`` (:func:`quadri_reach` bounds it), which is not the quadrilateral: the
result then differs from the exact overlap, and mmcv's own test expects it (a
trapezoid and a rectangle overlap with IoU 1.0 there, 0.78 exactly).
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.geometry.convex_hull import convex_hull_area

__all__ = ["quadri_area", "quadri_intersection_area", "quadri_reach"]

# mmcv's kernel skips a pair of edges whose cross product is at most this.
_PARALLEL = 1e-14
# quadri_reach: a strip region whose edges meet at a sine below this counts as unbounded.
_MIN_SINE = 1e-2
# quadri_reach widens the box by this much of its size and of its distance to 0.
_REACH_MARGIN = 1e-4


def _cross(a: Tensor, b: Tensor) -> Tensor:
    """``a x b`` of ``(..., 2)`` vectors, as mmcv's ``cross_2d``."""
    return a[..., 0] * b[..., 1] - b[..., 0] * a[..., 1]


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1]


def quadri_area(quads: Tensor) -> Tensor:
    """mmcv's area of quadrilaterals: ``(..., 4, 2)`` -> ``(...)``, ``>= 0``."""
    origin = quads[..., :1, :]
    fan = quads[..., 1:, :] - origin
    return 0.5 * (
        _cross(fan[..., 0, :], fan[..., 1, :]).abs() + _cross(fan[..., 1, :], fan[..., 2, :]).abs()
    )


def _judged_inside(points: Tensor, quads: Tensor) -> Tensor:
    """``(k, V)`` bool: mmcv's judgement of ``(k, V, 2)`` points inside ``(k, 4, 2)`` quads."""
    a = quads[:, :1]
    ab = quads[:, 1:2] - a
    da = a - quads[:, 3:4]
    ap = points - a
    along_ab = _dot(ap, ab)
    along_ad = -_dot(ap, da)
    return (
        (along_ab >= 0) & (along_ad >= 0) & (along_ab <= _dot(ab, ab)) & (along_ad <= _dot(da, da))
    )


def quadri_intersection_area(p: Tensor, q: Tensor) -> Tensor:
    """mmcv's intersection area of aligned pairs of quadrilaterals (see the module docstring).

    Differentiable where the collected points and their hull do not change; the
    caller centres each pair (mmcv centres it on the mean of its 8 vertices).

    Args:
        p: ``(k, 4, 2)`` float vertices.
        q: ``(k, 4, 2)`` float vertices, same dtype.

    Returns:
        ``(k,)`` areas.
    """
    edges_p = p.roll(-1, 1) - p
    edges_q = q.roll(-1, 1) - q
    # [:, i, j]: edge i of p against edge j of q.
    ep, eq = edges_p[:, :, None], edges_q[:, None]
    apart = q[:, None] - p[:, :, None]
    det = _cross(eq, ep)
    crosses = det.abs() > _PARALLEL
    det = torch.where(crosses, det, 1.0)  # finite, gradient 0 where skipped
    t_p = _cross(eq, apart) / det
    t_q = _cross(ep, apart) / det
    crosses = crosses & (t_p >= 0) & (t_p <= 1) & (t_q >= 0) & (t_q <= 1)
    t_p = torch.where(crosses, t_p, 0.0)
    crossings = (p[:, :, None] + ep * t_p[..., None]).flatten(1, 2)
    points = torch.cat((crossings, p, q), 1)
    valid = torch.cat((crosses.flatten(1), _judged_inside(p, q), _judged_inside(q, p)), 1)
    return convex_hull_area(points, valid)


def quadri_reach(quads: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Axis-aligned bounds of every point mmcv's intersection can collect from a quadrilateral.

    The points a pair collects lie in both boxes' bounds: in the quadrilateral's own
    bounds, or in the region its inside-judgement accepts (see the module docstring).
    Computed in float64 and widened for rounding; unbounded (``-inf``/``inf``) where
    that region is (``AB`` and ``AD`` near parallel) or a coordinate is not finite.

    Args:
        quads: ``(n, 4, 2)`` float vertices.

    Returns:
        ``left, top, right, bottom``, each ``(n,)`` float64.
    """
    quads = quads.to(torch.float64)
    a = quads[:, 0]
    u = quads[:, 1] - a
    v = quads[:, 3] - a
    det = _cross(u, v)
    bounded = det.abs() > _MIN_SINE * torch.hypot(*u.unbind(-1)) * torch.hypot(*v.unbind(-1))
    det = torch.where(bounded, det, 1.0)
    uu, vv = _dot(u, u), _dot(v, v)
    # The region's corners: a + x with x.u in {0, uu} and x.v in {0, vv}.
    along_u = torch.stack((v[:, 1], -v[:, 0]), -1) * (uu / det)[:, None]
    along_v = torch.stack((-u[:, 1], u[:, 0]), -1) * (vv / det)[:, None]
    corners = torch.stack((a, a + along_u, a + along_v, a + along_u + along_v), 1)
    low = torch.minimum(quads.amin(1), corners.amin(1))
    high = torch.maximum(quads.amax(1), corners.amax(1))
    pad = _REACH_MARGIN * ((high - low) + torch.maximum(low.abs(), high.abs()))
    bounded &= torch.isfinite(pad).all(-1)
    inf = torch.tensor(torch.inf, dtype=torch.float64, device=quads.device)
    low = torch.where(bounded[:, None], low - pad, -inf)
    high = torch.where(bounded[:, None], high + pad, inf)
    return low[:, 0], low[:, 1], high[:, 0], high[:, 1]
