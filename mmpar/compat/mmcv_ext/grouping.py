"""The feature-gathering entry points of ``mmcv._ext`` (PointNet++) on
:mod:`mmpar.compat.ops.three_interpolate`, :mod:`mmpar.compat.ops.group_points`,
and :mod:`mmpar.compat.ops.gather_points`.

mmcv-full 1.7.2's pybind signatures. The forwards write ``out_tensor`` / ``output``; the
backwards add into ``grad_points_tensor`` / ``grad_features_tensor`` as the
kernels' atomic adds (mmcv's wrappers pass zeros):

* ``three_interpolate_forward(points_tensor, idx_tensor, weight_tensor, out_tensor, b, c,
  m, n)``, ``three_interpolate_backward(grad_out_tensor, idx_tensor, weight_tensor,
  grad_points_tensor, b, c, n, m)``;
* ``group_points_forward(points_tensor, idx_tensor, out_tensor, b, c, n, npoints,
  nsample)``, ``group_points_backward(grad_out_tensor, idx_tensor, grad_points_tensor, b,
  c, n, npoints, nsample)`` and the stacked ``stack_group_points_forward`` /
  ``stack_group_points_backward``;
* ``gather_points_forward(points_tensor, idx_tensor, out_tensor, b, c, n, npoints)``,
  ``gather_points_backward(grad_out_tensor, idx_tensor, grad_points_tensor, b, c, n,
  npoints)``;

These ops are linear in the features, so a backward that is not given them takes mmpar's
gradient at zero features. The size arguments must match the tensors (a ``ValueError``
here). NaN/inf: as mmpar's ops. Differences from mmcv-full: every entry point runs on any
device.
"""

from __future__ import annotations

from typing import Callable, Dict

from torch import Tensor

from mmpar.compat.mmcv_ext.calls import check_sizes, grads_of, write
from mmpar.compat.ops.gather_points import gather_points
from mmpar.compat.ops.group_points import grouping_operation
from mmpar.compat.ops.three_interpolate import three_interpolate

__all__ = [
    "ENTRY_POINTS",
    "gather_points_backward",
    "gather_points_forward",
    "group_points_backward",
    "group_points_forward",
    "stack_group_points_backward",
    "stack_group_points_forward",
    "three_interpolate_backward",
    "three_interpolate_forward",
]


def _feature_grad(
    function: str, fn: Callable, grad_out: Tensor, target: Tensor, *rest: Tensor
) -> None:
    """Add ``fn``'s gradient for ``grad_out`` w.r.t. its first argument (taken at zero, the
    shape of ``target``) into ``target``."""
    zeros = grad_out.new_zeros(target.shape)
    (grad,) = grads_of(fn, (zeros, *rest), grad_out, (0,))
    write(function, "grad", target, grad, add=True)


def three_interpolate_forward(
    points_tensor: Tensor,
    idx_tensor: Tensor,
    weight_tensor: Tensor,
    out_tensor: Tensor,
    b: int,
    c: int,
    m: int,
    n: int,
) -> None:
    """``out_tensor`` ``(B, c, n)`` <- the weighted sums of three features ``(B, c, m)``."""
    check_sizes(
        "three_interpolate_forward",
        b=(b, points_tensor.shape[0]),
        c=(c, points_tensor.shape[1]),
        m=(m, points_tensor.shape[2]),
        n=(n, idx_tensor.shape[1]),
    )
    write(
        "three_interpolate_forward",
        "out_tensor",
        out_tensor,
        three_interpolate(points_tensor, idx_tensor, weight_tensor),
    )


def three_interpolate_backward(
    grad_out_tensor: Tensor,
    idx_tensor: Tensor,
    weight_tensor: Tensor,
    grad_points_tensor: Tensor,
    b: int,
    c: int,
    n: int,
    m: int,
) -> None:
    """``grad_points_tensor`` ``(B, c, m)`` += the gradient for ``grad_out_tensor``
    ``(B, c, n)``."""
    check_sizes(
        "three_interpolate_backward",
        b=(b, grad_out_tensor.shape[0]),
        c=(c, grad_out_tensor.shape[1]),
        n=(n, grad_out_tensor.shape[2]),
        m=(m, grad_points_tensor.shape[2]),
    )
    _feature_grad(
        "three_interpolate_backward",
        three_interpolate,
        grad_out_tensor,
        grad_points_tensor,
        idx_tensor,
        weight_tensor,
    )


def group_points_forward(
    points_tensor: Tensor,
    idx_tensor: Tensor,
    out_tensor: Tensor,
    b: int,
    c: int,
    n: int,
    npoints: int,
    nsample: int,
) -> None:
    """``out_tensor`` ``(B, c, npoints, nsample)`` <- the features ``(B, c, n)`` of each group."""
    check_sizes(
        "group_points_forward",
        b=(b, points_tensor.shape[0]),
        c=(c, points_tensor.shape[1]),
        n=(n, points_tensor.shape[2]),
        npoints=(npoints, idx_tensor.shape[1]),
        nsample=(nsample, idx_tensor.shape[2]),
    )
    write(
        "group_points_forward",
        "out_tensor",
        out_tensor,
        grouping_operation(points_tensor, idx_tensor),
    )


