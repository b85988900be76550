"""The point-search entry points of ``mmcv._ext`` (PointNet++ and its kin) on
:mod:`mmpar.compat.ops.ball_query`, :mod:`mmpar.compat.ops.knn`,
:mod:`mmpar.compat.ops.three_nn` and :mod:`mmpar.compat.ops.furthest_point_sample`.

mmcv-full 1.7.2's pybind signatures, each writing into the caller's tensors:

* ``ball_query_forward(new_xyz_tensor, xyz_tensor, idx_tensor, b, n, m, min_radius,
  max_radius, nsample)`` and ``stack_ball_query_forward(new_xyz_tensor,
  new_xyz_batch_cnt, xyz_tensor, xyz_batch_cnt, idx_tensor, max_radius, nsample)``;
* ``knn_forward(xyz_tensor, new_xyz_tensor, idx_tensor, dist2_tensor, b, n, m,
  nsample)``: ``idx`` and ``dist2`` ``(B, m, nsample)``, nearest first;
* ``three_nn_forward(unknown_tensor, known_tensor, dist2_tensor, idx_tensor, b, n, m)``:
  the squared distances (mmcv's wrapper takes their square roots);
* ``furthest_point_sampling_forward(points_tensor, temp_tensor, idx_tensor, b, n, m)``
  and ``furthest_point_sampling_with_dist_forward(...)``.

The size arguments must match the tensors (a ``ValueError`` here; mmcv's kernels trust
them). The squared distances are the ones mmpar's search ranks, computed as the kernels
compute them; a slot no point fills holds the kernels' start value (``1e10`` for knn,
``1e40`` for three_nn, in the inputs' dtype) with index 0. NaN/inf: as mmpar's ops.
Differences from mmcv-full: ``temp_tensor``, the sampling kernels' scratch buffer, is not
written (mmcv's wrappers discard it); every entry point runs on any device.
"""

from __future__ import annotations

from typing import Callable, Dict

import torch
from torch import Tensor

from mmpar.compat.mmcv_ext.calls import check_sizes, write
from mmpar.compat.ops.ball_query import ball_query
from mmpar.compat.ops.furthest_point_sample import (
    furthest_point_sample,
    furthest_point_sample_with_dist,
)
from mmpar.compat.ops.knn import knn
from mmpar.compat.ops.points import at_least
from mmpar.compat.ops.three_nn import three_nn

__all__ = [
    "ENTRY_POINTS",
    "ball_query_forward",
    "furthest_point_sampling_forward",
    "furthest_point_sampling_with_dist_forward",
    "knn_forward",
    "stack_ball_query_forward",
    "three_nn_forward",
]


def _as_rows(points: Tensor) -> Tensor:
    """``(B, N, 3)`` as the kernels read the buffer (the first ``B * N * 3`` values)."""
    b, n = points.shape[0], points.shape[1]
    return (
        points if points.shape[2] == 3 else points.contiguous().view(-1)[: b * n * 3].view(b, n, 3)
    )


def _chosen_sq_dist(centers: Tensor, points: Tensor, idx: Tensor, far: float) -> Tensor:
    """The squared distances of the chosen points ``idx`` ``(B, M, k)``, as mmpar's search
    computes them (per axis, in order); ``far`` in the slots no point filled."""
    chosen = torch.gather(
        points[:, None].expand(-1, idx.shape[1], -1, -1),
        2,
        idx.long()[..., None].expand(-1, -1, -1, points.shape[2]),
    )
    total = None
    for axis in range(points.shape[2]):
        diff = centers[:, :, None, axis] - chosen[..., axis]
        total = diff * diff if total is None else total + diff * diff
    limit = at_least(far, points.dtype)
    # An unfilled slot holds index 0 after every filled one: a repeated 0, or a 0 whose
    # point the search could not take.
    zero = idx == 0
    unfilled = zero & ((zero.cumsum(-1) > 1) | ~(total < limit))
    return total.masked_fill(unfilled, limit)


def ball_query_forward(
    new_xyz_tensor: Tensor,
    xyz_tensor: Tensor,
    idx_tensor: Tensor,
    b: int,
    n: int,
    m: int,
    min_radius: float,
    max_radius: float,
    nsample: int,
) -> None:
    """``idx_tensor`` ``(B, m, nsample)`` int32 <- each centre's ball, as
    :func:`mmpar.compat.ops.ball_query.ball_query`; centres ``(B, m, 3)``, points ``(B,
    n, 3)``."""
    check_sizes(
        "ball_query_forward",
        b=(b, xyz_tensor.shape[0]),
        n=(n, xyz_tensor.shape[1]),
        m=(m, new_xyz_tensor.shape[1]),
        nsample=(nsample, idx_tensor.shape[-1]),
    )
    found = ball_query(min_radius, max_radius, nsample, xyz_tensor, new_xyz_tensor)
    write("ball_query_forward", "idx_tensor", idx_tensor, found)


