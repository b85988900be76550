"""RoI point pooling (PartA2): mmcv 1.7.2's ``mmcv.ops.roipoint_pool3d`` in plain torch.

For each box ``(x, y, z, dx, dy, dz, rz)`` (``(x, y, z)`` the bottom centre) of each
batch element: the points of that element inside it by mmcv's in-box test
(:mod:`mmpar.compat.ops.boxes3d.frame`), in index order, the first
``num_sampled_points`` of them; with fewer, they are repeated cyclically to fill the
``num_sampled_points`` slots (slot ``k`` takes found point ``k % count``), as mmcv's
kernel (``get_pooled_idx``) does. Each slot holds the point's ``(x, y, z)`` and its
features. A box with no point gets all-zero slots and ``pooled_empty_flag`` 1.

NaN/inf: as mmcv's in-box test (a NaN x or y is in no box; a NaN z leaves it to x-y).

Differences from mmcv-full: runs on any device (mmcv's kernel is CUDA only), without a
backward (mmcv's raises ``NotImplementedError``, and so does this one); the points'
coordinates are cast to the features' dtype (mmcv's kernel requires one dtype);
float16/bfloat16 boxes are tested in float32. The in-box test runs in chunks
(:mod:`mmpar.compat.ops.boxes3d.pairs`). Bad input is a ``TypeError``/``ValueError``.
"""

from __future__ import annotations

from typing import Any, Tuple

import torch
from torch import Tensor, nn
from torch.autograd import Function

from mmpar.compat.ops.backend import check_int, float_compute_dtype
from mmpar.compat.ops.boxes3d.args import BOX_LAYOUT, check_same, check_tensor
from mmpar.compat.ops.boxes3d.pairs import inside_pairs
from mmpar.compat.ops.boxes3d.voxels import group_ranks

__all__ = ["RoIPointPool3d", "RoIPointPool3dFunction"]

_OP = "RoIPointPool3d"


def _sampled_points(points: Tensor, boxes3d: Tensor, num: int) -> Tuple[Tensor, Tensor]:
    """``(B * M, num)`` long point indices per box (cycled), and ``(B * M,)`` counts."""
    dtype = float_compute_dtype(points.dtype)
    row, point = inside_pairs(points.detach().to(dtype), boxes3d.detach().to(dtype))
    rows = boxes3d.shape[0] * boxes3d.shape[1]
    rank = group_ranks(row)
    kept = rank < num
    row, point, rank = row[kept], point[kept], rank[kept]
    count = torch.bincount(row, minlength=rows)
    found = torch.zeros(rows, num, dtype=torch.long, device=points.device)
    found[row, rank] = point
    slot = torch.arange(num, device=points.device) % count.clamp(min=1)[:, None]
    return found.gather(1, slot), count


class RoIPointPool3dFunction(Function):
    """mmcv's autograd function: ``apply(points, point_features, boxes3d, num_sampled_points)``."""

    @staticmethod
    def forward(
        ctx: Any,
        points: Tensor,
        point_features: Tensor,
        boxes3d: Tensor,
        num_sampled_points: int = 512,
    ) -> Tuple[Tensor, Tensor]:
        """``(pooled_features (B, M, num, 3 + C), pooled_empty_flag (B, M) int32)``."""
        num = check_int(f"mmcv.ops.{_OP}", "num_sampled_points", num_sampled_points, 1)
        check_tensor(_OP, "points", points, ("B", "N", 3), "(x, y, z)")
        check_tensor(_OP, "point_features", point_features, ("B", "N", "C"))
        check_tensor(_OP, "boxes3d", boxes3d, ("B", "M", 7), BOX_LAYOUT)
        check_same(
            _OP,
            [
                ("batch size", ("points", 0), ("point_features", 0), ("boxes3d", 0)),
                ("number of points", ("points", 1), ("point_features", 1)),
            ],
            False,
            points=points,
            point_features=point_features,
            boxes3d=boxes3d,
        )
        batch, n, channels = point_features.shape
        boxes = boxes3d.shape[1]
        index, count = _sampled_points(points, boxes3d.to(points.dtype), num)
        # Index into the (B * N) points of all batch elements.
        owner = torch.arange(batch * boxes, device=points.device) // max(boxes, 1)
        flat = (index + owner[:, None] * n).view(-1)
        values = torch.cat((points.to(point_features.dtype), point_features), 2)
        values = values.reshape(batch * n, 3 + channels)
        empty = count == 0
        if n == 0:  # every box is empty: nothing to read
            pooled = values.new_zeros(batch * boxes, num, 3 + channels)
        else:
            pooled = values.index_select(0, flat).view(batch * boxes, num, 3 + channels)
            pooled = pooled.masked_fill(empty[:, None, None], 0)
        return (
            pooled.view(batch, boxes, num, 3 + channels),
            empty.to(torch.int32).view(batch, boxes),
        )

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor, grad_flag: Tensor) -> Tensor:
        """Not supplied, as in mmcv."""
        raise NotImplementedError("mmcv.ops.RoIPointPool3d has no backward (as in mmcv)")


class RoIPointPool3d(nn.Module):
    """Sample the points (coordinates and features) inside each 3D box (PartA2).

    Args:
        num_sampled_points: Slots per box. Default: 512.
    """

    def __init__(self, num_sampled_points: int = 512) -> None:
        super().__init__()
        check_int(f"mmcv.ops.{_OP}", "num_sampled_points", num_sampled_points, 1)
        self.num_sampled_points = num_sampled_points

    def forward(
        self, points: Tensor, point_features: Tensor, boxes3d: Tensor
    ) -> Tuple[Tensor, Tensor]:
        """Pool.

        Args:
            points: ``(B, N, 3)`` float ``(x, y, z)``.
            point_features: ``(B, N, C)`` float, on the device of ``points``.
            boxes3d: ``(B, M, 7)`` float ``(x, y, z, dx, dy, dz, rz)``, ``(x, y, z)`` the
                bottom centre.

        Returns:
            ``pooled_features`` ``(B, M, num_sampled_points, 3 + C)`` in
            ``point_features``' dtype, and ``pooled_empty_flag`` ``(B, M)`` int32.
        """
        return RoIPointPool3dFunction.apply(
            points, point_features, boxes3d, self.num_sampled_points
        )
