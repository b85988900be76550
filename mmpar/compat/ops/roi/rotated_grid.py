"""Rotated RoI Align's samples: bilinear reads as table rows, and the windows of huge grids.

Not an mmcv module: :mod:`~mmpar.compat.ops.roi_align_rotated` (with riroi_align_rotated)
and :mod:`~mmpar.compat.ops.rotated_feature_align` read through it.

Bounded work. An adaptive grid (``sampling_ratio <= 0``: ``ceil(bin size)`` samples a
side) grows with the roi, without bound (mmcv's kernels loop over all of it). A sample more
than one pixel off the map reads 0, so :func:`window_average` lists, of each bin's grid,
only a window: the grid indices whose samples can land within ``[-1, H] x [-1, W]`` (the
bounding box, in the bin's index space, of that rectangle turned back by the roi's angle,
widened by the samples' rounding). The samples left out read 0 and the average keeps its
count (the whole grid's), so the result is the whole grid's, at a cost bounded by the map's
size, not the roi's (samples are at least half a pixel apart in an adaptive grid).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from mmpar.compat.ops.roi.roi_sampling import bilinear_taps, window_chunks, window_samples

__all__ = ["bilinear_entries", "pixel_table", "read_rows", "sample_offsets", "window_average"]

# Samples listed at once by window_average (four table entries each).
_WINDOW_SAMPLES = 1 << 20


def pixel_table(feat: Tensor) -> Tensor:
    """``(N * H * W + 1, C)``: ``feat``'s pixels as rows, then a zero row, which samples off
    the map read (so that they read 0 even next to an inf)."""
    n, c, h, w = feat.shape
    rows = feat.permute(0, 2, 3, 1).reshape(n * h * w, c)
    return torch.cat([rows, rows.new_zeros(1, c)])


def bilinear_entries(
    y: Tensor, x: Tensor, image: Tensor, height: int, width: int
) -> tuple[Tensor, Tensor]:
    """RoIAlign's bilinear read of points as rows of :func:`pixel_table` and their weights.

    Args:
        y: Row coordinates, any shape.
        x: Column coordinates, the same shape.
        image: Long, each point's batch index (broadcast against ``y``).
        height: The map's ``H``.
        width: The map's ``W``.

    Returns:
        ``(rows, weights)``, each ``y.shape + (4,)``; a point more than one pixel off the
        map gives the table's zero row (its last) with weight 0.
    """
    inside = (y >= -1.0) & (y <= height) & (x >= -1.0) & (x <= width)
    y_lo, y_hi, wy_lo, wy_hi = bilinear_taps(y, height)
    x_lo, x_hi, wx_lo, wx_hi = bilinear_taps(x, width)
    base = image * height
    rows = torch.stack(
        [(base + y_lo) * width + x_lo, (base + y_lo) * width + x_hi,
         (base + y_hi) * width + x_lo, (base + y_hi) * width + x_hi],
        dim=-1,
    )  # fmt: skip
    weights = torch.stack([wy_lo * wx_lo, wy_lo * wx_hi, wy_hi * wx_lo, wy_hi * wx_hi], dim=-1)
    return torch.where(inside[..., None], rows, -1), weights * inside[..., None]


def read_rows(table: Tensor, rows: Tensor, weights: Tensor) -> Tensor:
    """``(B, C)``: per bag, the sum of ``table`` rows times weights (``rows``, ``weights``:
    ``(B, L)``; a row of -1 is the table's last)."""
    return F.embedding_bag(
        rows.remainder(table.shape[0]), table, per_sample_weights=weights, mode="sum"
    )


def sample_offsets(size: Tensor, bins: int, bin_idx: Tensor, sub: Tensor, cells: Tensor) -> Tensor:
    """How far a sample lies from the roi's centre along one axis (mmcv's arithmetic):
    ``-size / 2 + bin_idx * step + sub * step / cells``, ``step = size / bins``, all
    broadcast; ``sub`` is the sample's grid index + 0.5, ``cells`` the samples a bin (>= 1)."""
    step = size / bins
    return -size / 2 + bin_idx * step + sub * step / cells


def _axis_windows(
    low: Tensor, high: Tensor, size: Tensor, bins: int, grid: Tensor
) -> tuple[Tensor, Tensor]:
    """``(first, count)``, each ``(k, bins)`` long: the grid indices along one axis of each
    bin whose offsets can fall in ``[low, high]`` (``(k,)`` float64), with 2 to spare."""
    step = size / bins
    spacing = step / grid.clamp(min=1)
    starts = -size[:, None] / 2 + torch.arange(bins, device=size.device) * step[:, None]
    # offset(i) = start + (i + 0.5) * spacing, increasing in i (an adaptive grid has
    # samples only when size > 0).
    first = torch.floor((low[:, None] - starts) / spacing[:, None] - 0.5) - 2
    last = torch.ceil((high[:, None] - starts) / spacing[:, None] - 0.5) + 2
    grid64 = grid.double()[:, None]
    first = first.nan_to_num(0.0).clamp(min=0).minimum(grid64)
    end = (last + 1).nan_to_num(0.0).clamp(min=0).minimum(grid64)
    return first.long(), (end - first).clamp(min=0).long()


def _bin_windows(
    boxes: Tensor, grid: tuple[Tensor, Tensor], out_size: tuple[int, int], map_size: tuple[int, int]
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(y_first, y_count, x_first, x_count)``, each ``(k * PH * PW,)``: the part of each
    bin's grid whose samples can land within a pixel of the map."""
    ph, pw = out_size
    h, w = map_size
    _, cx, cy, roi_w, roi_h, _ = boxes.double().unbind(1)
    cos, sin = boxes[:, 5].cos().double(), boxes[:, 5].sin().double()
    # What rounding in the samples' arithmetic (in boxes' dtype) can move them, in pixels.
    eps = torch.finfo(boxes.dtype).eps
    slack = 16 * eps * (roi_h.abs() + roi_w.abs() + cx.abs() + cy.abs() + h + w + 2)
    dy = torch.stack([-1 - slack, h + slack], 1)[:, :, None] - cy[:, None, None]
    dx = torch.stack([-1 - slack, w + slack], 1)[:, None, :] - cx[:, None, None]
    # The widened map's corners in the roi's frame: y = yy cos - xx sin + cy, x = ... .
    yy = (dy * cos[:, None, None] + dx * sin[:, None, None]).flatten(1)
    xx = (dx * cos[:, None, None] - dy * sin[:, None, None]).flatten(1)
    y_first, y_count = _axis_windows(yy.amin(1), yy.amax(1), roi_h, ph, grid[0])
    x_first, x_count = _axis_windows(xx.amin(1), xx.amax(1), roi_w, pw, grid[1])
    shape = (boxes.shape[0], ph, pw)
    return (
        y_first[:, :, None].expand(shape).reshape(-1),
        y_count[:, :, None].expand(shape).reshape(-1),
        x_first[:, None, :].expand(shape).reshape(-1),
        x_count[:, None, :].expand(shape).reshape(-1),
    )


def window_average(
    table: Tensor,
    boxes: Tensor,
    grid: tuple[Tensor, Tensor],
    out_size: tuple[int, int],
    map_size: tuple[int, int],
) -> Tensor:
    """``(k, PH * PW, C)``: the bins of rois, each the average of its whole grid, read from
    the windows near the map only (module docstring).

    Args:
        table: :func:`pixel_table` of the map.
        boxes: ``(k, 6)`` scaled rois, ``cx, cy, w, h`` shifted and clamped, ``angle``
            signed, batch indices in range.
        grid: Each roi's ``(gh, gw)``, ``(k,)`` long each.
        out_size: ``(PH, PW)``.
        map_size: ``(H, W)``.
    """
    ph, pw = out_size
    bins = ph * pw
    k = boxes.shape[0]
    grid_h, grid_w = grid
    windows = _bin_windows(boxes, grid, out_size, map_size)
    image, cx, cy, roi_w, roi_h, theta = boxes.unbind(1)
    cos, sin = theta.cos(), theta.sin()
    cells_h, cells_w = (g.clamp(min=1).to(boxes.dtype) for g in grid)
    share = 1.0 / (grid_h * grid_w).clamp(min=1).to(boxes.dtype)
    dtype = boxes.dtype
    out = table.new_zeros(k * bins, table.shape[1])
    for chunk in window_chunks(windows, None, _WINDOW_SAMPLES):
        sample_bin, starts, iy, ix = window_samples(windows, chunk)
        b = sample_bin + chunk[0]
        r, in_roi = b // bins, b % bins
        yy = sample_offsets(roi_h[r], ph, (in_roi // pw).to(dtype), iy.to(dtype) + 0.5, cells_h[r])
        xx = sample_offsets(roi_w[r], pw, (in_roi % pw).to(dtype), ix.to(dtype) + 0.5, cells_w[r])
        y = yy * cos[r] - xx * sin[r] + cy[r]
        x = yy * sin[r] + xx * cos[r] + cx[r]
        rows, weights = bilinear_entries(y, x, image[r].long(), *map_size)
        part = F.embedding_bag(
            rows.flatten().remainder(table.shape[0]),
            table,
            starts * 4,
            per_sample_weights=(weights * share[r, None]).flatten(),
            mode="sum",
        )
        out = out.index_add(0, torch.arange(chunk[0], chunk[1], device=out.device), part)
    return out.view(k, bins, table.shape[1])