def stack_ball_query_forward(
    new_xyz_tensor: Tensor,
    new_xyz_batch_cnt: Tensor,
    xyz_tensor: Tensor,
    xyz_batch_cnt: Tensor,
    idx_tensor: Tensor,
    max_radius: float,
    nsample: int,
) -> None:
    """``idx_tensor`` ``(M, nsample)`` int32 <- the balls of stacked clouds: centres ``(M,
    3)`` in ``new_xyz_batch_cnt`` groups, points ``(N, 3)`` in ``xyz_batch_cnt`` groups."""
    found = ball_query(
        0.0, max_radius, nsample, xyz_tensor, new_xyz_tensor, xyz_batch_cnt, new_xyz_batch_cnt
    )
    write("stack_ball_query_forward", "idx_tensor", idx_tensor, found)


def knn_forward(
    xyz_tensor: Tensor,
    new_xyz_tensor: Tensor,
    idx_tensor: Tensor,
    dist2_tensor: Tensor,
    b: int,
    n: int,
    m: int,
    nsample: int,
) -> None:
    """``idx_tensor`` int32 and ``dist2_tensor`` ``(B, m, nsample)`` <- each centre's
    ``nsample`` nearest points, nearest first, as :func:`mmpar.compat.ops.knn.knn`."""
    check_sizes(
        "knn_forward",
        b=(b, xyz_tensor.shape[0]),
        n=(n, xyz_tensor.shape[1]),
        m=(m, new_xyz_tensor.shape[1]),
    )
    idx = knn(nsample, xyz_tensor, new_xyz_tensor).transpose(1, 2)
    dist2 = _chosen_sq_dist(_as_rows(new_xyz_tensor), _as_rows(xyz_tensor), idx, 1e10)
    write("knn_forward", "idx_tensor", idx_tensor, idx)
    write("knn_forward", "dist2_tensor", dist2_tensor, dist2)


def three_nn_forward(
    unknown_tensor: Tensor,
    known_tensor: Tensor,
    dist2_tensor: Tensor,
    idx_tensor: Tensor,
    b: int,
    n: int,
    m: int,
) -> None:
    """``dist2_tensor`` and ``idx_tensor`` (int32) ``(B, n, 3)`` <- the three nearest known
    points ``(B, m, 3)`` of each unknown one ``(B, n, 3)``, as
    :func:`mmpar.compat.ops.three_nn.three_nn` (squared distances)."""
    check_sizes(
        "three_nn_forward",
        b=(b, unknown_tensor.shape[0]),
        n=(n, unknown_tensor.shape[1]),
        m=(m, known_tensor.shape[1]),
    )
    idx = three_nn(unknown_tensor, known_tensor)[1]
    dist2 = _chosen_sq_dist(unknown_tensor, known_tensor, idx, 1e40)
    write("three_nn_forward", "dist2_tensor", dist2_tensor, dist2)
    write("three_nn_forward", "idx_tensor", idx_tensor, idx)


def furthest_point_sampling_forward(
    points_tensor: Tensor, temp_tensor: Tensor, idx_tensor: Tensor, b: int, n: int, m: int
) -> None:
    """``idx_tensor`` ``(B, m)`` int32 <- furthest point sampling of ``points_tensor``
    ``(B, n, 3)``, as :func:`mmpar.compat.ops.furthest_point_sample.furthest_point_sample`."""
    del temp_tensor
    check_sizes(
        "furthest_point_sampling_forward",
        b=(b, points_tensor.shape[0]),
        n=(n, points_tensor.shape[1]),
        m=(m, idx_tensor.shape[-1]),
    )
    write(
        "furthest_point_sampling_forward",
        "idx_tensor",
        idx_tensor,
        furthest_point_sample(points_tensor, m),
    )


def furthest_point_sampling_with_dist_forward(
    points_tensor: Tensor, temp_tensor: Tensor, idx_tensor: Tensor, b: int, n: int, m: int
) -> None:
    """``idx_tensor`` ``(B, m)`` int32 <- furthest point sampling by the distance matrix
    ``points_tensor`` ``(B, n, n)``."""
    del temp_tensor
    check_sizes(
        "furthest_point_sampling_with_dist_forward",
        b=(b, points_tensor.shape[0]),
        n=(n, points_tensor.shape[1]),
        m=(m, idx_tensor.shape[-1]),
    )
    write(
        "furthest_point_sampling_with_dist_forward",
        "idx_tensor",
        idx_tensor,
        furthest_point_sample_with_dist(points_tensor, m),
    )


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "ball_query_forward": ball_query_forward,
    "furthest_point_sampling_forward": furthest_point_sampling_forward,
    "furthest_point_sampling_with_dist_forward": furthest_point_sampling_with_dist_forward,
    "knn_forward": knn_forward,
    "stack_ball_query_forward": stack_ball_query_forward,
    "three_nn_forward": three_nn_forward,
}
