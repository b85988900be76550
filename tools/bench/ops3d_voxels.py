"""The voxel ops' rows of the 3D ops section (``tools/bench/ops3d.py``).

:func:`rows` times mmpar's ``voxelization`` and ``dynamic_scatter`` with the section's
``compare`` (alternating rounds, one thread, median of the per-round ratios) on a
KITTI-size cloud: 120,000 points (``quick``: 20,000) uniform in ``[-5, 75] x [-45, 45] x
[-3.5, 1.5]`` m (about 83% inside SECOND's KITTI range ``[0, -40, -3, 70.4, 40, 1]``) with
an intensity, 4 features.

* hard voxelization (voxel 0.05 x 0.05 x 0.1 m, ``max_voxels`` 16,000, ``max_points`` 5)
  and dynamic voxelization (the same grid) against mmcv-full 1.7.2's CPU kernels
  ``hard_voxelize_forward`` and ``dynamic_voxelize_forward``, called as mmcv's wrapper
  calls them (outputs allocated, then sliced). The kernels are loaded from
  ``$MMPAR_MMCV_FULL_EXT``, the path of a build of mmcv-full's ``_ext`` module (the
  ``.so`` file or its folder); the rows are skipped when it is unset. Target: no slower
  than mmcv-full (hard), within 3x (dynamic).
* ``dynamic_scatter`` mean and max of the cloud's points by their PointPillars voxels
  (0.16 x 0.16 x 4 m, out-of-range points dropped) against a plain-torch formulation of
  the same work: ``torch.unique(dim=0, return_inverse=True)`` of the kept rows, then
  ``index_add_`` and a division by the counts (mean) or a ``scatter_reduce_`` (max).
  Target: within 3x.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable, List, Tuple

import ops3d_common as common
import torch
from torch import Tensor

#: ``(op, case, reference, ours_s, reference_s, ratio, target)``, as ``ops.py``'s rows.
Row = Tuple[str, str, str, float, float, float, str]
KITTI_RANGE = [0, -40, -3, 70.4, 40, 1]
SECOND_VOXEL = [0.05, 0.05, 0.1]
PILLAR_VOXEL = [0.16, 0.16, 4]


def kitti_cloud(n: int) -> Tensor:
    """``(n, 4)`` float32 points around SECOND's KITTI range, with an intensity."""
    gen = torch.Generator().manual_seed(0)
    points = torch.rand(n, 4, generator=gen)
    points[:, :3] = points[:, :3] * torch.tensor([80.0, 90.0, 5.0]) - torch.tensor([5.0, 45.0, 3.5])
    return points


def mmcv_hard(ext: ModuleType, points: Tensor, max_points: int, max_voxels: int) -> tuple:
    """mmcv's ``_Voxelization.forward`` (hard) around the compiled kernel."""
    voxels = points.new_zeros(size=(max_voxels, max_points, points.size(1)))
    coors = points.new_zeros(size=(max_voxels, 3), dtype=torch.int)
    num_points = points.new_zeros(size=(max_voxels,), dtype=torch.int)
    voxel_num = torch.zeros(size=(), dtype=torch.long)
    ext.hard_voxelize_forward(
        points,
        torch.tensor(SECOND_VOXEL, dtype=torch.float),
        torch.tensor(KITTI_RANGE, dtype=torch.float),
        voxels,
        coors,
        num_points,
        voxel_num,
        max_points=max_points,
        max_voxels=max_voxels,
        NDim=3,
        deterministic=True,
    )
    kept = int(voxel_num)
    return voxels[:kept], coors[:kept], num_points[:kept]


def mmcv_dynamic(ext: ModuleType, points: Tensor) -> Tensor:
    """mmcv's ``_Voxelization.forward`` (dynamic) around the compiled kernel."""
    coors = points.new_zeros(size=(points.size(0), 3), dtype=torch.int)
    ext.dynamic_voxelize_forward(
        points,
        torch.tensor(SECOND_VOXEL, dtype=torch.float),
        torch.tensor(KITTI_RANGE, dtype=torch.float),
        coors,
        NDim=3,
    )
    return coors


def torch_scatter(feats: Tensor, coors: Tensor, reduce_type: str) -> Tuple[Tensor, Tensor]:
    """The same work in plain torch: unique rows, then a sum / count or a max."""
    kept = (coors >= 0).all(1)
    rows, src = coors[kept], feats[kept]
    voxel_coors, inverse, counts = torch.unique(
        rows, dim=0, return_inverse=True, return_counts=True
    )
    shape = (voxel_coors.shape[0], feats.shape[1])
    if reduce_type == "mean":
        out = feats.new_zeros(shape).index_add_(0, inverse, src)
        return out / counts[:, None], voxel_coors
    index = inverse[:, None].expand_as(src)
    out = feats.new_full(shape, float("-inf")).scatter_reduce_(0, index, src, "amax")
    return out, voxel_coors


def rows(quick: bool) -> List[Row]:
    """The rows, timed on one thread."""
    from mmpar.compat.ops import dynamic_scatter, voxelization

    compare = common.ops().compare
    n = 20000 if quick else 120000
    rounds = 2 if quick else 5
    points = kitti_cloud(n)
    cloud = f"{n} points, 4 features"
    out: List[Row] = []

    def add(op: str, case: str, ref_name: str, ours: Callable, ref: Callable, target: str):
        ours_s, ref_s, ratio = compare(ours, ref, rounds)
        out.append((op, f"{cloud}, {case}", ref_name, ours_s, ref_s, ratio, target))

    ext = common.mmcv_full_ext()
    if ext is not None:
        max_voxels = 16000 if not quick else 4000
        add(
            "voxelization (hard)",
            f"voxel 0.05x0.05x0.1 m, max_voxels {max_voxels}, max_points 5",
            "mmcv-full 1.7.2 CPU kernel",
            lambda: voxelization(points, SECOND_VOXEL, KITTI_RANGE, 5, max_voxels),
            lambda: mmcv_hard(ext, points, 5, max_voxels),
            "<= 1x",
        )
        add(
            "voxelization (dynamic)",
            "voxel 0.05x0.05x0.1 m",
            "mmcv-full 1.7.2 CPU kernel",
            lambda: voxelization(points, SECOND_VOXEL, KITTI_RANGE, -1),
            lambda: mmcv_dynamic(ext, points),
            "<= 3x",
        )
    coors = voxelization(points, PILLAR_VOXEL, KITTI_RANGE, -1)
    pillars = int(torch.unique(coors[(coors >= 0).all(1)], dim=0).shape[0])
    for reduce_type in ("mean", "max"):
        add(
            f"dynamic_scatter {reduce_type}",
            f"into {pillars} pillars of 0.16x0.16x4 m",
            "torch.unique(dim=0) + index_add_ / scatter_reduce_",
            lambda: dynamic_scatter(points, coors, reduce_type),
            lambda: torch_scatter(points, coors, reduce_type),
            "<= 3x",
        )
    return out
