"""mmdet3d 0.17's ``mmdet3d.ops.voxel.voxel_layer`` on mmpar's voxelization and scatter.

The pybind functions of ``voxelization.cpp``, with their signatures:

* ``hard_voxelize(points, voxels, coors, num_points_per_voxel, voxel_size,
  coors_range, max_points, max_voxels, NDim=3, deterministic=True) -> int``: writes
  the first ``V`` rows of ``voxels`` ``(max_voxels, max_points, C)``, ``coors``
  ``(max_voxels, 3)`` int32 ``(z, y, x)`` and ``num_points_per_voxel`` ``(max_voxels,)``
  and returns ``V`` (mmcv's ``voxelization``, whose kernels mmcv took from these);
* ``dynamic_voxelize(points, coors, voxel_size, coors_range, NDim=3)``: writes each
  point's voxel into ``coors`` ``(N, 3)``, ``-1`` rows outside;
* ``dynamic_point_to_voxel_forward(feats, coors, reduce_type) -> [voxel_feats,
  voxel_coors, point2voxel_map, voxel_points_count]``: mmcv's ``dynamic_scatter``
  (``'sum'``, ``'mean'``, ``'max'``), with each point's voxel (``-1`` for a point with
  a negative coordinate) and each voxel's point count, int32;
* ``dynamic_point_to_voxel_backward(grad_feats, grad_reduced_feats, feats,
  reduced_feats, coors_idx, reduce_count, reduce_type)``: writes the gradient of the
  kept points into ``grad_feats`` (mmcv's: to each point of a voxel for sum and
  mean, to the first point holding the maximum for max).

NaN/inf rule: mmpar's ``voxelize`` and ``scatter_points``' (a NaN coordinate puts a
point outside; NaN never wins a max).

Differences from mmdet3d 0.17: both scatter functions run on the CPU too (0.17's:
CUDA only); ``NDim`` other than 3 is a ``ValueError`` (the kernels have no other);
``deterministic=False`` gives the deterministic result (one the CUDA kernel may give).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import torch
from torch import Tensor

from mmpar.compat.mmdet3d017.calls import grads_of, write
from mmpar.compat.ops.scatter_points import dynamic_scatter
from mmpar.compat.ops.voxelize import voxelization

__all__ = ["MODULES"]

_WHERE = "mmdet3d.ops.voxel.voxel_layer"


def _ndim(fn: str, ndim: int) -> None:
    if ndim != 3:
        raise ValueError(f"{_WHERE}.{fn}: NDim must be 3, found {ndim!r}")


def hard_voxelize(
    points: Tensor,
    voxels: Tensor,
    coors: Tensor,
    num_points_per_voxel: Tensor,
    voxel_size: Sequence[float],
    coors_range: Sequence[float],
    max_points: int,
    max_voxels: int,
    NDim: int = 3,  # noqa: N803 - the C++ parameter's name
    deterministic: bool = True,
) -> int:
    """Hard voxelization into the given buffers; returns the number of voxels ``V``.

    Args:
        points: ``(N, C >= 3)`` float.
        voxels: ``(max_voxels, max_points, C)``, receives the voxels' points in rows ``:V``.
        coors: ``(max_voxels, 3)`` int32, receives ``(z, y, x)`` in rows ``:V``.
        num_points_per_voxel: ``(max_voxels,)`` int32, receives the counts in ``:V``.
        voxel_size: 3 floats.
        coors_range: 6 floats ``(x_min, y_min, z_min, x_max, y_max, z_max)``.
        max_points: The most points a voxel keeps.
        max_voxels: The most voxels kept.
        NDim: 3.
        deterministic: Accepted; the result is the deterministic one.
    """
    _ndim("hard_voxelize", NDim)
    found, found_coors, counts = voxelization(
        points, voxel_size, coors_range, max_points, max_voxels, deterministic
    )
    v = found.shape[0]
    where = f"{_WHERE}.hard_voxelize"
    write(where, "voxels", voxels[:v], found)
    write(where, "coors", coors[:v], found_coors)
    write(where, "num_points_per_voxel", num_points_per_voxel[:v], counts)
    return v


def dynamic_voxelize(
    points: Tensor,
    coors: Tensor,
    voxel_size: Sequence[float],
    coors_range: Sequence[float],
    NDim: int = 3,  # noqa: N803 - the C++ parameter's name
) -> None:
    """``coors`` ``(N, 3)`` int32 <- each point's voxel ``(z, y, x)``, -1 rows outside."""
    _ndim("dynamic_voxelize", NDim)
    write(
        f"{_WHERE}.dynamic_voxelize",
        "coors",
        coors,
        voxelization(points, voxel_size, coors_range, -1, -1),
    )


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
    # The kept rows' positions among the sorted distinct rows: the voxel of each point.
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
    """Write the gradient of :func:`dynamic_point_to_voxel_forward` for
    ``grad_reduced_feats`` ``(M, C)`` into the kept points' rows of ``grad_feats`` ``(N, C)``.

    ``coors_idx`` is the forward's ``point2voxel_map``; the voxels are re-formed from it.
    """
    where = f"{_WHERE}.dynamic_point_to_voxel_backward"
    voxel = coors_idx.reshape(-1, 1).long()
    if grad_reduced_feats.shape[0] != reduce_count.numel():
        raise ValueError(
            f"{where}: grad_reduced_feats must have one row per voxel ({reduce_count.numel()}), "
            f"found {tuple(grad_reduced_feats.shape)}"
        )

    def forward(f: Tensor, v: Tensor) -> Tensor:
        return dynamic_scatter(f, v, reduce_type)[0]

    (grad,) = grads_of(forward, (feats, voxel), grad_reduced_feats, (0,))
    kept = coors_idx >= 0
    grad_feats[kept] = grad[kept].to(grad_feats.dtype)


#: Full module name -> {pybind name: function}.
MODULES: Dict[str, Dict[str, Callable[..., object]]] = {
    _WHERE: {
        "hard_voxelize": hard_voxelize,
        "dynamic_voxelize": dynamic_voxelize,
        "dynamic_point_to_voxel_forward": dynamic_point_to_voxel_forward,
        "dynamic_point_to_voxel_backward": dynamic_point_to_voxel_backward,
    }
}
