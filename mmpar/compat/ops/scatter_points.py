"""Points to voxels by reduction: mmcv 1.7.2's ``mmcv.ops.scatter_points`` in plain torch.

``dynamic_scatter(feats, coors, reduce_type)`` reduces the features of the points that
share a voxel coordinate row: a row with any negative entry is dropped, and the voxels
come in the order of ``torch.unique(coors, dim=0)`` (lexicographic, as mmcv's kernel,
which calls ``unique_dim`` sorted). ``sum`` adds the features, ``mean`` divides that sum
by the count, ``max`` takes the largest, ignoring NaN (mmcv's ``fmaxf``), and a voxel of
NaN features only is ``-inf`` (mmcv's initial value). Here: the rows are turned into
int64 keys that order as they do (:mod:`mmpar.compat.ops.voxels.keys`), then
``torch.unique(return_inverse=True)``, ``index_add_`` and ``scatter_reduce_``.

Gradients are mmcv's: ``sum`` gives each point its voxel's gradient, ``mean`` that
divided by the voxel's count, and ``max`` gives each (voxel, channel) gradient to the
point of lowest index whose feature equals the maximum (mmcv's ``atomicMin`` over
equal points), none to the others; dropped points get 0.

``DynamicScatter`` reduces by ``mean`` or ``max``; with coordinates of more than 3
columns the first is the sample index, and mmcv reduces sample by sample for samples 0
to ``coors[-1, 0]`` and prepends the index: here one call over all columns gives the
same rows (rows of another sample index are dropped, as mmcv's loop never reaches them).

NaN/inf rule: as mmcv's kernel, NaN never wins a ``max`` (a voxel of NaN features only is
``-inf`` and passes its gradient to no point), sums take NaN and inf as IEEE addition does.

Differences from mmcv-full:

* It runs on any device (mmcv-full 1.7.2 has CUDA and MLU kernels only), and sums each
  voxel's features in index order, where mmcv's CUDA atomics add them in any order
  (``sum`` and ``mean`` agree to rounding, as mmcv's CPU and GPU; ``max`` exactly).
* float16 and bfloat16 features are reduced in float32 and cast back (mmcv-full
  refuses them); ``coors`` may be of any integer dtype, and the voxel coordinates come
  in that dtype (as mmcv's).
* A voxel whose maximum no point equals (NaN features only) passes its gradient to no
  point (mmcv's backward writes it past the end of the gradient).
* Bad input is a ``TypeError``/``ValueError`` naming the argument: feats not a floating
  (N, C) tensor, coors not an integer (N, ndim >= 1) tensor on feats' device, an unknown
  ``reduce_type`` (mmcv: a ``RuntimeError``).
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.autograd import Function

from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.voxels.keys import row_keys

__all__ = ["DynamicScatter", "dynamic_scatter"]

_REDUCE_TYPES = ("max", "sum", "mean")


class _Voxels(NamedTuple):
    """The voxels of the kept points, in ``torch.unique(coors, dim=0)`` order."""

    points: Tensor  # (M,) long, the kept points (no negative coordinate), in index order
    voxel: Tensor  # (M,) long, each kept point's voxel
    count: Tensor  # (V,) long, points per voxel
    coors: Tensor  # (V, ndim), coors' dtype


def _check(feats: Any, coors: Any, reduce_type: Any) -> None:
    op = "mmcv.ops.dynamic_scatter"
    if not isinstance(feats, Tensor) or not feats.is_floating_point():
        found = feats.dtype if isinstance(feats, Tensor) else type(feats).__name__
        raise TypeError(f"{op}: feats must be a floating-point tensor, found {found}")
    if feats.dim() != 2:
        raise ValueError(f"{op}: feats must have shape (N, C), found {tuple(feats.shape)}")
    if not isinstance(coors, Tensor) or coors.is_floating_point() or coors.is_complex():
        found = coors.dtype if isinstance(coors, Tensor) else type(coors).__name__
        raise TypeError(f"{op}: coors must be an integer tensor, found {found}")
    if coors.dim() != 2 or coors.shape[0] != feats.shape[0] or coors.shape[1] == 0:
        raise ValueError(
            f"{op}: coors must have shape (N, ndim >= 1) with feats' N = {feats.shape[0]}, "
            f"found {tuple(coors.shape)}"
        )
    if coors.device != feats.device:
        raise ValueError(
            f"{op}: coors must be on feats' device {feats.device}, found {coors.device}"
        )
    if reduce_type not in _REDUCE_TYPES:
        raise ValueError(f"{op}: reduce_type must be one of {_REDUCE_TYPES}, found {reduce_type!r}")


def _voxels(coors: Tensor) -> _Voxels:
    kept = (coors >= 0).all(1).nonzero().squeeze(1)
    rows = coors[kept]
    _, voxel, count = torch.unique(row_keys(rows), return_inverse=True, return_counts=True)
    # Every point of a voxel writes the same row: duplicates agree.
    voxel_coors = coors.new_empty(count.numel(), coors.shape[1]).index_put_((voxel,), rows)
    return _Voxels(kept, voxel, count, voxel_coors)


def _reduce(feats: Tensor, voxels: _Voxels, reduce_type: str) -> Tensor:
    """``(V, C)`` reduced features, in ``feats``' dtype."""
    shape = (voxels.count.numel(), feats.shape[1])
    src = feats[voxels.points]
    if reduce_type == "max":
        src = src.masked_fill(src.isnan(), float("-inf"))  # NaN never wins, as fmaxf
        index = voxels.voxel[:, None].expand_as(src)
        return feats.new_full(shape, float("-inf")).scatter_reduce_(0, index, src, "amax")
    out = feats.new_zeros(shape).index_add_(0, voxels.voxel, src)
    if reduce_type == "mean":
        out /= voxels.count[:, None].to(out.dtype)
    return out


