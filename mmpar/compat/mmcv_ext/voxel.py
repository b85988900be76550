"""Voxelization and point scattering entry points of ``mmcv._ext`` on
:mod:`mmpar.compat.ops.voxelize` and :mod:`mmpar.compat.ops.scatter_points`.

mmcv-full 1.7.2's pybind signatures:

* ``hard_voxelize_forward(points, voxel_size, coors_range, voxels, coors,
  num_points_per_voxel, voxel_num, max_points, max_voxels, NDim, deterministic)``: writes
  the first ``V`` rows of ``voxels``, ``coors`` (``(z, y, x)``) and
  ``num_points_per_voxel``, and ``V`` into the 0-d ``voxel_num``;
* ``dynamic_voxelize_forward(points, voxel_size, coors_range, coors, NDim)``: writes each
  point's voxel into ``coors``, ``-1`` rows outside the range;
* ``dynamic_point_to_voxel_forward(feats, coors, reduce_type)`` returns ``[voxel_feats,
  voxel_coors, point2voxel_map, voxel_points_count]`` (the last two int32; ``-1`` in the
  map for a point with a negative coordinate);
* ``dynamic_point_to_voxel_backward(grad_feats, grad_reduced_feats, feats,
  reduced_feats, coors_idx, reduce_count, reduce_type)``: writes the kept points' rows of
  ``grad_feats`` (the rest are left as given).

``voxel_size`` and ``coors_range`` are tensors, as mmcv's wrapper passes them (lists are
taken too). NaN/inf: as mmpar's ``voxelization`` and ``dynamic_scatter``. Differences
from mmcv-full: ``NDim`` other than 3 is a ``ValueError`` (the kernels have no other);
``deterministic=False`` gives the deterministic result, one the CUDA kernel may give.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Union

import torch
from torch import Tensor

from mmpar.compat.mmcv_ext.calls import grads_of, where, write
from mmpar.compat.ops.scatter_points import dynamic_scatter
from mmpar.compat.ops.voxelize import voxelization

__all__ = [
    "ENTRY_POINTS",
    "dynamic_point_to_voxel_backward",
    "dynamic_point_to_voxel_forward",
    "dynamic_voxelize_forward",
    "hard_voxelize_forward",
]

Numbers = Union[Tensor, Sequence[float]]


def _numbers(value: Numbers) -> List[float]:
    return value.tolist() if isinstance(value, Tensor) else list(value)


def _ndim(function: str, ndim: int) -> None:
    if ndim != 3:
        raise ValueError(f"{where(function)}: NDim must be 3, found {ndim!r}")


def hard_voxelize_forward(
    points: Tensor,
    voxel_size: Numbers,
    coors_range: Numbers,
    voxels: Tensor,
    coors: Tensor,
    num_points_per_voxel: Tensor,
    voxel_num: Tensor,
    max_points: int,
    max_voxels: int,
    NDim: int,  # noqa: N803 - the C++ parameter's name
    deterministic: bool,
) -> None:
    """Hard voxelization into the caller's buffers.

    Args:
        points: ``(N, C >= 3)`` float.
        voxel_size: 3 floats (mmcv passes a float tensor).
        coors_range: 6 floats ``(x_min, y_min, z_min, x_max, y_max, z_max)``.
        voxels: ``(max_voxels, max_points, C)``, receives the voxels' points in rows ``:V``.
        coors: ``(max_voxels, 3)`` int32, receives ``(z, y, x)`` in rows ``:V``.
        num_points_per_voxel: ``(max_voxels,)`` int32, receives the counts in ``:V``.
        voxel_num: 0-d long tensor, receives ``V``.
        max_points: The most points a voxel keeps.
        max_voxels: The most voxels kept.
        NDim: 3.
        deterministic: Accepted; the result is the deterministic one.
    """
    _ndim("hard_voxelize_forward", NDim)
    found, found_coors, counts = voxelization(
        points, _numbers(voxel_size), _numbers(coors_range), max_points, max_voxels, deterministic
    )
    v = found.shape[0]
    write("hard_voxelize_forward", "voxels", voxels[:v], found)
    write("hard_voxelize_forward", "coors", coors[:v], found_coors)
    write("hard_voxelize_forward", "num_points_per_voxel", num_points_per_voxel[:v], counts)
    write("hard_voxelize_forward", "voxel_num", voxel_num, torch.tensor(v))


def dynamic_voxelize_forward(
    points: Tensor,
    voxel_size: Numbers,
    coors_range: Numbers,
    coors: Tensor,
    NDim: int,  # noqa: N803 - the C++ parameter's name
) -> None:
    """``coors`` ``(N, 3)`` int32 <- each point's voxel ``(z, y, x)``, -1 rows outside.

    Args:
        points: ``(N, C >= 3)`` float.
        voxel_size: 3 floats.
        coors_range: 6 floats.
        coors: ``(N, 3)`` int32, receives the voxels.
        NDim: 3.
    """
    _ndim("dynamic_voxelize_forward", NDim)
    found = voxelization(points, _numbers(voxel_size), _numbers(coors_range), -1, -1)
    write("dynamic_voxelize_forward", "coors", coors, found)


def dynamic_point_to_voxel_forward(feats: Tensor, coors: Tensor, reduce_type: str) -> List[Tensor]:
    """Reduce the features of points sharing a voxel.

    Args:
        feats: ``(N, C)`` float.
        coors: ``(N, ndim)`` int; a row with a negative entry drops its point.
        reduce_type: ``'sum'``, ``'mean'`` or ``'max'``.

    Returns:
        ``[voxel_feats (M, C), voxel_coors (M, ndim), point2voxel_map (N,) int32,
        voxel_points_count (M,) int32]``, the voxels sorted by coordinates.
    """
    with torch.no_grad():
        voxel_feats, voxel_coors = dynamic_scatter(feats, coors, reduce_type)
    kept = (coors >= 0).all(1)
    # The rank of each kept point's row among the sorted distinct rows: its voxel.
    inverse = torch.unique(coors[kept], dim=0, return_inverse=True)[1]
    point2voxel = torch.full((coors.shape[0],), -1, dtype=torch.int32, device=coors.device)
    point2voxel[kept] = inverse.to(torch.int32)
    count = torch.bincount(inverse, minlength=voxel_coors.shape[0]).to(torch.int32)
    return [voxel_feats, voxel_coors, point2voxel, count]


def dynamic_point_to_voxel_backward(
    grad_feats: Tensor,
    grad_reduced_feats: Tensor,
    feats: Tensor,
    reduced_feats: Tensor,
    coors_idx: Tensor,
    reduce_count: Tensor,
    reduce_type: str,
) -> None:
    """Write the scatter's gradient for ``grad_reduced_feats`` into ``grad_feats``.

    Args:
        grad_feats: ``(N, C)``: its kept points' rows receive their gradient.
        grad_reduced_feats: ``(M, C)``, one row per voxel.
        feats: ``(N, C)``, the forward's features.
        reduced_feats: ``(M, C)``, the forward's output; not read (the voxels are formed
            again from ``coors_idx``).
        coors_idx: ``(N,)`` int32, the forward's ``point2voxel_map``.
        reduce_count: ``(M,)`` int32, the forward's ``voxel_points_count``.
        reduce_type: As the forward's.
    """
    del reduced_feats
    if grad_reduced_feats.shape[0] != reduce_count.numel():
        raise ValueError(
            f"{where('dynamic_point_to_voxel_backward')}: grad_reduced_feats must have one "
            f"row per voxel ({reduce_count.numel()}), found {tuple(grad_reduced_feats.shape)}"
        )

    # Voxel numbers as one-column coordinates group the points as their rows did, in the
    # same (sorted) voxel order; the map's -1 drops a point as its negative row did.
    def scatter(f: Tensor, voxel: Tensor) -> Tensor:
        return dynamic_scatter(f, voxel, reduce_type)[0]

    voxel = coors_idx.reshape(-1, 1).long()
    (grad,) = grads_of(scatter, (feats, voxel), grad_reduced_feats, (0,))
    kept = coors_idx.reshape(-1) >= 0
    grad_feats[kept] = grad[kept].to(grad_feats.dtype)


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "dynamic_point_to_voxel_backward": dynamic_point_to_voxel_backward,
    "dynamic_point_to_voxel_forward": dynamic_point_to_voxel_forward,
    "dynamic_voxelize_forward": dynamic_voxelize_forward,
    "hard_voxelize_forward": hard_voxelize_forward,
}