def group_points_backward(
    grad_out_tensor: Tensor,
    idx_tensor: Tensor,
    grad_points_tensor: Tensor,
    b: int,
    c: int,
    n: int,
    npoints: int,
    nsample: int,
) -> None:
    """``grad_points_tensor`` ``(B, c, n)`` += the gradient for ``grad_out_tensor``."""
    check_sizes(
        "group_points_backward",
        b=(b, grad_out_tensor.shape[0]),
        c=(c, grad_out_tensor.shape[1]),
        n=(n, grad_points_tensor.shape[2]),
        npoints=(npoints, idx_tensor.shape[1]),
        nsample=(nsample, idx_tensor.shape[2]),
    )
    _feature_grad(
        "group_points_backward", grouping_operation, grad_out_tensor, grad_points_tensor, idx_tensor
    )


def stack_group_points_forward(
    features_tensor: Tensor,
    features_batch_cnt_tensor: Tensor,
    idx_tensor: Tensor,
    idx_batch_cnt_tensor: Tensor,
    out_tensor: Tensor,
    b: int,
    c: int,
    m: int,
    nsample: int,
) -> None:
    """``out_tensor`` ``(m, c, nsample)`` <- the features ``(N, c)`` of stacked groups."""
    check_sizes(
        "stack_group_points_forward",
        b=(b, features_batch_cnt_tensor.shape[0]),
        c=(c, features_tensor.shape[1]),
        m=(m, idx_tensor.shape[0]),
        nsample=(nsample, idx_tensor.shape[1]),
    )
    found = grouping_operation(
        features_tensor, idx_tensor, features_batch_cnt_tensor, idx_batch_cnt_tensor
    )
    write("stack_group_points_forward", "out_tensor", out_tensor, found)


def stack_group_points_backward(
    grad_out_tensor: Tensor,
    idx_tensor: Tensor,
    idx_batch_cnt_tensor: Tensor,
    features_batch_cnt_tensor: Tensor,
    grad_features_tensor: Tensor,
    b: int,
    c: int,
    m: int,
    n: int,
    nsample: int,
) -> None:
    """``grad_features_tensor`` ``(n, c)`` += the gradient for ``grad_out_tensor``."""
    check_sizes(
        "stack_group_points_backward",
        b=(b, features_batch_cnt_tensor.shape[0]),
        c=(c, grad_out_tensor.shape[1]),
        m=(m, grad_out_tensor.shape[0]),
        n=(n, grad_features_tensor.shape[0]),
        nsample=(nsample, idx_tensor.shape[1]),
    )

    def group(features: Tensor, idx: Tensor) -> Tensor:
        return grouping_operation(features, idx, features_batch_cnt_tensor, idx_batch_cnt_tensor)

    _feature_grad(
        "stack_group_points_backward", group, grad_out_tensor, grad_features_tensor, idx_tensor
    )


def gather_points_forward(
    points_tensor: Tensor,
    idx_tensor: Tensor,
    out_tensor: Tensor,
    b: int,
    c: int,
    n: int,
    npoints: int,
) -> None:
    """``out_tensor`` ``(B, c, npoints)`` <- the features ``(B, c, n)`` of the points ``idx``."""
    check_sizes(
        "gather_points_forward",
        b=(b, points_tensor.shape[0]),
        c=(c, points_tensor.shape[1]),
        n=(n, points_tensor.shape[2]),
        npoints=(npoints, idx_tensor.shape[1]),
    )
    write(
        "gather_points_forward", "out_tensor", out_tensor, gather_points(points_tensor, idx_tensor)
    )


def gather_points_backward(
    grad_out_tensor: Tensor,
    idx_tensor: Tensor,
    grad_points_tensor: Tensor,
    b: int,
    c: int,
    n: int,
    npoints: int,
) -> None:
    """``grad_points_tensor`` ``(B, c, n)`` += the gradient for ``grad_out_tensor``."""
    check_sizes(
        "gather_points_backward",
        b=(b, grad_out_tensor.shape[0]),
        c=(c, grad_out_tensor.shape[1]),
        n=(n, grad_points_tensor.shape[2]),
        npoints=(npoints, idx_tensor.shape[1]),
    )
    _feature_grad(
        "gather_points_backward", gather_points, grad_out_tensor, grad_points_tensor, idx_tensor
    )


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "gather_points_backward": gather_points_backward,
    "gather_points_forward": gather_points_forward,
    "group_points_backward": group_points_backward,
    "group_points_forward": group_points_forward,
    "stack_group_points_backward": stack_group_points_backward,
    "stack_group_points_forward": stack_group_points_forward,
    "three_interpolate_backward": three_interpolate_backward,
    "three_interpolate_forward": three_interpolate_forward,
}
