"""Hard and dynamic voxelization: mmcv 1.7.2's ``mmcv.ops.voxelize`` in plain torch.

A point's voxel is ``floor((p - min) / size)`` along x, y and z, computed as mmcv's CPU
kernel does (float32 for float32, float16 and bfloat16 points, float64 for float64
points; ``voxel_size`` and ``coors_range`` rounded to float32); the grid has
``round((max - min) / size)`` voxels along each axis (C's ``round``, half away from zero),
and a point is inside when its voxel is in the grid on all three axes: a point exactly
on a max boundary is outside when its quotient reaches the grid's size.

* Dynamic (``max_points == -1`` or ``max_voxels == -1``): each point's voxel ``(z, y, x)``
  as an ``(N, 3)`` int32 row, ``(-1, -1, -1)`` for a point outside.
* Hard: mmcv's kernel passes over the points in index order; a point opens a new voxel
  when its voxel has none and fewer than ``max_voxels`` are open (otherwise the point is
  dropped, as every later point of that voxel), and is copied into its voxel when the
  voxel holds fewer than ``max_points``. Here, in one batched pass: the voxels are
  grouped by a stable sort of their keys, numbered by first appearance, the points
  ranked in their voxel by index, and those with voxel ``< max_voxels`` and rank
  ``< max_points`` scattered into the ``(V, max_points, C)`` output. The output is the
  kernel's bit for bit: the same voxels in the same order, the same points in each.

NaN/inf rule (the kernel's): a NaN or infinite coordinate, or one whose voxel index is not
in the grid (however large), puts the point outside; the other columns are copied as
they are.

Differences from mmcv-full:

* It runs on any device; the deterministic result on CUDA is the CPU kernel's. mmcv's
  CUDA ``dynamic_voxelize`` kernel marks an outside point ``(-1, 0, 0)`` or ``(-1, -1,
  0)`` when x or y is out, and computes float64 points' voxels through float32
  (``floorf``); here every outside point is ``(-1, -1, -1)`` and float64 points are
  computed in float64, as on mmcv's CPU.
* ``deterministic=False`` (mmcv-full: CUDA only) gives the deterministic result, one of
  the results mmcv's non-deterministic CUDA kernel may give: the same set of voxels when
  they fit in ``max_voxels``, each with ``min(count, max_points)`` of its points. That
  kernel orders the voxels, keeps the voxels past ``max_voxels`` and the points of a
  voxel past ``max_points`` as its threads race; here they are always the first seen.
* No dense grid: mmcv's CPU kernel allocates an int per cell of the grid (90 M cells,
  360 MB, for KITTI's 0.05 x 0.05 x 0.1 m grid); here memory is linear in the points.
* No gradient: the outputs never require grad (mmcv's marks ``voxels`` as requiring grad
  when ``points`` does, and its backward raises).
* bfloat16 points are computed in float32 (mmcv-full refuses them).
* Bad input is a ``TypeError``/``ValueError``: points that are not floating point or have
  fewer than 3 columns (mmcv's kernel reads past the row), a ``voxel_size`` or range that
  is not 3 / 6 numbers (mmcv's docstring allows a float, with which its kernel reads
  past its buffer), a voxel size that is not positive, a range whose max is not above
  its min, ``max_points`` or ``max_voxels`` below -1.
"""

from __future__ import annotations

from typing import Any, List, Tuple, Union

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import check_int
from mmpar.compat.ops.voxels.grid import VoxelGrid, point_cells, voxel_grid
from mmpar.compat.ops.voxels.grouping import group_first_seen
from mmpar.compat.ops.voxels.keys import row_keys

__all__ = ["Voxelization", "voxelization"]


def _check_points(points: Any) -> Tensor:
    if not isinstance(points, Tensor) or not points.is_floating_point():
        found = points.dtype if isinstance(points, Tensor) else type(points).__name__
        raise TypeError(
            f"mmcv.ops.voxelization: points must be a floating-point tensor, found {found}"
        )
    if points.dim() != 2 or points.shape[1] < 3:
        raise ValueError(
            "mmcv.ops.voxelization: points must have shape (N, C >= 3) (x, y, z first), "
            f"found {tuple(points.shape)}"
        )
    return points.detach()


def _hard_voxelize(
    points: Tensor, grid: VoxelGrid, max_points: int, max_voxels: int
) -> Tuple[Tensor, Tensor, Tensor]:
    """mmcv's ``hard_voxelize_forward``: ``(voxels, coors, num_points_per_voxel)``."""
    cells, inside = point_cells(points, grid)
    inside_idx = inside.nonzero().squeeze(1)
    groups = group_first_seen(row_keys(cells[inside_idx], grid.cells[::-1]))
    kept = min(groups.first.numel(), max_voxels)
    take = (groups.group < max_voxels) & (groups.slot < max_points)
    voxels = points.new_zeros(kept, max_points, points.shape[1])
    source = inside_idx[groups.order[take]]
    voxels.index_put_((groups.group[take], groups.slot[take]), points[source])
    coors = cells[inside_idx[groups.first[:kept]]]
    num_points = groups.count[:kept].clamp(max=max_points).to(torch.int32)
    return voxels, coors, num_points