def _max_winners(feats: Tensor, reduced: Tensor, voxels: _Voxels) -> Tensor:
    """``(M, C)`` bool: each kept point's channels whose voxel maximum it is, the point of
    lowest index among equal ones."""
    src = feats[voxels.points]
    equal = src == reduced[voxels.voxel]
    m = src.shape[0]
    index = torch.arange(m, device=src.device)[:, None].expand_as(src)
    candidate = index.masked_fill(~equal, m)
    lowest = torch.full_like(reduced, m, dtype=torch.long)
    lowest.scatter_reduce_(0, voxels.voxel[:, None].expand_as(src), candidate, "amin")
    return equal & (candidate == lowest[voxels.voxel])


class _DynamicScatter(Function):
    @staticmethod
    def forward(ctx: Any, feats: Tensor, coors: Tensor, reduce_type: str = "max") -> tuple:
        _check(feats, coors, reduce_type)
        work = feats.to(float_compute_dtype(feats.dtype))
        voxels = _voxels(coors)
        reduced = _reduce(work, voxels, reduce_type)
        ctx.reduce_type = reduce_type
        ctx.voxels = voxels
        ctx.num_points = feats.shape[0]
        ctx.save_for_backward(work if reduce_type == "max" else None, reduced)
        ctx.mark_non_differentiable(voxels.coors)
        return reduced.to(feats.dtype), voxels.coors

    @staticmethod
    def backward(ctx: Any, grad_reduced: Tensor, grad_coors: Optional[Tensor] = None) -> tuple:
        work, reduced = ctx.saved_tensors
        voxels: _Voxels = ctx.voxels
        grad = grad_reduced.to(reduced.dtype)[voxels.voxel]
        if ctx.reduce_type == "mean":
            grad = grad / voxels.count[voxels.voxel, None].to(grad.dtype)
        elif ctx.reduce_type == "max":
            grad = grad.masked_fill(~_max_winners(work, reduced, voxels), 0)
        grad_feats = grad.new_zeros((ctx.num_points, grad.shape[1]))
        grad_feats[voxels.points] = grad
        return grad_feats.to(grad_reduced.dtype), None, None


def dynamic_scatter(
    feats: Tensor, coors: Tensor, reduce_type: str = "max"
) -> Tuple[Tensor, Tensor]:
    """Reduce the features of points sharing a voxel coordinate row.

    Args:
        feats: ``(N, C)`` float, the points' features.
        coors: ``(N, ndim)`` integer (int32 in mmcv), each point's voxel; a row with a
            negative entry drops the point.
        reduce_type: ``'max'``, ``'sum'`` or ``'mean'``.

    Returns:
        ``(voxel_feats, voxel_coors)``: ``(M, C)`` in ``feats``' dtype, differentiable in
        ``feats``; ``(M, ndim)`` in ``coors``' dtype, the distinct kept rows sorted
        lexicographically.

    Raises:
        TypeError: ``feats`` not floating point, ``coors`` not integer.
        ValueError: A bad shape or device, or an unknown ``reduce_type``.
    """
    return _DynamicScatter.apply(feats, coors, reduce_type)


class DynamicScatter(nn.Module):
    """Scatter points into voxels by mean or max: mmcv's ``DynamicScatter`` layer.

    Args:
        voxel_size: ``[x, y, z]`` voxel size (kept, unused, as in mmcv).
        point_cloud_range: ``[x_min, y_min, z_min, x_max, y_max, z_max]`` (likewise).
        average_points: True to reduce by mean, False by max.
    """

    def __init__(self, voxel_size: List, point_cloud_range: List, average_points: bool):
        super().__init__()
        self.voxel_size = voxel_size
        self.point_cloud_range = point_cloud_range
        self.average_points = average_points

    def forward_single(self, points: Tensor, coors: Tensor) -> Tuple[Tensor, Tensor]:
        """Reduce ``points`` ``(N, C)`` by their voxels ``coors`` ``(N, ndim)``."""
        reduce = "mean" if self.average_points else "max"
        return dynamic_scatter(points, coors, reduce)

    def forward(self, points: Tensor, coors: Tensor) -> Tuple[Tensor, Tensor]:
        """Reduce ``points`` ``(N, C)`` by ``coors``: ``(N, 3)`` voxels, or ``(N, 1 + ndim)``
        sample index then voxel, for samples ``0 .. coors[-1, 0]``."""
        if isinstance(coors, Tensor) and coors.dim() == 2 and coors.shape[-1] != 3:
            if coors.shape[0] > 0:
                # mmcv's loop covers samples 0 .. coors[-1, 0]: drop the rows past it.
                beyond = coors[:, :1] > coors[-1, 0]
                coors = coors.masked_fill(beyond, -1)
        return self.forward_single(points, coors)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(voxel_size={self.voxel_size}, "
            f"point_cloud_range={self.point_cloud_range}, "
            f"average_points={self.average_points})"
        )
