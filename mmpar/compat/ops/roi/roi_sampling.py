"""RoIAlign's sample grids as lists of bilinear taps: what roi_align and deform_roi_pool share.

mmcv's RoIAlign-family kernels read each output bin ``(ph, pw)`` of a roi as a grid of
bilinear samples: ``gh x gw`` per bin (``sampling_ratio``, or ``ceil(bin size)`` when it
is 0), the sample ``(iy, ix)`` at ``y = (start_y + ph * bin_h) + (iy + 0.5) * bin_h / gh``
(and likewise ``x``), in that order of float operations. A sample further than one pixel
outside the map reads 0; any other is clamped into the map. Where torchvision's compiled
``roi_align`` does not apply (max pooling, bins moved by offsets, grids too large for its
per-roi buffer), the samples are listed here as their four taps: rows of a channels-last
copy of the map (:func:`pixel_table`), which :mod:`~mmpar.compat.ops.roi.roi_sample_pool`
and :mod:`~mmpar.compat.ops.roi.roi_sample_max` pool. The adaptive grid is capped at
``2**31 - 1`` samples per side (mmcv's ``int`` overflows there).

Bounded work. An adaptive grid grows with the box, without bound (mmcv's kernels loop over
all of it). Only a window of each bin's grid is listed: the samples that land inside
``[-1, H] x [-1, W]``, widened by a margin that also takes in a sample reading 0 wherever
the grid has one. The samples left out read 0: an average keeps its count (the whole
grid's), and a maximum finds the same first largest sample, since the window keeps the
grid's row-major order. So the work is bounded by the map's size, not the box's (for
boxes beyond some 10^9 pixels, float32 cannot place the samples to a pixel, many land on
the same spot near the map, and the window grows with the rounding: still bounded memory,
a few seconds).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "Bins",
    "Taps",
    "bilinear_taps",
    "bin_windows",
    "listed_samples",
    "pixel_table",
    "roi_bins",
    "roi_grids",
    "size_groups",
    "sample_taps",
    "window_chunks",
    "window_samples",
]

# The adaptive grid is clamped to mmcv's int range (a box of 1e30 pixels has no meaning).
_MAX_GRID = 2**31 - 1


def bilinear_taps(coord: Tensor, size: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """mmcv's bilinear taps along one axis of length ``size``.

    Returns:
        ``(low, high, w_low, w_high)``, each shaped as ``coord``: the two pixel indices
        (long) and their weights; a coordinate below -1 or above ``size`` has zero weights.
    """
    inside = (coord >= -1.0) & (coord <= size)
    coord = coord.clamp(min=0)
    low = coord.floor().long().clamp(0, size - 1)  # clamped below too: NaN boxes never index
    edge = low >= size - 1
    high = torch.where(edge, low, low + 1)
    frac = torch.where(edge, torch.zeros_like(coord), coord - low.to(coord.dtype))
    # Selected, not multiplied: an infinite coordinate (a huge box's overflowed sample) has
    # an infinite frac, and inf * 0 would make its zero weights NaN.
    zero = torch.zeros_like(frac)
    return low, high, torch.where(inside, 1.0 - frac, zero), torch.where(inside, frac, zero)


def pixel_table(input: Tensor) -> Tensor:
    """``(N, C, H, W)`` as ``(N * H * W + 2, C)`` pixel rows, then two more: the padding
    row (zeros, row ``N * H * W``), where out-of-map taps point, and a row of -inf that
    the max search's padding slots read. One copy; differentiable."""
    n, c, h, w = input.shape
    table = input.new_empty((n * h * w + 2, c))
    table[: n * h * w].view(n, h, w, c).copy_(input.permute(0, 2, 3, 1))
    table[n * h * w] = 0.0
    table[n * h * w + 1] = float("-inf")
    return table


@dataclass
class Bins:
    """Every bin of every roi, flattened to ``(B,) = (K * PH * PW,)``."""

    batch: Tensor  # long: the roi's image
    y0: Tensor  # start_y (+ the bin's shift) + ph * bin_h: mmcv's first two terms of y
    x0: Tensor
    bin_h: Tensor
    bin_w: Tensor
    grid_h: Tensor  # long >= 0: samples along y
    grid_w: Tensor
    roi_h: Tensor  # the roi's height (and width): what an offset is a fraction of
    roi_w: Tensor

    def count(self) -> Tensor:
        """``(B,)`` what each bin's sum is divided by: ``max(gh * gw, 1)``, as mmcv."""
        return (self.grid_h * self.grid_w).clamp(min=1).to(self.y0.dtype)


