"""RoI-aware 3D pooling (PartA2): mmcv 1.7.2's ``mmcv.ops.roiaware_pool3d`` in plain torch.

Each roi ``(x, y, z, x_size, y_size, z_size, rz)`` (``(x, y, z)`` the bottom centre) is
cut into ``out_x * out_y * out_z`` voxels along its own axes. A point is in a roi by
mmcv's in-box test (:mod:`mmpar.compat.ops.boxes3d.frame`); its voxel is, as in mmcv's
kernel (``generate_pts_mask_for_box3d``), ``int((lx + x_size / 2) / (x_size / out_x))``,
likewise for y, and ``int((pz - z) / (z_size / out_z))`` for z, clamped to the grid
(``int`` truncates; a NaN height, which the in-box test lets through, gives 0 as on
CUDA). A voxel keeps its first ``max_pts_per_voxel - 1`` points in index order (mmcv
keeps a counter in the voxel's first slot) and pools their features per channel:

* ``max``: the largest feature (a NaN or ``-inf`` feature is never taken: the kernel
  starts from ``-1e50``, ``-inf`` in float, and takes strictly larger values), the first
  point in index order on ties; the gradient goes to that point. A voxel with nothing
  taken gives 0 and no gradient.
* ``avg``: the mean of the kept points' features (0 for none); the gradient is shared
  equally among them.

Differences from mmcv-full: runs on any device (mmcv's kernel is CUDA only); float16
and bfloat16 are computed in float32 and returned in their dtype, float64 in float64
(mmcv's kernel sums ``avg`` in float32 for every dtype); the sums' order differs, so
``avg`` may differ in the last bits. mmcv encodes a voxel's index in 8 bits per axis
(256 voxels at most along y and z); any ``out_size`` works here. mmcv's buffer of
``N * out_x * out_y * out_z * max_pts_per_voxel`` point indices is not allocated: the
kept (roi, voxel, point) triples are, and the in-box test runs in chunks
(:mod:`mmpar.compat.ops.boxes3d.pairs`). Bad input is a ``TypeError``/``ValueError``
(an ``AssertionError`` too where mmcv asserts: ``out_size``, ``mode``).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch
from torch import Tensor, nn
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from mmpar.compat.ops.backend import ArgumentError, check_int, float_compute_dtype
from mmpar.compat.ops.boxes3d.args import BOX_LAYOUT, check_same, check_tensor
from mmpar.compat.ops.boxes3d.voxels import voxel_members

__all__ = ["RoIAwarePool3d", "RoIAwarePool3dFunction"]

_OP = "RoIAwarePool3d"
_MODES = {"max": 0, "avg": 1}


def _out_size(out_size: Any) -> Tuple[int, int, int]:
    """``(out_x, out_y, out_z)`` of an int or a tuple (or list) of 3 ints, each >= 1."""
    sizes = (out_size,) * 3 if not isinstance(out_size, (tuple, list)) else tuple(out_size)
    if len(sizes) != 3:
        raise ArgumentError(
            f"mmcv.ops.{_OP}: out_size must be an int or a tuple of 3 ints, found {out_size!r}"
        )
    return tuple(check_int(f"mmcv.ops.{_OP}", "out_size", s, 1, ArgumentError) for s in sizes)


class RoIAwarePool3dFunction(Function):
    """mmcv's autograd function: ``apply(rois, pts, pts_feature, out_size,
    max_pts_per_voxel, mode)``, ``mode`` 0 (max) or 1 (avg); gradient for ``pts_feature``."""

    @staticmethod
    def forward(
        ctx: Any,
        rois: Tensor,
        pts: Tensor,
        pts_feature: Tensor,
        out_size: Union[int, tuple],
        max_pts_per_voxel: int,
        mode: int,
    ) -> Tensor:
        """Pool ``pts_feature`` ``(P, C)`` into ``(N, out_x, out_y, out_z, C)``; see the module."""
        grid = _out_size(out_size)
        max_pts = check_int(f"mmcv.ops.{_OP}", "max_pts_per_voxel", max_pts_per_voxel, 1)
        if mode not in (0, 1):
            raise ArgumentError(f"mmcv.ops.{_OP}: mode must be 0 (max) or 1 (avg), found {mode!r}")
        check_tensor(_OP, "rois", rois, ("N", 7), BOX_LAYOUT)
        check_tensor(_OP, "pts", pts, ("npoints", 3), "(x, y, z)")
        check_tensor(_OP, "pts_feature", pts_feature, ("npoints", "C"))
        check_same(_OP, (), True, rois=rois, pts=pts)
        check_same(
            _OP,
            [("number of points", ("pts", 0), ("pts_feature", 0))],
            False,
            pts=pts,
            pts_feature=pts_feature,
        )
        slots = rois.shape[0] * grid[0] * grid[1] * grid[2]
        voxel, point = voxel_members(rois.detach(), pts.detach(), grid, max_pts - 1)
        dtype = float_compute_dtype(pts_feature.dtype)
        features = pts_feature.detach().to(dtype).index_select(0, point)
        channels = pts_feature.shape[1]
        count = torch.bincount(voxel, minlength=slots)
        if mode == 0:
            with_argmax = ctx.needs_input_grad[2]  # only the backward reads it
            pooled, argmax = _max_pool(features, voxel, point, slots, with_argmax)
            ctx.save_for_backward(argmax)
        else:
            pooled = features.new_zeros(slots, channels).index_add_(0, voxel, features)
            pooled /= count.clamp(min=1)[:, None].to(dtype)
            ctx.save_for_backward(voxel, point, count)
        ctx.mode, ctx.num_pts = mode, pts.shape[0]
        return pooled.to(pts_feature.dtype).view(rois.shape[0], *grid, channels)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        """mmcv's gradients: to each voxel's argmax point (max), or shared (avg)."""
        channels = grad_out.shape[-1]
        grad = grad_out.reshape(-1, channels)
        grad_in = grad.new_zeros(ctx.num_pts, channels)
        if ctx.mode == 0:
            (argmax,) = ctx.saved_tensors
            valid = argmax >= 0
            target = argmax * channels + torch.arange(channels, device=grad.device)
            grad_in.view(-1).index_add_(0, target[valid], grad[valid])
        else:
            voxel, point, count = ctx.saved_tensors
            share = 1.0 / count.clamp(min=1).to(grad.dtype)
            grad_in.index_add_(0, point, grad.index_select(0, voxel) * share[voxel, None])
        return None, None, grad_in, None, None, None


def _max_pool(
    features: Tensor, voxel: Tensor, point: Tensor, slots: int, with_argmax: bool
) -> Tuple[Tensor, Optional[Tensor]]:
    """``(slots, C)`` maxima (0 where none) and, ``with_argmax``, their first points (-1
    where none)."""
    channels = features.shape[1]
    values = features.masked_fill(torch.isnan(features), -torch.inf)
    where = voxel[:, None].expand(-1, channels)
    best = values.new_full((slots, channels), -torch.inf)
    best.scatter_reduce_(0, where, values, "amax")
    valid = best > -torch.inf
    if not with_argmax:
        return best.where(valid, 0), None
    # The first point (lowest index) of each voxel's maximum, as the kernel's strict >.
    last = torch.iinfo(torch.long).max
    candidate = torch.where(values == best.index_select(0, voxel), point[:, None], last)
    argmax = torch.full_like(best, last, dtype=torch.long)
    argmax.scatter_reduce_(0, where, candidate, "amin")
    return best.where(valid, 0), argmax.where(valid, -1)


class RoIAwarePool3d(nn.Module):
    """Pool the features of the points in each 3D roi into a voxel grid (PartA2).

    Args:
        out_size: The grid: ``n`` or ``(n_x, n_y, n_z)``.
        max_pts_per_voxel: A voxel pools its first ``max_pts_per_voxel - 1`` points
            (index order), as mmcv's kernel. Default: 128.
        mode: ``'max'`` or ``'avg'``. Default: ``'max'``.
    """

    def __init__(
        self, out_size: Union[int, tuple], max_pts_per_voxel: int = 128, mode: str = "max"
    ) -> None:
        super().__init__()
        _out_size(out_size)
        check_int(f"mmcv.ops.{_OP}", "max_pts_per_voxel", max_pts_per_voxel, 1)
        if mode not in _MODES:
            raise ArgumentError(f"mmcv.ops.{_OP}: mode must be 'max' or 'avg', found {mode!r}")
        self.out_size = out_size
        self.max_pts_per_voxel = max_pts_per_voxel
        self.mode = _MODES[mode]

    def forward(self, rois: Tensor, pts: Tensor, pts_feature: Tensor) -> Tensor:
        """Pool.

        Args:
            rois: ``(N, 7)`` float ``(x, y, z, x_size, y_size, z_size, rz)``, LiDAR
                coordinates, ``(x, y, z)`` the bottom centre.
            pts: ``(npoints, 3)`` float, same dtype and device as ``rois``.
            pts_feature: ``(npoints, C)`` float, on that device.

        Returns:
            ``(N, out_x, out_y, out_z, C)`` in ``pts_feature``'s dtype; differentiable
            in ``pts_feature``.
        """
        return RoIAwarePool3dFunction.apply(
            rois, pts, pts_feature, self.out_size, self.max_pts_per_voxel, self.mode
        )
