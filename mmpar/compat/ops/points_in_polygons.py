"""Points in quadrilaterals: mmcv 1.7.2's ``mmcv.ops.points_in_polygons`` in plain torch.

mmcv's kernel casts a ray from the point towards ``+x`` and counts the edges it
crosses, edge ``i`` running from vertex ``i`` to vertex ``i - 1`` (``i = 0`` from
vertex 0 to vertex 3), in float32. An edge crosses when one end is below the point
(``y < py``) and the other is not, at ``x = sx + (py - sy) * (tx - sx) / (ty - sy)``
greater than ``px``. A point that equals a vertex, or lies where an edge crosses
its row (``x == px``), stops the count there: the crossings of the edges before it
decide. A point on an edge is therefore inside or outside depending on the
polygon's vertex order, as in mmcv, which documents the boundary as inexact.

The same rule here, for every pair at once. mmcv's kernel only runs on float32
inputs; any floating dtype is taken here, computed in float32 as the kernel does.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["points_in_polygons"]

# Elements of the largest (chunk, M) tensor of one edge's tests.
_CHUNK_ELEMENTS = 1 << 22


def _check(name: str, value: object, width: int, layout: str) -> Tensor:
    if not isinstance(value, Tensor) or not value.is_floating_point():
        found = value.dtype if isinstance(value, Tensor) else type(value).__name__
        raise TypeError(
            f"mmcv.ops.points_in_polygons: {name} must be a floating-point tensor, got {found}"
        )
    if value.dim() != 2 or value.shape[1] != width:
        raise ValueError(
            f"mmcv.ops.points_in_polygons: {name} must have shape {layout}, "
            f"got {tuple(value.shape)}"
        )
    return value


def points_in_polygons(points: Tensor, polygons: Tensor) -> Tensor:
    """Which points lie inside which quadrilaterals (ATSS assignment of rotated boxes).

    Args:
        points: ``(N, 2)`` float, ``x, y``.
        polygons: ``(M, 8)`` float, ``x1, y1, ..., x4, y4``, on ``points``' device.

    Returns:
        ``(N, M)`` float32: 1 where the point is inside the polygon, else 0. A point
        on the boundary may give either, by mmcv's rule (see the module docstring).

    Raises:
        TypeError: An input that is not a floating-point tensor.
        ValueError: A wrong shape, or the inputs on different devices.
    """
    points = _check("points", points, 2, "(N, 2)")
    polygons = _check("polygons", polygons, 8, "(M, 8)")
    if points.device != polygons.device:
        raise ValueError(
            "mmcv.ops.points_in_polygons: points and polygons must be on the same device, "
            f"got {points.device} and {polygons.device}"
        )
    n, m = points.shape[0], polygons.shape[0]
    out = torch.zeros((n, m), dtype=torch.float32, device=points.device)
    if n == 0 or m == 0:
        return out
    pts = points.detach().float()
    verts = polygons.detach().float().reshape(m, 4, 2)
    step = max(1, _CHUNK_ELEMENTS // m)
    for start in range(0, n, step):
        px, py = pts[start : start + step, :, None].unbind(1)  # (n, 1) each
        out[start : start + step] = _inside(px, py, verts)
    return out


def _inside(px: Tensor, py: Tensor, verts: Tensor) -> Tensor:
    """The kernel's test of ``(n, 1)`` points against ``(M, 4, 2)`` polygons -> ``(n, M)``."""
    crossings = torch.zeros(px.shape[0], verts.shape[0], dtype=torch.uint8, device=px.device)
    stopped = torch.zeros(crossings.shape, dtype=torch.bool, device=px.device)
    for i in range(4):
        sx, sy = verts[:, i].unbind(-1)
        tx, ty = verts[:, i - 1].unbind(-1)
        on_vertex = ((sx == px) & (sy == py)) | ((tx == px) & (ty == py))
        straddles = ((sy < py) & (ty >= py)) | ((sy >= py) & (ty < py))
        # Where the edge does not straddle the row, x is unused: keep the division finite.
        rise = torch.where(straddles, ty - sy, torch.ones_like(ty - sy))
        x = sx + (py - sy) * (tx - sx) / rise
        stop = on_vertex | (straddles & (x == px))
        crossings += (straddles & (x > px) & ~stop & ~stopped).to(torch.uint8)
        stopped |= stop
    return (crossings % 2).float()
