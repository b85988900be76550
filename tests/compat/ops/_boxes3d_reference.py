"""Reference pieces shared by the tests of the 3D box ops (tests only).

mmcv's in-box test (``check_pt_in_box3d``) in numpy float32 scalars, each operation
rounded as the kernel's float arithmetic rounds it, and random boxes and points with
many points exactly on faces, edges, tops and bottoms.

API:

``in_box(point, box) -> (inside, lx, ly)``
    The kernel's test of one point ``(x, y, z)`` against one bottom-centre box
    ``(x, y, z, x_size, y_size, z_size, rz)``, and the point's local x, y.

``random_boxes(n, gen, yaws=None) -> Tensor``, ``points_near(boxes, m, gen) -> Tensor``
    float32 boxes (yaws from ``yaws`` if given) and points of which half lie on a
    box's faces, edges, corners, top or bottom (offsets of -1, -1/2, 0, 1/2, 1 half
    sides), the rest uniform around them.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np
import torch

F = np.float32
YAWS = (0.0, math.pi, -math.pi, math.pi / 2, -math.pi / 2, 0.3, -2.5)


def in_box(point: Sequence[float], box: Sequence[float]) -> Tuple[bool, float, float]:
    """mmcv's ``check_pt_in_box3d`` in float32: ``(inside, local_x, local_y)``."""
    with np.errstate(all="ignore"):
        x, y, z = (F(v) for v in point)
        cx, cy, cz, xs, ys, zs, rz = (F(v) for v in box)
        cz = F(cz + zs / F(2))
        cos, sin = F(math.cos(-float(rz))), F(math.sin(-float(rz)))
        sx, sy = F(x - cx), F(y - cy)
        lx = F(F(sx * cos) + F(sy * -sin))
        ly = F(F(sx * sin) + F(sy * cos))
        if abs(F(z - cz)) > zs / F(2):
            return False, float(lx), float(ly)
        inside = bool(lx > -xs / F(2) and lx < xs / F(2) and ly > -ys / F(2) and ly < ys / F(2))
    return inside, float(lx), float(ly)


def random_boxes(
    n: int, gen: torch.Generator, yaws: Optional[Sequence[float]] = None
) -> torch.Tensor:
    """``(n, 7)`` float32 bottom-centre boxes around the origin, sides 0.5 to 4."""
    centre = torch.rand(n, 3, generator=gen) * 8 - 4
    size = torch.rand(n, 3, generator=gen) * 3.5 + 0.5
    if yaws is None:
        yaw = (torch.rand(n, 1, generator=gen) - 0.5) * 4 * math.pi
    else:
        yaw = torch.tensor(yaws, dtype=torch.float32)[torch.arange(n) % len(yaws)][:, None]
    return torch.cat((centre, size, yaw), 1)


def points_near(boxes: torch.Tensor, m: int, gen: torch.Generator) -> torch.Tensor:
    """``(m, 3)`` float32 points: half on the boxes' faces, edges, tops and bottoms."""
    points = torch.rand(m, 3, generator=gen) * 12 - 6
    k = m // 2
    box = boxes[torch.randint(0, boxes.shape[0], (k,), generator=gen)]
    u = torch.randint(-2, 3, (k, 3), generator=gen).to(torch.float32) / 2
    lx, ly = u[:, 0] * box[:, 3] / 2, u[:, 1] * box[:, 4] / 2
    lz = (u[:, 2] + 1) / 2 * box[:, 5]
    cos, sin = torch.cos(box[:, 6]), torch.sin(box[:, 6])
    points[:k, 0] = box[:, 0] + lx * cos - ly * sin
    points[:k, 1] = box[:, 1] + lx * sin + ly * cos
    points[:k, 2] = box[:, 2] + lz
    return points