def roi_grids(
    rois: Tensor, out_size: tuple[int, int], scale: float, sampling_ratio: int, aligned: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Per roi, mmcv's ``(start_x, start_y, roi_w, roi_h, grid_h, grid_w)``, each ``(K,)``:
    the scaled (shifted if ``aligned``) corner, the size (at least 1 if not ``aligned``),
    and the samples per bin side (long, >= 0; a non-finite or negative bin has none)."""
    start_x, start_y, end_x, end_y = (rois[:, 1:] * scale - (0.5 if aligned else 0.0)).unbind(1)
    roi_w, roi_h = end_x - start_x, end_y - start_y
    if not aligned:
        roi_w, roi_h = roi_w.clamp(min=1.0), roi_h.clamp(min=1.0)
    if sampling_ratio > 0:
        grid_h = torch.full_like(roi_h, sampling_ratio, dtype=torch.long)
        return start_x, start_y, roi_w, roi_h, grid_h, grid_h
    # mmcv's ceil(roi_h / PH): the bin size's expression, to the bit.
    grid_h = torch.ceil(roi_h / out_size[0]).nan_to_num(0.0, 0.0, 0.0).clamp(0, _MAX_GRID)
    grid_w = torch.ceil(roi_w / out_size[1]).nan_to_num(0.0, 0.0, 0.0).clamp(0, _MAX_GRID)
    return start_x, start_y, roi_w, roi_h, grid_h.long(), grid_w.long()


def roi_bins(
    rois: Tensor,
    out_size: tuple[int, int],
    scale: float,
    sampling_ratio: int,
    aligned: bool,
    offset: Tensor | None = None,
    gamma: float = 0.1,
) -> Bins:
    """The bins of ``(K, 5)`` rois (in the compute dtype), mmcv's arithmetic.

    Args:
        rois: ``(K, 5)`` ``batch_idx, x1, y1, x2, y2``.
        out_size: ``(PH, PW)``.
        scale: ``spatial_scale``.
        sampling_ratio: Samples per bin side; 0: ``ceil(bin size)``, per roi.
        aligned: Shift boxes by -0.5 pixel; ``False``: rois at least 1 x 1.
        offset: ``(K, 2, PH, PW)`` deform_roi_pool's ``(dx, dy)`` of each bin, fractions of
            the roi's size times ``gamma``; None for none.
        gamma: The offsets' factor.
    """
    ph_n, pw_n = out_size
    start_x, start_y, roi_w, roi_h, grid_h, grid_w = roi_grids(
        rois, out_size, scale, sampling_ratio, aligned
    )
    bin_h, bin_w = roi_h / ph_n, roi_w / pw_n
    shape = (rois.shape[0], ph_n, pw_n)
    top = start_y[:, None, None].expand(shape)
    left = start_x[:, None, None].expand(shape)
    if offset is not None:
        top = top + gamma * roi_h[:, None, None] * offset[:, 1]
        left = left + gamma * roi_w[:, None, None] * offset[:, 0]
    rows = torch.arange(ph_n, device=rois.device, dtype=rois.dtype)[:, None]
    cols = torch.arange(pw_n, device=rois.device, dtype=rois.dtype)
    per_bin = lambda t: t[:, None, None].expand(shape).reshape(-1)  # noqa: E731
    return Bins(
        batch=per_bin(rois[:, 0].long()),
        y0=(top + rows * bin_h[:, None, None]).reshape(-1),
        x0=(left + cols * bin_w[:, None, None]).reshape(-1),
        bin_h=per_bin(bin_h),
        bin_w=per_bin(bin_w),
        grid_h=per_bin(grid_h),
        grid_w=per_bin(grid_w),
        roi_h=per_bin(roi_h),
        roi_w=per_bin(roi_w),
    )


def _axis_window(start: Tensor, bin_size: Tensor, grid: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """``(first, count)`` of the grid indices along one axis whose samples land within
    ``[-1, size]``, widened by a margin (the samples are monotonic in the index)."""
    start64, bin64 = start.double(), bin_size.double()
    step = bin64 / grid.clamp(min=1)
    # index i lands at start + (i + 0.5) * step
    low = (-1.0 - start64) / step - 0.5
    high = (size - start64) / step - 0.5
    # The kernel's (i + 0.5) * bin / grid and its sum with start (a sample near the map)
    # round by a few ulps of bin and of the map's size: widen by that too.
    eps = torch.finfo(start.dtype).eps
    margin = 2.0 + torch.ceil(4 * eps * (bin64.abs() + size + 2) / step.abs())
    first = torch.floor(torch.minimum(low, high)) - margin
    last = torch.ceil(torch.maximum(low, high)) + margin
    unbounded = ~torch.isfinite(first) | ~torch.isfinite(last) | (step == 0)
    grid64 = grid.double()
    first = torch.where(unbounded, 0.0, first.clamp(0, _MAX_GRID)).minimum(grid64)
    end = torch.where(unbounded, grid64, (last + 1).clamp(0, _MAX_GRID)).minimum(grid64)
    # A bin whose start is not finite has no sample anywhere: an empty window.
    count = torch.where(torch.isfinite(start64), (end - first).clamp(min=0), 0.0)
    return first.long(), count.long()


def bin_windows(
    bins: Bins, height: int, width: int, adaptive: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(y_first, y_count, x_first, x_count)``, each ``(B,)`` long: the part of each bin's
    grid to list. A fixed ``sampling_ratio`` lists the whole grid (bounded by the user)."""
    if not adaptive:
        zero = torch.zeros_like(bins.grid_h)
        return zero, bins.grid_h, zero, bins.grid_w
    y_first, y_count = _axis_window(bins.y0, bins.bin_h, bins.grid_h, height)
    x_first, x_count = _axis_window(bins.x0, bins.bin_w, bins.grid_w, width)
    return y_first, y_count, x_first, x_count


@dataclass
class Taps:
    """Samples' four taps, in mmcv's order ``(y_low, x_low), (y_low, x_high), (y_high,
    x_low), (y_high, x_high)``; shapes are the samples' (taps add a last axis of 4)."""

    index: Tensor  # (..., 4) long rows of :func:`pixel_table`; the padding row where outside
    weight: Tensor  # (..., 4) zero where outside
    y: Tensor  # the sample, unclamped
    x: Tensor
    y_low: Tensor  # the clamped neighbours, long
    y_high: Tensor
    x_low: Tensor
    x_high: Tensor
    inside: Tensor  # bool: within [-1, H] x [-1, W]


def sample_taps(
    bins: Bins, sel: Tensor, iy: Tensor, ix: Tensor, height: int, width: int, pad: int
) -> Taps:
    """The taps of samples ``(iy, ix)`` of bins ``sel`` (broadcast together), as mmcv;
    ``pad`` is the padding row of :func:`pixel_table`, where outside samples point."""
    dtype = bins.y0.dtype
    y = bins.y0[sel] + (iy.to(dtype) + 0.5) * bins.bin_h[sel] / bins.grid_h[sel].clamp(min=1)
    x = bins.x0[sel] + (ix.to(dtype) + 0.5) * bins.bin_w[sel] / bins.grid_w[sel].clamp(min=1)
    y, x = torch.broadcast_tensors(y, x)
    y_lo, y_hi, wy_lo, wy_hi = bilinear_taps(y, height)
    x_lo, x_hi, wx_lo, wx_hi = bilinear_taps(x, width)
    inside = (y >= -1.0) & (y <= height) & (x >= -1.0) & (x <= width)
    rows = bins.batch[sel] * height
    top, bottom = (rows + y_lo) * width, (rows + y_hi) * width
    index = torch.stack([top + x_lo, top + x_hi, bottom + x_lo, bottom + x_hi], dim=-1)
    index = torch.where(inside[..., None], index, pad)
    weight = torch.stack([wy_lo * wx_lo, wy_lo * wx_hi, wy_hi * wx_lo, wy_hi * wx_hi], dim=-1)
    return Taps(index, weight, y, x, y_lo, y_hi, x_lo, x_hi, inside)


def window_chunks(
    windows: tuple[Tensor, Tensor, Tensor, Tensor], fixed: int | None, budget: int
) -> list[tuple[int, int, int, int]]:
    """The bins' samples in chunks of at most ``budget``: ``[(first_bin, end_bin, skip,
    samples)]``, whole bins where they fit, a bin larger than ``budget`` in pieces (``skip``:
    its samples listed by earlier chunks).

    Args:
        windows: From :func:`bin_windows`.
        fixed: The samples of every bin when they are known on the host (a fixed
            ``sampling_ratio``: no device sync), else None.
        budget: Samples per chunk.
    """
    bins = windows[0].numel()
    if bins == 0:
        return []
    if fixed is not None:
        if fixed <= budget:
            step = max(1, budget // max(fixed, 1))
            firsts = range(0, bins, step)
            return [(b, min(b + step, bins), 0, (min(b + step, bins) - b) * fixed) for b in firsts]
        pieces = range(0, fixed, budget)
        return [(b, b + 1, s, min(budget, fixed - s)) for b in range(bins) for s in pieces]
    ends = (windows[1] * windows[3]).cumsum(0).tolist()
    chunks, start = [], 0
    while start < ends[-1]:
        first = bisect.bisect_right(ends, start)  # the bin that holds sample `start`
        end = bisect.bisect_right(ends, start + budget)  # bins that end within the budget
        stop = ends[end - 1] if end > first else start + budget
        skip = start - (ends[first - 1] if first else 0)
        chunks.append((first, max(end, first + 1), skip, stop - start))
        start = stop
    return chunks


def listed_samples(
    bins: Bins,
    windows: tuple[Tensor, Tensor, Tensor, Tensor],
    chunk: tuple[int, int, int, int],
    height: int,
    width: int,
    pad: int,
) -> tuple[Tensor, Tensor, Taps]:
    """The samples of one chunk of :func:`window_chunks`, bin by bin, rows first.

    Returns:
        ``(sample_bin, bag_offsets, taps)``: ``(S,)`` each sample's bin within the chunk,
        ``(chunk bins,)`` where each bin's taps start in ``taps.index.flatten()`` (the
        ``offsets`` of :func:`~torch.nn.functional.embedding_bag`), and the taps.
    """
    sample_bin, starts, iy, ix = window_samples(windows, chunk)
    taps = sample_taps(bins, sample_bin + chunk[0], iy, ix, height, width, pad)
    return sample_bin, starts * 4, taps


def window_samples(
    windows: tuple[Tensor, Tensor, Tensor, Tensor], chunk: tuple[int, int, int, int]
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The grid indices of one chunk of :func:`window_chunks`, bin by bin, rows first.

    Returns:
        ``(sample_bin, starts, iy, ix)``: ``(S,)`` each sample's bin within the chunk,
        ``(chunk bins,)`` where each bin's samples start, and ``(S,)`` long, each sample's
        row and column in its bin's grid.
    """
    first, end, skip, total = chunk
    y_first, y_count, x_first, x_count = (t[first:end] for t in windows)
    counts = y_count * x_count
    # The first bin lists its samples from `skip` on; a piece of one bin lists `total`.
    counts = torch.cat([(counts[:1] - skip).clamp(max=total), counts[1:]])
    device = counts.device
    sample_bin = torch.repeat_interleave(
        torch.arange(end - first, device=device), counts, output_size=total
    )
    starts = counts.cumsum(0) - counts
    local = torch.arange(total, device=device) - starts[sample_bin] + skip * (sample_bin == 0)
    across = x_count[sample_bin].clamp(min=1)
    iy = y_first[sample_bin] + local // across
    ix = x_first[sample_bin] + local % across
    return sample_bin, starts, iy, ix


def size_groups(
    cells_h: Tensor, cells_w: Tensor, per_cell: int, budget: int
) -> list[tuple[Tensor, int, int]]:
    """Items (rois, bins) grouped so that each group's padded ``(k, h_max * w_max *
    per_cell)`` stays under ``budget`` (or is one item): ``[(indices, h_max, w_max)]``,
    smallest items first.

    Args:
        cells_h: ``(K,)`` long, per item, the rows of its grid.
        cells_w: ``(K,)`` long, the same for columns.
        per_cell: Elements one cell costs (e.g. channels times bins).
        budget: Elements per group.
    """
    order = torch.argsort(cells_h * cells_w, stable=True)
    heights, widths = torch.stack([cells_h[order], cells_w[order]]).tolist()
    chunks = []
    start, count = 0, len(heights)
    while start < count:
        end, top_h, top_w = start, 0, 0
        while end < count:
            grow_h, grow_w = max(top_h, heights[end]), max(top_w, widths[end])
            if end > start and (end + 1 - start) * grow_h * grow_w * per_cell > budget:
                break
            top_h, top_w, end = grow_h, grow_w, end + 1
        chunks.append((order[start:end], top_h, top_w))
        start = end
    return chunks
