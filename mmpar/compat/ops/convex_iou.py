"""IoU and GIoU of point sets' convex hulls with polygons: mmcv 1.7.2's ``mmcv.ops.convex_iou``.

A point set (9 points, as oriented RepPoints predict them) stands for its convex
hull (:mod:`~mmpar.compat.ops.geometry.convex_hull`); a polygon is 4 vertices in either
orientation. ``IoU = I / (A + B - I)`` with ``I`` the area of the intersection and
``A``, ``B`` the two areas. ``GIoU = IoU - (C - U) / C`` with ``U = A + B - I`` and
``C`` the area of the convex hull of all 13 points, as mmcv's kernel computes it.

:func:`convex_giou` also returns, as mmcv does, the gradient of the GIoU with
respect to the 18 coordinates, which mmrotate's ``ConvexGIoULoss`` passes on as
its own. It is autograd's gradient of the same expression, with the intersection
summed as mmcv's kernel sums it (:mod:`~mmpar.compat.ops.geometry.fan_intersection`), so
that where the areas have no derivative (a hull edge along a polygon edge) it is
the one mmcv gives. Points that are not hull vertices get 0; of equal points, the
first one gets the gradient.

Differences from mmcv-full: the polygon is taken to be convex (mmcv's sum also
measures a non-convex one; the rotated boxes mmrotate passes are convex). The
areas are computed in float32 for :func:`convex_iou` (float64 for float64 input),
and in float64 for :func:`convex_giou`, as mmcv's kernels do; both return the
pointsets' dtype. A pair whose union is empty gives NaN, as in mmcv, and so does a
pair with a non-finite coordinate.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.geometry.convex_hull import convex_hull, gather_points
from mmpar.compat.ops.geometry.fan_intersection import fan_intersection_area
from mmpar.compat.ops.geometry.polygon import convex_intersection_area, polygon_area

__all__ = ["convex_giou", "convex_iou"]

# Pairs of one call of convex_intersection_area; rows of one GIoU batch.
_CHUNK_PAIRS = 1 << 15
_GIOU_ROWS = 1 << 12


def _check(op: str, name: str, value: object, width: int) -> Tensor:
    if not isinstance(value, Tensor) or not value.is_floating_point():
        found = value.dtype if isinstance(value, Tensor) else type(value).__name__
        raise TypeError(f"mmcv.ops.{op}: {name} must be a floating-point tensor, got {found}")
    if value.dim() != 2 or value.shape[1] != width:
        raise ValueError(
            f"mmcv.ops.{op}: {name} must have shape (N, {width}), got {tuple(value.shape)}"
        )
    return value


def _check_pair(op: str, pointsets: object, polygons: object) -> Tuple[Tensor, Tensor]:
    points = _check(op, "pointsets", pointsets, 18)
    polys = _check(op, "polygons", polygons, 8)
    if points.device != polys.device:
        raise ValueError(
            f"mmcv.ops.{op}: pointsets and polygons must be on the same device, "
            f"got {points.device} and {polys.device}"
        )
    return points, polys


def _counter_clockwise(polygons: Tensor) -> Tensor:
    """``(M, 8)`` polygons as ``(M, 4, 2)`` vertices, reversed where they run clockwise."""
    quads = polygons.reshape(-1, 4, 2)
    backwards = (polygon_area(quads) < 0)[:, None, None]
    return torch.where(backwards, quads.flip(1), quads)


def _hulls(pointsets: Tensor) -> Tensor:
    """``(N, 18)`` point sets -> ``(N, 9, 2)`` hulls, padded with their first vertex."""
    points = pointsets.reshape(-1, 9, 2)
    order, _ = convex_hull(points)
    return gather_points(points, order)


def convex_iou(pointsets: Tensor, polygons: Tensor) -> Tensor:
    """IoU of every point set's convex hull with every polygon.

    Args:
        pointsets: ``(N, 18)`` float, ``x1, y1, ..., x9, y9`` per row.
        polygons: ``(K, 8)`` float, ``x1, y1, ..., x4, y4`` per row (convex).

    Returns:
        ``(N, K)`` IoUs in ``pointsets``' dtype. Not differentiable, as in mmcv.

    Raises:
        TypeError: An input that is not a floating-point tensor.
        ValueError: A wrong shape, or the inputs on different devices.
    """
    pointsets, polygons = _check_pair("convex_iou", pointsets, polygons)
    n, k = pointsets.shape[0], polygons.shape[0]
    if n == 0 or k == 0:
        return pointsets.new_zeros((n, k))
    dtype = float_compute_dtype(torch.promote_types(pointsets.dtype, polygons.dtype))
    hulls = _hulls(pointsets.detach().to(dtype))
    quads = _counter_clockwise(polygons.detach().to(dtype))
    area_p, area_q = polygon_area(hulls).abs(), polygon_area(quads).abs()
    # Only pairs whose bounding boxes overlap can intersect: most pairs of an image.
    low = torch.maximum(hulls.amin(1)[:, None], quads.amin(1)[None])
    high = torch.minimum(hulls.amax(1)[:, None], quads.amax(1)[None])
    rows, cols = (low < high).all(-1).nonzero(as_tuple=True)
    inter = hulls.new_zeros((n, k))
    for start in range(0, rows.numel(), _CHUNK_PAIRS):
        r, c = rows[start : start + _CHUNK_PAIRS], cols[start : start + _CHUNK_PAIRS]
        inter[r, c] = convex_intersection_area(hulls[r], quads[c])
    iou = inter / (area_p[:, None] + area_q[None] - inter)
    finite = torch.isfinite(pointsets).all(1)[:, None] & torch.isfinite(polygons).all(1)[None]
    return torch.where(finite, iou, torch.nan).to(pointsets.dtype)


def convex_giou(pointsets: Tensor, polygons: Tensor) -> Tuple[Tensor, Tensor]:
    """GIoU of each point set's convex hull with its polygon, and its gradient.

    Args:
        pointsets: ``(N, 18)`` float, ``x1, y1, ..., x9, y9`` per row.
        polygons: ``(N, 8)`` float, ``x1, y1, ..., x4, y4`` per row (convex).

    Returns:
        ``(giou, grad)``: ``(N,)`` GIoUs and ``(N, 18)`` their gradient with respect
        to ``pointsets`` (see the module docstring), both in ``pointsets``' dtype
        and outside autograd, as in mmcv.

    Raises:
        TypeError: An input that is not a floating-point tensor.
        ValueError: A wrong shape, different row counts, or different devices.
    """
    pointsets, polygons = _check_pair("convex_giou", pointsets, polygons)
    n = pointsets.shape[0]
    if polygons.shape[0] != n:
        raise ValueError(
            "mmcv.ops.convex_giou: pointsets and polygons must have as many rows, "
            f"got {n} and {polygons.shape[0]}"
        )
    gious, grads = [pointsets.new_zeros((0,))], [pointsets.new_zeros((0, 18))]
    for start in range(0, n, _GIOU_ROWS):
        points = pointsets[start : start + _GIOU_ROWS].detach().double()
        polys = polygons[start : start + _GIOU_ROWS].detach().double()
        finite = (torch.isfinite(points).all(1) & torch.isfinite(polys).all(1))[:, None]
        giou, grad = _giou(points.where(finite, 0.0), polys.where(finite, 0.0))
        giou = giou.where(finite[:, 0], torch.nan)
        grad = grad.where(finite, torch.nan)
        gious.append(giou.to(pointsets.dtype))
        grads.append(grad.to(pointsets.dtype))
    return torch.cat(gious), torch.cat(grads)


def _giou(pointsets: Tensor, polygons: Tensor) -> Tuple[Tensor, Tensor]:
    """:func:`convex_giou` of ``(n, 18)`` and ``(n, 8)`` float64 rows."""
    quads = _counter_clockwise(polygons)
    with torch.enable_grad():
        points = pointsets.reshape(-1, 9, 2).requires_grad_()
        hulls = gather_points(points, convex_hull(points)[0])
        area_p = polygon_area(hulls)
        area_q = polygon_area(quads)
        inter = fan_intersection_area(hulls, quads)
        union = area_p + area_q - inter
        everything = torch.cat((points, quads), 1)
        area_c = polygon_area(gather_points(everything, convex_hull(everything)[0]))
        giou = inter / union - (area_c - union) / area_c
        (grad,) = torch.autograd.grad(giou.sum(), points)
    return giou.detach(), grad.reshape(-1, 18)
