"""mmdet3d 0.17's grouping extension modules on mmpar's ops.

``assign_score_withk_ext`` (PAConv), ``group_points_ext`` and ``gather_points_ext``,
compiled by mmdet3d 0.17 from ``assign_score_withk.cpp``, ``group_points.cpp`` and
``gather_points.cpp``, with their pybind names and positional signatures (sizes first,
then the tensors, the outputs last), as :mod:`~mmpar.compat.mmdet3d017.points_ext`
describes for the neighbour searches:

* ``assign_score_withk_{forward,backward}_wrapper(B, N0, N1, M, K, O, aggregate, ...)``:
  <- :func:`~mmpar.compat.ops.assign_score_withk.assign_score_withk` and its gradients;
  the forward adds into ``output``, as its kernel (mmdet3d passes zeros);
* ``group_points_ext.forward/backward`` <- ``grouping_operation``;
* ``gather_points_wrapper/_grad_wrapper`` <- ``gather_points``.

Gradients are *added* into the gradient tensors given, as the kernels' ``atomicAdd``
(mmdet3d passes zeros); the other forward outputs are written. Each returns what its
C++ returns (1, or None for ``void``).

NaN/inf rule: that of the mmpar op each function calls.

Differences from mmdet3d 0.17's kernels: any device (0.17's need CUDA tensors) and
float dtype; ``aggregate`` (0 sum, 1 avg, 2 max) selects mmpar's aggregate, where
0.17's kernel sums for each; the size arguments are checked against the tensors
(``ValueError``; the kernels trust them).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import torch
from torch import Tensor

from mmpar.compat.mmdet3d017.calls import check_sizes, grads_of, write
from mmpar.compat.ops.assign_score_withk import assign_score_withk
from mmpar.compat.ops.gather_points import gather_points
from mmpar.compat.ops.group_points import grouping_operation

__all__ = ["MODULES"]

_AGGREGATES = {0: "sum", 1: "avg", 2: "max"}

# ------------------------------------------------------------------ assign_score_withk_ext


def _aggregate(where: str, aggregate: int) -> str:
    if aggregate not in _AGGREGATES:
        raise ValueError(
            f"{where}: aggregate must be 0 (sum), 1 (avg) or 2 (max), found {aggregate!r}"
        )
    return _AGGREGATES[aggregate]


def assign_score_withk_forward_wrapper(
    B: int,
    N0: int,
    N1: int,
    M: int,
    K: int,
    O: int,  # noqa: E741 - the C++ parameter's name
    aggregate: int,
    points: Tensor,
    centers: Tensor,
    scores: Tensor,
    knn_idx: Tensor,
    output: Tensor,
) -> None:
    """``output`` ``(B, O, N1, K)`` += PAConv's score-weighted features of ``points``
    ``(B, N0, M, O)``, ``centers`` ``(B, N0, M, O)``, ``scores`` ``(B, N1, K, M)`` and
    ``knn_idx`` ``(B, N1, K)`` (mmcv's ``assign_score_withk``)."""
    where = "mmdet3d.ops.paconv.assign_score_withk_ext.assign_score_withk_forward_wrapper"
    check_sizes(
        where,
        B=(B, points.shape[0]),
        N0=(N0, points.shape[1]),
        N1=(N1, scores.shape[1]),
        M=(M, points.shape[2]),
        K=(K, scores.shape[2]),
        O=(O, points.shape[3]),
    )
    name = _aggregate(where, aggregate)
    with torch.no_grad():
        out = assign_score_withk(scores, points, centers, knn_idx, name)
    write(where, "output", output, out, add=True)


def assign_score_withk_backward_wrapper(
    B: int,
    N0: int,
    N1: int,
    M: int,
    K: int,
    O: int,  # noqa: E741 - the C++ parameter's name
    aggregate: int,
    grad_out: Tensor,
    points: Tensor,
    centers: Tensor,
    scores: Tensor,
    knn_idx: Tensor,
    grad_points: Tensor,
    grad_centers: Tensor,
    grad_scores: Tensor,
) -> None:
    """Add the gradients of the forward for ``grad_out`` ``(B, O, N1, K)`` into
    ``grad_points``, ``grad_centers`` and ``grad_scores``."""
    where = "mmdet3d.ops.paconv.assign_score_withk_ext.assign_score_withk_backward_wrapper"
    check_sizes(
        where,
        B=(B, points.shape[0]),
        N0=(N0, points.shape[1]),
        N1=(N1, scores.shape[1]),
        M=(M, points.shape[2]),
        K=(K, scores.shape[2]),
        O=(O, points.shape[3]),
    )
    name = _aggregate(where, aggregate)

    def forward(s: Tensor, p: Tensor, c: Tensor, i: Tensor) -> Tensor:
        return assign_score_withk(s, p, c, i, name)

    g_s, g_p, g_c = grads_of(forward, (scores, points, centers, knn_idx), grad_out, (0, 1, 2))
    write(where, "grad_points", grad_points, g_p, add=True)
    write(where, "grad_centers", grad_centers, g_c, add=True)
    write(where, "grad_scores", grad_scores, g_s, add=True)


# ------------------------------------------------------------------ group_points_ext


def group_points_forward(
    b: int,
    c: int,
    n: int,
    npoints: int,
    nsample: int,
    points_tensor: Tensor,
    idx_tensor: Tensor,
    out_tensor: Tensor,
) -> int:
    """``out_tensor`` ``(b, c, npoints, nsample)`` <- ``points_tensor`` ``(b, c, n)``
    gathered by ``idx_tensor`` ``(b, npoints, nsample)``. Returns 1."""
    where = "mmdet3d.ops.group_points.group_points_ext.forward"
    check_sizes(
        where,
        b=(b, points_tensor.shape[0]),
        c=(c, points_tensor.shape[1]),
        n=(n, points_tensor.shape[2]),
        npoints=(npoints, idx_tensor.shape[1]),
        nsample=(nsample, idx_tensor.shape[2]),
    )
    with torch.no_grad():
        out = grouping_operation(points_tensor, idx_tensor)
    write(where, "out_tensor", out_tensor, out)
    return 1


def group_points_backward(
    b: int,
    c: int,
    n: int,
    npoints: int,
    nsample: int,
    grad_out_tensor: Tensor,
    idx_tensor: Tensor,
    grad_points_tensor: Tensor,
) -> int:
    """``grad_points_tensor`` ``(b, c, n)`` += the gradient of :func:`group_points_forward`
    for ``grad_out_tensor`` ``(b, c, npoints, nsample)``. Returns 1."""
    where = "mmdet3d.ops.group_points.group_points_ext.backward"
    check_sizes(
        where,
        b=(b, grad_out_tensor.shape[0]),
        c=(c, grad_out_tensor.shape[1]),
        npoints=(npoints, idx_tensor.shape[1]),
        nsample=(nsample, idx_tensor.shape[2]),
    )
    zeros = grad_out_tensor.new_zeros(b, c, n)  # the gradient does not depend on the points
    (grad,) = grads_of(grouping_operation, (zeros, idx_tensor), grad_out_tensor, (0,))
    write(where, "grad_points_tensor", grad_points_tensor, grad, add=True)
    return 1


# ------------------------------------------------------------------ gather_points_ext


def gather_points_wrapper(
    b: int,
    c: int,
    n: int,
    npoints: int,
    points_tensor: Tensor,
    idx_tensor: Tensor,
    out_tensor: Tensor,
) -> int:
    """``out_tensor`` ``(b, c, npoints)`` <- ``points_tensor`` ``(b, c, n)`` at
    ``idx_tensor`` ``(b, npoints)``. Returns 1."""
    where = "mmdet3d.ops.gather_points.gather_points_ext.gather_points_wrapper"
    check_sizes(
        where,
        b=(b, points_tensor.shape[0]),
        c=(c, points_tensor.shape[1]),
        n=(n, points_tensor.shape[2]),
        npoints=(npoints, idx_tensor.shape[1]),
    )
    with torch.no_grad():
        out = gather_points(points_tensor, idx_tensor)
    write(where, "out_tensor", out_tensor, out)
    return 1


def gather_points_grad_wrapper(
    b: int,
    c: int,
    n: int,
    npoints: int,
    grad_out_tensor: Tensor,
    idx_tensor: Tensor,
    grad_points_tensor: Tensor,
) -> int:
    """``grad_points_tensor`` ``(b, c, n)`` += the gradient of the gather for
    ``grad_out_tensor`` ``(b, c, npoints)``. Returns 1."""
    where = "mmdet3d.ops.gather_points.gather_points_ext.gather_points_grad_wrapper"
    check_sizes(
        where,
        b=(b, grad_out_tensor.shape[0]),
        c=(c, grad_out_tensor.shape[1]),
        npoints=(npoints, idx_tensor.shape[1]),
    )
    zeros = grad_out_tensor.new_zeros(b, c, n)
    (grad,) = grads_of(gather_points, (zeros, idx_tensor), grad_out_tensor, (0,))
    write(where, "grad_points_tensor", grad_points_tensor, grad, add=True)
    return 1


#: Full module name -> {pybind name: function}.
#: Full module name -> {pybind name: function}.
MODULES: Dict[str, Dict[str, Callable[..., Optional[int]]]] = {
    "mmdet3d.ops.paconv.assign_score_withk_ext": {
        "assign_score_withk_forward_wrapper": assign_score_withk_forward_wrapper,
        "assign_score_withk_backward_wrapper": assign_score_withk_backward_wrapper,
    },
    "mmdet3d.ops.group_points.group_points_ext": {
        "forward": group_points_forward,
        "backward": group_points_backward,
    },
    "mmdet3d.ops.gather_points.gather_points_ext": {
        "gather_points_wrapper": gather_points_wrapper,
        "gather_points_grad_wrapper": gather_points_grad_wrapper,
    },
}
