"""Points in a 3D box's frame, and mmcv's in-box test (not an mmcv module).

A box is ``(x, y, z, x_size, y_size, z_size, rz)`` with ``(x, y, z)`` the centre of
its bottom face, as mmcv's ``points_in_boxes``, ``roiaware_pool3d`` and
``roipoint_pool3d`` kernels take it. Those kernels share one test
(``check_pt_in_box3d``), which this module computes with the same operations in
the same order, so that a point on a face gets the kernels' answer:

* ``cz = z + z_size / 2`` (the box's centre height); the point fails when
  ``|pz - cz| > z_size / 2``: the top and bottom faces are inside;
* ``(lx, ly)``: the point's offset from ``(x, y)`` turned by ``-rz``, i.e.
  ``lx = dx * cos(-rz) + dy * (-sin(-rz))``, ``ly = dx * sin(-rz) + dy * cos(-rz)``;
* inside iff ``-x_size / 2 < lx < x_size / 2`` and ``-y_size / 2 < ly < y_size / 2``:
  the side faces are outside.

NaN: a comparison with NaN is false, so a NaN ``x`` or ``y`` (of the point or the
box) is in no box, while a NaN ``z`` or ``z_size`` does not fail the z test (it is
written "not above") and leaves the answer to the x-y test, as in the kernels.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

__all__ = ["in_box", "local_xy"]


def local_xy(points: Tensor, boxes: Tensor) -> Tuple[Tensor, Tensor]:
    """The points' x-y offsets from the boxes' centres, in the boxes' frames.

    Args:
        points: ``(..., 3)`` float ``(x, y, z)``.
        boxes: ``(..., 7)`` float boxes, broadcasting with ``points``.

    Returns:
        ``(lx, ly)``, each of the broadcast shape: the offset turned by ``-rz``.
    """
    # cos and sin rounded from float64: as C's correctly rounded cosf/sinf (mmcv's CPU
    # kernel); torch's vectorised float32 ones are off by an ulp for ~5% of angles.
    angle = -boxes[..., 6].to(torch.float64)
    cos, sin = torch.cos(angle).to(boxes.dtype), torch.sin(angle).to(boxes.dtype)
    dx = points[..., 0] - boxes[..., 0]
    dy = points[..., 1] - boxes[..., 1]
    return dx * cos + dy * -sin, dx * sin + dy * cos


def in_box(points: Tensor, boxes: Tensor) -> Tensor:
    """mmcv's in-box test of each point against each box, broadcasting.

    Args:
        points: ``(..., 3)`` float ``(x, y, z)``.
        boxes: ``(..., 7)`` float bottom-centre boxes, same dtype, broadcasting
            with ``points``.

    Returns:
        Bool of the broadcast shape: whether each point is in each box (see the
        module docstring for the faces and NaN).
    """
    half_z = boxes[..., 5] / 2
    centre_z = boxes[..., 2] + half_z
    lx, ly = local_xy(points, boxes)
    # |l| < h is exactly (l > -h) & (l < h) (-h is exact; NaN fails both), in fewer passes.
    inside = lx.abs_() < boxes[..., 3] / 2
    inside &= ly.abs_() < boxes[..., 4] / 2
    inside &= ~((points[..., 2] - centre_z).abs_() > half_z)
    return inside
