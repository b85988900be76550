"""mmdet3d 0.17's neighbour-search and sampling extension modules on mmpar's ops.

``ball_query_ext``, ``knn_ext``, ``interpolate_ext`` and ``furthest_point_sample_ext``
(``mmdet3d.ops.<name>.<module>``), compiled by mmdet3d 0.17 from ``ball_query.cpp``,
``knn.cpp``, ``interpolate.cpp`` and ``furthest_point_sample.cpp``, with their pybind
names and positional signatures (sizes first, then the tensors, the outputs last).
Each writes its result into the output tensors its Python wrapper allocates, as the
C++ does, and returns what the C++ returns (1, or None for ``void``):

* ``ball_query_wrapper(b, n, m, min_radius, max_radius, nsample, new_xyz, xyz, idx)``:
  ``idx`` ``(b, m, nsample)`` int32 <- :func:`mmpar.compat.ops.ball_query.ball_query`.
* ``knn_wrapper(b, n, m, nsample, xyz, new_xyz, idx, dist2)``: ``idx`` ``(b, m,
  nsample)`` int32 and ``dist2`` ``(b, m, nsample)`` float32 <-
  :func:`~mmpar.compat.ops.knn.knn` (nearest first), the squared distances summed in x,
  y, z order as the kernel.
* ``three_nn_wrapper(b, n, m, unknown, known, dist2, idx)``: ``dist2`` (squared, as the
  kernel writes them; mmdet3d takes the root) and ``idx`` <- ``three_nn``;
  ``three_interpolate_wrapper`` / ``_grad_wrapper`` <- ``three_interpolate`` and its
  gradient, *added* into the gradient tensor given, as the kernel's ``atomicAdd``
  (mmdet3d passes zeros).
* ``furthest_point_sampling{,_with_dist}_wrapper(b, n, m, points, temp, idx)``: ``idx``
  ``(b, m)`` int32 <- ``furthest_point_sample{,_with_dist}``.

The grouping modules are :mod:`~mmpar.compat.mmdet3d017.grouping_ext`.

NaN/inf rule: that of the mmpar op each function calls (see its module).

Differences from mmdet3d 0.17's kernels: they run on any device (the compiled ones
need CUDA tensors); float64 inputs work; ``furthest_point_sampling``'s ``temp``
scratch tensor (the kernel leaves each point's distance to the sampled set there,
which mmdet3d never reads) is left as given; the size arguments are checked against
the tensors (``ValueError``; the kernels trust them).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import torch
from torch import Tensor

from mmpar.compat.mmdet3d017.calls import check_sizes, grads_of, write
from mmpar.compat.ops.ball_query import ball_query
from mmpar.compat.ops.furthest_point_sample import (
    furthest_point_sample,
    furthest_point_sample_with_dist,
)
from mmpar.compat.ops.knn import knn
from mmpar.compat.ops.three_interpolate import three_interpolate
from mmpar.compat.ops.three_nn import three_nn

__all__ = ["MODULES"]


def _sq_dist(centers: Tensor, points: Tensor, idx: Tensor) -> Tensor:
    """``(B, m, k)``: squared distances of each centre to its ``k`` indexed points,
    summed in x, y, z order as the kernels."""
    b, m, k = idx.shape
    picked = points.gather(1, idx.long().reshape(b, m * k, 1).expand(-1, -1, 3))
    diff = centers[:, :, None, :] - picked.view(b, m, k, 3)
    sq = diff * diff
    return sq[..., 0] + sq[..., 1] + sq[..., 2]


# ------------------------------------------------------------------ ball_query_ext


def ball_query_wrapper(
    b: int,
    n: int,
    m: int,
    min_radius: float,
    max_radius: float,
    nsample: int,
    new_xyz_tensor: Tensor,
    xyz_tensor: Tensor,
    idx_tensor: Tensor,
) -> int:
    """``idx_tensor`` ``(b, m, nsample)`` int32 <- the first ``nsample`` points of
    ``xyz_tensor`` ``(b, n, 3)`` within ``[min_radius, max_radius)`` of each centre of
    ``new_xyz_tensor`` ``(b, m, 3)`` (mmcv's ``ball_query``). Returns 1."""
    where = "mmdet3d.ops.ball_query.ball_query_ext.ball_query_wrapper"
    check_sizes(
        where,
        b=(b, xyz_tensor.shape[0]),
        n=(n, xyz_tensor.shape[1]),
        m=(m, new_xyz_tensor.shape[1]),
    )
    idx = ball_query(min_radius, max_radius, nsample, xyz_tensor, new_xyz_tensor)
    write(where, "idx_tensor", idx_tensor, idx)
    return 1


# ------------------------------------------------------------------ knn_ext


def knn_wrapper(
    b: int,
    n: int,
    m: int,
    nsample: int,
    xyz_tensor: Tensor,
    new_xyz_tensor: Tensor,
    idx_tensor: Tensor,
    dist2_tensor: Tensor,
) -> None:
    """``idx_tensor`` ``(b, m, nsample)`` int32 <- each centre's ``nsample`` nearest
    points of ``xyz_tensor`` ``(b, n, 3)``, nearest first; ``dist2_tensor`` <- their
    squared distances."""
    where = "mmdet3d.ops.knn.knn_ext.knn_wrapper"
    check_sizes(
        where,
        b=(b, xyz_tensor.shape[0]),
        n=(n, xyz_tensor.shape[1]),
        m=(m, new_xyz_tensor.shape[1]),
    )
    idx = knn(nsample, xyz_tensor, new_xyz_tensor, False).transpose(1, 2)
    write(where, "idx_tensor", idx_tensor, idx)
    write(where, "dist2_tensor", dist2_tensor, _sq_dist(new_xyz_tensor, xyz_tensor, idx))


# ------------------------------------------------------------------ interpolate_ext


def three_nn_wrapper(
    b: int,
    n: int,
    m: int,
    unknown_tensor: Tensor,
    known_tensor: Tensor,
    dist2_tensor: Tensor,
    idx_tensor: Tensor,
) -> None:
    """``idx_tensor`` ``(b, n, 3)`` int32 <- the three nearest points of ``known_tensor``
    ``(b, m, 3)`` to each of ``unknown_tensor`` ``(b, n, 3)``; ``dist2_tensor`` <- their
    squared distances."""
    where = "mmdet3d.ops.interpolate.interpolate_ext.three_nn_wrapper"
    check_sizes(
        where,
        b=(b, unknown_tensor.shape[0]),
        n=(n, unknown_tensor.shape[1]),
        m=(m, known_tensor.shape[1]),
    )
    _, idx = three_nn(unknown_tensor, known_tensor)
    write(where, "idx_tensor", idx_tensor, idx)
    write(where, "dist2_tensor", dist2_tensor, _sq_dist(unknown_tensor, known_tensor, idx))


def three_interpolate_wrapper(
    b: int,
    c: int,
    m: int,
    n: int,
    points_tensor: Tensor,
    idx_tensor: Tensor,
    weight_tensor: Tensor,
    out_tensor: Tensor,
) -> None:
    """``out_tensor`` ``(b, c, n)`` <- the weighted sums of three features of
    ``points_tensor`` ``(b, c, m)`` each (``idx_tensor``, ``weight_tensor`` ``(b, n, 3)``)."""
    where = "mmdet3d.ops.interpolate.interpolate_ext.three_interpolate_wrapper"
    check_sizes(
        where,
        b=(b, points_tensor.shape[0]),
        c=(c, points_tensor.shape[1]),
        m=(m, points_tensor.shape[2]),
        n=(n, idx_tensor.shape[1]),
    )
    with torch.no_grad():
        out = three_interpolate(points_tensor, idx_tensor, weight_tensor)
    write(where, "out_tensor", out_tensor, out)


def three_interpolate_grad_wrapper(
    b: int,
    c: int,
    n: int,
    m: int,
    grad_out_tensor: Tensor,
    idx_tensor: Tensor,
    weight_tensor: Tensor,
    grad_points_tensor: Tensor,
) -> None:
    """``grad_points_tensor`` ``(b, c, m)`` += the gradient of the interpolation for
    ``grad_out_tensor`` ``(b, c, n)``."""
    where = "mmdet3d.ops.interpolate.interpolate_ext.three_interpolate_grad_wrapper"
    check_sizes(
        where,
        b=(b, grad_out_tensor.shape[0]),
        c=(c, grad_out_tensor.shape[1]),
        n=(n, idx_tensor.shape[1]),
    )
    zeros = weight_tensor.new_zeros(b, c, m)  # linear in the features
    (grad,) = grads_of(three_interpolate, (zeros, idx_tensor, weight_tensor), grad_out_tensor, (0,))
    write(where, "grad_points_tensor", grad_points_tensor, grad, add=True)


# ------------------------------------------------------------------ furthest_point_sample_ext


def _fps(
    where: str,
    fn: Callable[[Tensor, int], Tensor],
    b: int,
    n: int,
    m: int,
    points: Tensor,
    idx: Tensor,
) -> int:
    check_sizes(where, b=(b, points.shape[0]), n=(n, points.shape[1]))
    write(where, "idx_tensor", idx, fn(points, m))
    return 1


def furthest_point_sampling_wrapper(
    b: int, n: int, m: int, points_tensor: Tensor, temp_tensor: Tensor, idx_tensor: Tensor
) -> int:
    """``idx_tensor`` ``(b, m)`` int32 <- furthest point sampling of ``points_tensor``
    ``(b, n, 3)`` from point 0. ``temp_tensor`` (scratch) is left as given. Returns 1."""
    where = (
        "mmdet3d.ops.furthest_point_sample.furthest_point_sample_ext."
        "furthest_point_sampling_wrapper"
    )
    return _fps(where, furthest_point_sample, b, n, m, points_tensor, idx_tensor)


def furthest_point_sampling_with_dist_wrapper(
    b: int, n: int, m: int, points_tensor: Tensor, temp_tensor: Tensor, idx_tensor: Tensor
) -> int:
    """As :func:`furthest_point_sampling_wrapper`, on ``(b, n, n)`` distances."""
    where = (
        "mmdet3d.ops.furthest_point_sample.furthest_point_sample_ext."
        "furthest_point_sampling_with_dist_wrapper"
    )
    return _fps(where, furthest_point_sample_with_dist, b, n, m, points_tensor, idx_tensor)


#: Full module name -> {pybind name: function}.
MODULES: Dict[str, Dict[str, Callable[..., Optional[int]]]] = {
    "mmdet3d.ops.ball_query.ball_query_ext": {"ball_query_wrapper": ball_query_wrapper},
    "mmdet3d.ops.knn.knn_ext": {"knn_wrapper": knn_wrapper},
    "mmdet3d.ops.interpolate.interpolate_ext": {
        "three_nn_wrapper": three_nn_wrapper,
        "three_interpolate_wrapper": three_interpolate_wrapper,
        "three_interpolate_grad_wrapper": three_interpolate_grad_wrapper,
    },
    "mmdet3d.ops.furthest_point_sample.furthest_point_sample_ext": {
        "furthest_point_sampling_wrapper": furthest_point_sampling_wrapper,
        "furthest_point_sampling_with_dist_wrapper": furthest_point_sampling_with_dist_wrapper,
    },
}
