"""Which points of each 3D roi fall in which of its voxels, as mmcv's RoI-aware pooling
assigns them (not an mmcv module).

mmcv's ``generate_pts_mask_for_box3d`` and ``collect_inside_pts_for_box3d`` kernels,
batched: the (roi, point) pairs of the in-box test, each point's voxel in the roi's
grid, and the first points of each voxel in index order.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.boxes3d.frame import local_xy
from mmpar.compat.ops.boxes3d.pairs import inside_pairs

__all__ = ["group_ranks", "voxel_members"]


def group_ranks(keys: Tensor) -> Tensor:
    """Each element's rank among the equal keys before it, for ``(K,)`` sorted ``keys``."""
    position = torch.arange(keys.numel(), device=keys.device)
    starts = torch.ones_like(keys, dtype=torch.bool)
    starts[1:] = keys[1:] != keys[:-1]
    return position - torch.where(starts, position, 0).cummax(0).values


def _cell(offset: Tensor, size: Tensor, cells: int) -> Tensor:
    """The kernel's ``int(offset / (size / cells))`` clamped to ``[0, cells)``.

    ``int`` truncates toward 0; a negative index wraps to a large unsigned one in the
    kernel, which its clamp takes to the last cell; NaN gives 0, as CUDA converts it.
    """
    index = torch.nan_to_num(offset / (size / cells), nan=0.0).trunc()
    index = index.clamp(min=-1.0, max=float(cells - 1)).long()
    return torch.where(index < 0, cells - 1, index)


def voxel_members(
    rois: Tensor, pts: Tensor, grid: Tuple[int, int, int], keep: int
) -> Tuple[Tensor, Tensor]:
    """The kept (voxel, point) pairs of RoI-aware pooling.

    Args:
        rois: ``(N, 7)`` float bottom-centre boxes.
        pts: ``(P, 3)`` float, same dtype and device.
        grid: ``(out_x, out_y, out_z)``.
        keep: The most points a voxel keeps (its first ones in index order).

    Returns:
        ``(voxel, point)``: ``(K,)`` long each, in no set order; ``voxel`` indexes the
        ``N * out_x * out_y * out_z`` voxels, roi-major, then x, y, z.
    """
    dtype = float_compute_dtype(rois.dtype)
    rois, pts = rois.to(dtype), pts.to(dtype)
    roi, point = inside_pairs(pts[None], rois[None])
    box, at = rois.index_select(0, roi), pts.index_select(0, point)
    lx, ly = local_xy(at, box)
    out_x, out_y, out_z = grid
    ix = _cell(lx + box[:, 3] / 2, box[:, 3], out_x)
    iy = _cell(ly + box[:, 4] / 2, box[:, 4], out_y)
    iz = _cell(at[:, 2] - box[:, 2], box[:, 5], out_z)
    voxel = ((roi * out_x + ix) * out_y + iy) * out_z + iz
    if voxel.numel() == 0 or int(torch.bincount(voxel).max()) <= keep:
        return voxel, point  # no voxel over the cap
    # A stable sort keeps each voxel's points in index order (the pairs come so).
    voxel, order = torch.sort(voxel, stable=True)
    point = point.index_select(0, order)
    kept = group_ranks(voxel) < keep
    return voxel[kept], point[kept]