def voxelization(
    points: Tensor,
    voxel_size: Union[tuple, float],
    coors_range: Union[tuple, float],
    max_points: int = 35,
    max_voxels: int = 20000,
    deterministic: bool = True,
) -> Union[Tensor, Tuple[Tensor, Tensor, Tensor]]:
    """Voxelize a point cloud, hard or dynamic, as mmcv's kernels.

    Args:
        points: ``(N, C >= 3)`` float, x, y, z then other features.
        voxel_size: 3 numbers, the voxel's size along x, y, z.
        coors_range: 6 numbers, ``[x_min, y_min, z_min, x_max, y_max, z_max]``.
        max_points: The most points kept in a voxel; -1 for dynamic voxelization.
        max_voxels: The most voxels kept (the first seen); -1 for dynamic voxelization.
        deterministic: False for mmcv's non-deterministic CUDA kernel, whose contract the
            deterministic result meets (see the module docstring).

    Returns:
        Dynamic: ``(N, 3)`` int32, each point's voxel ``(z, y, x)``, -1 rows outside.
        Hard: ``(voxels, coors, num_points_per_voxel)``: ``(V, max_points, C)`` in
        ``points``' dtype, the voxels' points in index order, zero-padded; ``(V, 3)``
        int32 ``(z, y, x)``; ``(V,)`` int32; voxels in order of first appearance.

    Raises:
        TypeError: ``points`` is not a floating-point tensor; a count is not an int.
        ValueError: A bad shape, voxel size, range or count.
    """
    points = _check_points(points)
    grid = voxel_grid("voxelization", voxel_size, coors_range, "coors_range")
    max_points = check_int("mmcv.ops.voxelization", "max_points", max_points, -1)
    max_voxels = check_int("mmcv.ops.voxelization", "max_voxels", max_voxels, -1)
    # deterministic=False gets the deterministic result too: see the module docstring.
    if max_points == -1 or max_voxels == -1:
        return point_cells(points, grid)[0]
    return _hard_voxelize(points, grid, max_points, max_voxels)


def _max_voxels_pair(max_voxels: Any) -> Tuple[int, int]:
    pair = tuple(max_voxels) if isinstance(max_voxels, (tuple, list)) else (max_voxels,) * 2
    if len(pair) != 2:
        raise ValueError(
            "mmcv.ops.Voxelization: max_voxels must be an int or a (train, test) pair, "
            f"found {max_voxels!r}"
        )
    for value in pair:
        check_int("mmcv.ops.Voxelization", "max_voxels", value, -1)
    return pair


class Voxelization(nn.Module):
    """Voxelize a point cloud with fixed parameters: mmcv's ``Voxelization`` layer.

    Args:
        voxel_size: ``[x, y, z]`` voxel size.
        point_cloud_range: ``[x_min, y_min, z_min, x_max, y_max, z_max]``.
        max_num_points: The most points in a voxel; -1 for dynamic voxelization.
        max_voxels: The most voxels, an int or a ``(training, testing)`` pair chosen by
            ``self.training``.
        deterministic: See :func:`voxelization`.

    Attributes:
        grid_size: ``(3,)`` long, ``round((max - min) / size)`` by ``torch.round``, as
            mmcv computes it (half to even; the kernel rounds half away from zero).
        pcd_shape: ``[1, grid_y, grid_x]``, as mmcv.
    """

    def __init__(
        self,
        voxel_size: List,
        point_cloud_range: List,
        max_num_points: int,
        max_voxels: Union[tuple, int] = 20000,
        deterministic: bool = True,
    ):
        super().__init__()
        voxel_grid("Voxelization", voxel_size, point_cloud_range, "point_cloud_range")
        check_int("mmcv.ops.Voxelization", "max_num_points", max_num_points, -1)
        self.voxel_size = voxel_size
        self.point_cloud_range = point_cloud_range
        self.max_num_points = max_num_points
        self.max_voxels = _max_voxels_pair(max_voxels)
        self.deterministic = deterministic
        pc_range = torch.tensor(point_cloud_range, dtype=torch.float32)
        size = torch.tensor(voxel_size, dtype=torch.float32)
        self.grid_size = torch.round((pc_range[3:] - pc_range[:3]) / size).long()
        self.pcd_shape = [*self.grid_size[:2], 1][::-1]

    def forward(self, input: Tensor) -> Union[Tensor, Tuple[Tensor, Tensor, Tensor]]:
        """Voxelize ``input`` ``(N, C >= 3)``: see :func:`voxelization`."""
        max_voxels = self.max_voxels[0] if self.training else self.max_voxels[1]
        return voxelization(
            input,
            self.voxel_size,
            self.point_cloud_range,
            self.max_num_points,
            max_voxels,
            self.deterministic,
        )

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(voxel_size={self.voxel_size}, "
            f"point_cloud_range={self.point_cloud_range}, "
            f"max_num_points={self.max_num_points}, max_voxels={self.max_voxels}, "
            f"deterministic={self.deterministic})"
        )
