"""RoIAlign's max pooling over its sample grids (:mod:`mmpar.compat.ops.roi.roi_sampling`).

:func:`max_of_samples` finds each bin's largest sample, the first of equal ones in the
grid's row-major order (mmcv's kernel keeps a sample only if it is greater). Each
sample's value is mmcv's to the bit: its four products are taken one by one
(``index_select`` then a multiply: no fused multiply-add) and summed in mmcv's order,
``w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4``, so the choice among near-equal samples is
mmcv's CPU kernel's too. The backward pass sends each output's gradient to the chosen
sample's four pixels, times their weights, as mmcv's.

Bins are searched in groups of similar windows (a bin's window: the part of its grid near
the map, :func:`~mmpar.compat.ops.roi.roi_sampling.bin_windows`), the values of a few bins
at a time in two reused buffers; a bin whose window alone exceeds them, a few rows at a
time.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from mmpar.compat.ops.roi.roi_sampling import (
    Bins,
    bilinear_taps,
    bin_windows,
    pixel_table,
    roi_bins,
    size_groups,
)

__all__ = ["max_of_samples"]

# Elements of the search's values (samples times channels) at a time, and samples whose
# taps are worked out at once: small enough that the allocator reuses the memory (fresh
# memory costs page faults, more than the work done in it on a VM).
_SEARCH_ELEMENTS = 1 << 19
_TAP_SLOTS = 1 << 14


def max_of_samples(
    feat: Tensor,
    rois: Tensor,
    out_size: tuple[int, int],
    scale: float,
    sampling_ratio: int,
    aligned: bool,
) -> Tensor:
    """RoIAlign's max pooling: each bin's largest sample (the first of equal ones, rows
    first), its value mmcv's to the bit.

    Args:
        feat: ``(N, C, H, W)`` in the compute dtype.
        rois: ``(K, 5)``, same dtype, checked.
        out_size: ``(PH, PW)``.
        scale: ``spatial_scale``.
        sampling_ratio: ``>= 0``.
        aligned: RoIAlign's ``aligned``.

    Returns:
        ``(B, C)`` per bin (``B = K * PH * PW``) and channel; 0 where a bin's grid is
        empty. Differentiable in ``feat``: the gradient reaches the chosen sample's taps.
    """
    setting = (out_size, scale, sampling_ratio, aligned)
    keep = torch.is_grad_enabled() and feat.requires_grad  # the taps, for the backward pass
    return _MaxOfSamples.apply(pixel_table(feat), feat.shape, rois, setting, keep)


class _MaxOfSamples(torch.autograd.Function):
    """The search over the pixel table; the backward pass sends each output's gradient
    to its sample's four taps, times their weights (mmcv's)."""

    @staticmethod
    def forward(
        ctx: Any, table: Tensor, shape: torch.Size, rois: Tensor, setting: tuple, keep: bool
    ) -> Tensor:
        out_size, scale, sampling_ratio, aligned = setting
        _, c, h, w = shape
        bins = roi_bins(rois, out_size, scale, sampling_ratio, aligned)
        adaptive = sampling_ratio <= 0
        windows = bin_windows(bins, h, w, adaptive)
        total = bins.y0.numel()
        scratch = _Scratch(table)
        best = table.new_zeros((total, c))
        if keep:
            rows = torch.full((total, c, 4), table.shape[0] - 2, device=table.device)
            weights = table.new_zeros((total, c, 4))
        for idx, top_h, top_w in _groups(windows, sampling_ratio, c, total, table.device):
            # The taps of a group's slots are worked out at once; a bin whose window is too
            # large is searched a few rows at a time.
            rows_per_piece = max(
                1,
                min(_TAP_SLOTS // (len(idx) * top_w), _SEARCH_ELEMENTS // (top_w * max(c, 1))),
            )
            for first_row in range(0, top_h, rows_per_piece):
                piece = torch.arange(
                    first_row, min(first_row + rows_per_piece, top_h), device=table.device
                )
                found = _search(bins, table, idx, piece, top_w, windows, (h, w), keep, scratch)
                if first_row == 0:
                    best[idx] = found[0]
                    if keep:
                        rows[idx], weights[idx] = found[1], found[2]
                    continue
                held = best[idx]
                better = (found[0] > held) | (found[0].isnan() & ~held.isnan())
                best[idx] = torch.where(better, found[0], held)
                if keep:
                    rows[idx] = torch.where(better[..., None], found[1], rows[idx])
                    weights[idx] = torch.where(better[..., None], found[2], weights[idx])
        has_samples = ((windows[1] > 0) & (windows[3] > 0))[:, None]
        best = torch.where(has_samples, best, torch.zeros_like(best))
        if keep:
            ctx.save_for_backward(rows, torch.where(has_samples[..., None], weights, 0.0))
            ctx.table_shape = table.shape
        return best

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        rows, weights = ctx.saved_tensors
        c = ctx.table_shape[1]
        grad_table = grad.new_zeros(ctx.table_shape)
        flat = rows * c + torch.arange(c, device=grad.device)[:, None]
        grad_table.view(-1).index_add_(0, flat.reshape(-1), (grad[..., None] * weights).reshape(-1))
        return grad_table, None, None, None, None


class _Scratch:
    """Two buffers the search reuses for every group: fresh memory costs page faults."""

    def __init__(self, like: Tensor) -> None:
        self.like = like
        self.flat = like.new_empty((2, 0))

    def take(self, shape: tuple[int, int]) -> tuple[Tensor, Tensor]:
        """Two ``shape`` tensors (their contents are garbage)."""
        size = shape[0] * shape[1]
        if self.flat.shape[1] < size:
            self.flat = self.like.new_empty((2, size))
        return self.flat[0, :size].view(shape), self.flat[1, :size].view(shape)


def _groups(
    windows: tuple[Tensor, Tensor, Tensor, Tensor],
    sampling_ratio: int,
    channels: int,
    total: int,
    device: torch.device,
) -> list[tuple[Tensor, int, int]]:
    """Bins grouped for the search: :func:`size_groups` of their windows, or with a fixed
    ``sampling_ratio`` (every window alike) runs of bins, read back from no device."""
    if sampling_ratio <= 0:
        groups = size_groups(windows[1], windows[3], 1, _TAP_SLOTS)
        return [g for g in groups if g[1] and g[2]]
    step = max(1, _TAP_SLOTS // sampling_ratio**2)
    everything = torch.arange(total, device=device)
    return [
        (everything[i : i + step], sampling_ratio, sampling_ratio) for i in range(0, total, step)
    ]


def _search(
    bins: Bins,
    table: Tensor,
    idx: Tensor,
    rows: Tensor,
    top_w: int,
    windows: tuple[Tensor, Tensor, Tensor, Tensor],
    size: tuple[int, int],
    keep: bool,
    scratch: _Scratch,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The largest sample of bins ``idx`` among window rows ``rows``: ``(value, rows,
    weights)``, ``(k, C)`` and, if ``keep``, its taps ``(k, C, 4)``; ``-inf`` where the bin
    has no sample in these rows. ``table``: :func:`pixel_table`'s."""
    index, weight = _slot_taps(bins, idx, rows, top_w, windows, size, table.shape[0] - 2)
    k, slots, c = index.shape[0], index.shape[1], table.shape[1]
    taps = [(index[:, :, t].contiguous(), weight[:, :, t, None]) for t in range(4)]
    value = table.new_empty((k, c))
    if keep:
        chosen = torch.empty((k, c, 4), dtype=torch.long, device=table.device)
        chosen_weight = table.new_empty((k, c, 4))
    step = max(1, _SEARCH_ELEMENTS // (slots * max(c, 1)))  # bins whose values fit
    for first in range(0, k, step):
        end = min(first + step, k)
        values, term = scratch.take(((end - first) * slots, c))
        # Each tap's product on its own, then mmcv's sum in its order: w1 * v1 + w2 * v2 +
        # w3 * v3 + w4 * v4, to the bit (embedding_bag would fuse a multiply and an add).
        for t, (tap, tap_weight) in enumerate(taps):
            target = values if t == 0 else term
            torch.index_select(table, 0, tap[first:end].reshape(-1), out=target)
            target.mul_(tap_weight[first:end].reshape(-1, 1))
            if t:
                values.add_(term)
        values = values.view(end - first, slots, c)
        value[first:end] = values.amax(dim=1)
        if not keep:
            continue
        # The first largest, without argmax over a middle axis (slow); a NaN bin takes its
        # last sample (its value is NaN whichever).
        rank = torch.arange(slots, 0, -1, device=idx.device, dtype=torch.int32)[None, :, None]
        first_hit = torch.where(values >= value[first:end, None], rank, 0).amax(dim=1)
        arg = (slots - first_hit).clamp(max=slots - 1).long()  # (k', C)
        pick = arg[:, :, None].expand(-1, -1, 4)
        # A -inf map may pick a padding slot: its taps are the zero row's, no gradient.
        chosen[first:end] = index[first:end].gather(1, pick).clamp(max=table.shape[0] - 2)
        chosen_weight[first:end] = weight[first:end].gather(1, pick)
    if not keep:
        return value, None, None
    return value, chosen, chosen_weight


def _slot_taps(
    bins: Bins,
    idx: Tensor,
    rows: Tensor,
    top_w: int,
    windows: tuple[Tensor, Tensor, Tensor, Tensor],
    size: tuple[int, int],
    pad: int,
) -> tuple[Tensor, Tensor]:
    """The taps of bins ``idx``'s window rows ``rows`` (``top_w`` columns each):
    ``(index, weight)``, each ``(k, R * top_w, 4)``. A slot past its bin's window reads
    the row after the padding row (-inf) with weight 1."""
    y_first, y_count, x_first, x_count = windows
    height, width = size
    cols = torch.arange(top_w, device=idx.device)
    # Rows and columns apart (a sample's y depends on its row only): mmcv's arithmetic.
    dtype = bins.y0.dtype
    iy, ix = y_first[idx, None] + rows, x_first[idx, None] + cols  # (k, R), (k, W)
    y = bins.y0[idx, None] + (iy.to(dtype) + 0.5) * bins.bin_h[idx, None] / bins.grid_h[
        idx, None
    ].clamp(min=1)
    x = bins.x0[idx, None] + (ix.to(dtype) + 0.5) * bins.bin_w[idx, None] / bins.grid_w[
        idx, None
    ].clamp(min=1)
    y_lo, y_hi, wy_lo, wy_hi = (t[:, :, None] for t in bilinear_taps(y, height))
    x_lo, x_hi, wx_lo, wx_hi = (t[:, None, :] for t in bilinear_taps(x, width))
    inside = ((y >= -1.0) & (y <= height))[:, :, None] & ((x >= -1.0) & (x <= width))[:, None, :]
    base = (bins.batch[idx] * height)[:, None, None]
    top, bottom = (base + y_lo) * width, (base + y_hi) * width
    index = torch.stack([top + x_lo, top + x_hi, bottom + x_lo, bottom + x_hi], dim=-1)
    index = torch.where(inside[..., None], index, pad)
    weight = torch.stack([wy_lo * wx_lo, wy_lo * wx_hi, wy_hi * wx_lo, wy_hi * wx_hi], dim=-1)
    padding = (rows >= y_count[idx, None])[:, :, None] | (cols >= x_count[idx, None])[:, None, :]
    index[..., 0].masked_fill_(padding, pad + 1)
    weight[..., 0].masked_fill_(padding, 1.0)
    k = idx.shape[0]
    return index.reshape(k, -1, 4), weight.reshape(k, -1, 4)
