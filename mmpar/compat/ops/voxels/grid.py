"""The voxel grid of mmcv's voxelization kernels: its checked parameters and each point's cell.

mmcv's kernels take ``voxel_size`` and ``coors_range`` as float32. Along each axis the
grid has ``round((max - min) / size)`` cells (float32 arithmetic, rounded half away from
zero), and a point's cell is ``floor((p - min) / size)``, computed in float32 for float32,
float16 and bfloat16 points and in float64 for float64 points. A point is inside when that
cell is in ``[0, cells)`` on every axis; a NaN or infinite quotient never is.
"""

from __future__ import annotations

import math
from typing import List, NamedTuple, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype

__all__ = ["VoxelGrid", "point_cells", "voxel_grid"]

# float32 holds every integer below this exactly: a cell bound at or past it is compared in
# float64.
_EXACT_FLOAT32 = 1 << 24
_INT32_MAX = (1 << 31) - 1


class VoxelGrid(NamedTuple):
    """A checked voxel grid: float32 values (as Python floats) and cell counts, x, y, z."""

    size: Tuple[float, float, float]
    low: Tuple[float, float, float]
    cells: Tuple[int, int, int]


def _floats(op: str, name: str, value: object, count: int) -> List[float]:
    """``value`` (a sequence, array or tensor of ``count`` numbers) as float32-rounded floats."""
    try:
        flat = torch.as_tensor(value, dtype=torch.float64).flatten()
    except (TypeError, ValueError, RuntimeError):
        flat = None
    if flat is None or flat.numel() != count:
        raise ValueError(f"mmcv.ops.{op}: {name} must be {count} numbers, found {value!r}")
    return flat.to(torch.float32).tolist()


def voxel_grid(op: str, voxel_size: object, coors_range: object, range_name: str) -> VoxelGrid:
    """The grid of ``voxel_size`` ``[x, y, z]`` over ``coors_range`` ``[x0, y0, z0, x1, y1, z1]``.

    Args:
        op: The op's mmcv name, for messages.
        voxel_size: 3 numbers.
        coors_range: 6 numbers.
        range_name: The range's parameter name, for messages.

    Returns:
        The grid, its numbers rounded to float32 as mmcv's wrapper passes them.

    Raises:
        ValueError: A wrong count of numbers, a voxel size that is not positive and
            finite, a range that is not finite or whose max is not above its min, or a
            grid of more than 2**31 - 1 cells along an axis.
    """
    size = _floats(op, "voxel_size", voxel_size, 3)
    bounds = _floats(op, range_name, coors_range, 6)
    if not all(math.isfinite(s) and s > 0 for s in size):
        raise ValueError(
            f"mmcv.ops.{op}: voxel_size must be 3 positive finite numbers, found {voxel_size!r}"
        )
    if not all(math.isfinite(b) for b in bounds) or not all(
        bounds[i + 3] > bounds[i] for i in range(3)
    ):
        raise ValueError(
            f"mmcv.ops.{op}: {range_name} must be finite [x_min, y_min, z_min, x_max, y_max, "
            f"z_max] with each max > its min, found {coors_range!r}"
        )
    f32 = torch.float32
    span = torch.tensor(bounds[3:], dtype=f32) - torch.tensor(bounds[:3], dtype=f32)
    quotient = (span / torch.tensor(size, dtype=f32)).tolist()
    if not all(q + 0.5 < _INT32_MAX + 1 for q in quotient):
        raise ValueError(
            f"mmcv.ops.{op}: voxel_size {voxel_size!r} over {range_name} {coors_range!r} "
            f"makes a grid of {quotient} cells, more than 2**31 - 1 along an axis"
        )
    cells = [math.floor(q + 0.5) for q in quotient]  # C's round: half away from zero
    return VoxelGrid(tuple(size), tuple(bounds[:3]), tuple(cells))


def point_cells(points: Tensor, grid: VoxelGrid) -> Tuple[Tensor, Tensor]:
    """Each point's cell, as mmcv's ``dynamic_voxelize`` kernel computes it.

    Args:
        points: ``(N, C >= 3)`` float, x, y, z in its first three columns.
        grid: The voxel grid.

    Returns:
        ``(cells, inside)``: ``(N, 3)`` int32 cells in ``(z, y, x)`` order, ``-1`` rows
        for points outside the grid, and ``(N,)`` bool, whether each point is inside.
    """
    dtype = float_compute_dtype(points.dtype)
    # Per axis on 1-D columns (3x faster than on (N, 3) rows); divided by a tensor, not a
    # Python number, which CUDA would turn into a product with its reciprocal.
    low_size = torch.tensor([grid.low, grid.size], dtype=dtype, device=points.device)
    wide = dtype == torch.float32 and max(grid.cells) >= _EXACT_FLOAT32
    axes: List[Tensor] = []
    inside = torch.ones(points.shape[0], dtype=torch.bool, device=points.device)
    for j in range(3):
        cell = torch.floor((points[:, j].to(dtype) - low_size[0, j]) / low_size[1, j])
        cell = cell.double() if wide else cell
        inside &= (cell >= 0) & (cell < grid.cells[j])
        axes.append(cell)
    coors = torch.stack(axes[::-1], 1).masked_fill_(~inside[:, None], -1).to(torch.int32)
    return coors, inside
