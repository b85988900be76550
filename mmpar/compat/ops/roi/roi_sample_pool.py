"""Average pooling over RoIAlign's sample lists (:mod:`mmpar.compat.ops.roi.roi_sampling`).

:func:`average_of_samples` is each bin's average over its grid of bilinear samples, for
deform_roi_pool (bins moved by offsets) and for rois whose grid is too large for
torchvision's ``roi_align`` buffer. The gradients are mmcv's, ``input``'s and
``offset``'s, and the backward pass lists the samples again rather than keeping them.

The samples are summed by :func:`torch.nn.functional.embedding_bag` (a compiled weighted
gather-sum over the pixel table, bag by bag), which may fuse a multiply and an add: an
average can differ from mmcv's in the last bits.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from mmpar.compat.ops.roi.roi_sampling import (
    Bins,
    Taps,
    bin_windows,
    listed_samples,
    pixel_table,
    roi_bins,
    window_chunks,
)

__all__ = ["average_of_samples"]

# Samples listed at a time (each costs some 200 bytes while its taps are worked out):
# small enough that the allocator reuses their memory, as fresh memory costs page faults.
_SAMPLES_PER_CHUNK = 1 << 15


class _AverageOfSamples(torch.autograd.Function):
    """Each bin's average over its grid, with mmcv's gradients for ``input`` and ``offset``.
    The backward pass lists the samples again: nothing of size samples is kept."""

    @staticmethod
    def forward(
        ctx: Any,
        input: Tensor,
        rois: Tensor,
        offset: Tensor | None,
        out_size: tuple[int, int],
        scale: float,
        sampling_ratio: int,
        aligned: bool,
        gamma: float,
    ) -> Tensor:
        geometry = (out_size, scale, sampling_ratio, aligned, gamma)
        bins, windows, chunks = _layout(input, rois, offset, geometry)
        n, c, h, w = input.shape
        table = pixel_table(input)
        out = input.new_zeros(bins.y0.numel(), c)
        for chunk in chunks:
            _, bag_offsets, taps = listed_samples(bins, windows, chunk, h, w, n * h * w)
            out[chunk[0] : chunk[1]] += F.embedding_bag(
                taps.index.reshape(-1),
                table,
                bag_offsets,
                mode="sum",
                per_sample_weights=taps.weight.reshape(-1),
                padding_idx=n * h * w,
            )
        ctx.save_for_backward(input, rois, offset)
        ctx.geometry = geometry
        out = out / bins.count()[:, None]
        return out.reshape(rois.shape[0], *out_size, c).permute(0, 3, 1, 2).contiguous()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor | None, ...]:
        input, rois, offset = ctx.saved_tensors
        out_size, _, _, _, gamma = ctx.geometry
        bins, windows, chunks = _layout(input, rois, offset, ctx.geometry)
        n, c, h, w = input.shape
        pad = n * h * w
        want_input = ctx.needs_input_grad[0]
        want_offset = offset is not None and ctx.needs_input_grad[2]
        grad = grad_output.permute(0, 2, 3, 1).reshape(-1, c) / bins.count()[:, None]
        table = pixel_table(input)
        grad_table = torch.zeros_like(table) if want_input else None
        along_x, along_y = grad.new_zeros(grad.shape[0]), grad.new_zeros(grad.shape[0])
        for chunk in chunks:
            sample_bin, bag_offsets, taps = listed_samples(bins, windows, chunk, h, w, pad)
            with torch.enable_grad():
                leaf = table.detach().requires_grad_(want_input)
                weight = taps.weight.reshape(-1).requires_grad_(want_offset)
                pooled = F.embedding_bag(
                    taps.index.reshape(-1),
                    leaf,
                    bag_offsets,
                    mode="sum",
                    per_sample_weights=weight,
                    padding_idx=pad,
                )
                wrt = [t for t, want in ((leaf, want_input), (weight, want_offset)) if want]
                grads = torch.autograd.grad(pooled, wrt, grad[chunk[0] : chunk[1]])
            if grad_table is not None:
                grad_table += grads[0]
            if want_offset:
                dx, dy = _offset_terms(taps, grads[-1].reshape(-1, 4))
                along_x[chunk[0] : chunk[1]].index_add_(0, sample_bin, dx)
                along_y[chunk[0] : chunk[1]].index_add_(0, sample_bin, dy)
        grad_input = grad_offset = None
        if grad_table is not None:
            grad_input = grad_table[:pad].reshape(n, h, w, c).permute(0, 3, 1, 2)
        if want_offset:
            shape = (rois.shape[0], *out_size)
            grad_offset = torch.stack(
                [
                    (gamma * bins.roi_w * along_x).reshape(shape),
                    (gamma * bins.roi_h * along_y).reshape(shape),
                ],
                dim=1,
            )
        return grad_input, None, grad_offset, None, None, None, None, None


def _layout(
    input: Tensor, rois: Tensor, offset: Tensor | None, geometry: tuple
) -> tuple[Bins, tuple[Tensor, Tensor, Tensor, Tensor], list[tuple[int, int, int]]]:
    out_size, scale, sampling_ratio, aligned, gamma = geometry
    bins = roi_bins(rois, out_size, scale, sampling_ratio, aligned, offset, gamma)
    windows = bin_windows(bins, input.shape[2], input.shape[3], sampling_ratio <= 0)
    fixed = sampling_ratio**2 if sampling_ratio > 0 else None
    return bins, windows, window_chunks(windows, fixed, _SAMPLES_PER_CHUNK)


def _offset_terms(taps: Taps, dots: Tensor) -> tuple[Tensor, Tensor]:
    """mmcv's offset gradient of each sample along x and y, before ``gamma * roi size``:
    it pairs the unclamped sample with the clamped neighbours (the derivative of the
    bilinear blend inside the map, not quite it within a pixel of the edges).

    Args:
        taps: The samples.
        dots: ``(S, 4)`` each tap's value dotted with its bin's gradient (over channels).
    """
    y, x = taps.y, taps.x
    y_lo, y_hi = taps.y_low.to(y.dtype), taps.y_high.to(y.dtype)
    x_lo, x_hi = taps.x_low.to(x.dtype), taps.x_high.to(x.dtype)
    g00, g01, g10, g11 = dots.unbind(1)  # (row, column): low/high
    along_x = g11 * (y - y_lo) + g01 * (y_hi - y) + g10 * (y_lo - y) + g00 * (y - y_hi)
    along_y = g11 * (x - x_lo) + g10 * (x_hi - x) + g01 * (x_lo - x) + g00 * (x - x_hi)
    zero = torch.zeros_like(y)
    return torch.where(taps.inside, along_x, zero), torch.where(taps.inside, along_y, zero)


def average_of_samples(
    input: Tensor,
    rois: Tensor,
    offset: Tensor | None,
    out_size: tuple[int, int],
    scale: float,
    sampling_ratio: int,
    aligned: bool,
    gamma: float = 0.1,
) -> Tensor:
    """mmcv's RoIAlign average (``offset`` None) or deformable RoI pooling, on sample lists.

    Args:
        input: ``(N, C, H, W)`` in the compute dtype.
        rois: ``(K, 5)``, same dtype, checked.
        offset: ``(K, 2, PH, PW)`` or None.
        out_size: ``(PH, PW)``.
        scale: ``spatial_scale``.
        sampling_ratio: ``>= 0``.
        aligned: RoIAlign's ``aligned`` (deform_roi_pool: True).
        gamma: The offsets' factor.

    Returns:
        ``(K, C, PH, PW)``, differentiable in ``input`` and ``offset`` (mmcv's gradients).
    """
    return _AverageOfSamples.apply(
        input, rois, offset, out_size, scale, sampling_ratio, aligned, gamma
    )
