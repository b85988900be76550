"""Deformable RoI pooling, mmcv's ``mmcv.ops.deform_roi_pool``, in plain torch.

mmcv's kernel is RoIAlign with ``aligned=True`` (the RoI shifted by half a
pixel, no minimum size) where each output bin may move: bin ``(ph, pw)`` of
RoI ``n`` is shifted by ``gamma * (roi_w * offset[n, 0, ph, pw],
roi_h * offset[n, 1, ph, pw])``. Each bin averages a grid of bilinear samples
(``sampling_ratio`` per side, or ``ceil(roi size / output size)`` when it is
0), and a sample outside ``[-1, H] x [-1, W]`` counts as zero.

Here the samples are vectorised over RoIs and bins, one grid position at a
time, and the backward pass recomputes them (nothing of size channels x
samples is kept). The gradients are mmcv's: the input's is exact, the
offset's is mmcv's formula, which near the map's edges (a sample within a
pixel of the top or left edge, or past the last row or column's centre) is
not the derivative of the clamped forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable
from torch.nn.modules.utils import _pair

from mmpar.compat.ops.backend import check_float, float_compute_dtype

__all__ = ["DeformRoIPool", "DeformRoIPoolPack", "ModulatedDeformRoIPoolPack", "deform_roi_pool"]

IntPair = int | tuple[int, int]


@dataclass
class _Bins:
    """Where the bins of every RoI lie; tensors are (K, PH, PW) unless noted."""

    batch: Tensor  # (K, 1, 1) long: each RoI's image
    y0: Tensor  # top of each bin, shift included
    x0: Tensor  # left of each bin, shift included
    bin_h: Tensor  # (K, 1, 1)
    bin_w: Tensor  # (K, 1, 1)
    grid_h: Tensor  # (K, 1, 1) long: grid rows (may be <= 0: no samples)
    grid_w: Tensor  # (K, 1, 1) long
    roi_h: Tensor  # (K, 1, 1)
    roi_w: Tensor  # (K, 1, 1)
    count: Tensor  # (K * PH * PW, 1): each bin's samples averaged, at least 1


def _bins(
    rois: Tensor,
    offset: Tensor | None,
    output_size: tuple[int, int],
    spatial_scale: float,
    sampling_ratio: int,
    gamma: float,
) -> _Bins:
    pooled_h, pooled_w = output_size
    start_w, start_h, end_w, end_h = (rois[:, 1:] * spatial_scale - 0.5)[:, :, None, None].unbind(1)
    roi_w = end_w - start_w
    roi_h = end_h - start_h
    bin_h = roi_h / pooled_h
    bin_w = roi_w / pooled_w
    if sampling_ratio > 0:
        grid_h = torch.full_like(roi_h, sampling_ratio, dtype=torch.long)
        grid_w = grid_h
    else:
        grid_h = torch.ceil(roi_h / pooled_h).long()
        grid_w = torch.ceil(roi_w / pooled_w).long()
    if offset is not None:
        start_h = start_h + gamma * roi_h * offset[:, 1]
        start_w = start_w + gamma * roi_w * offset[:, 0]
    rows = torch.arange(pooled_h, device=rois.device, dtype=rois.dtype)[:, None]
    cols = torch.arange(pooled_w, device=rois.device, dtype=rois.dtype)
    shape = (rois.size(0), pooled_h, pooled_w)
    return _Bins(
        batch=rois[:, 0].long()[:, None, None],
        y0=(start_h + rows * bin_h).expand(shape),
        x0=(start_w + cols * bin_w).expand(shape),
        bin_h=bin_h,
        bin_w=bin_w,
        grid_h=grid_h,
        grid_w=grid_w,
        roi_h=roi_h,
        roi_w=roi_w,
        count=(grid_h * grid_w).clamp(min=1).to(rois.dtype).expand(shape).reshape(-1, 1),
    )


def _grid_extent(bins: _Bins, sampling_ratio: int) -> tuple[int, int]:
    """The largest grid over the RoIs (a host sync, unless ``sampling_ratio`` fixes it)."""
    if sampling_ratio > 0:
        return sampling_ratio, sampling_ratio
    if bins.grid_h.numel() == 0:
        return 0, 0
    extent = torch.stack((bins.grid_h.max(), bins.grid_w.max())).clamp(min=0).tolist()
    return extent[0], extent[1]


@dataclass
class _Samples:
    """One grid position's samples in every bin, flattened to (S,) = (K * PH * PW,)."""

    index: tuple[Tensor, Tensor, Tensor, Tensor]  # flat (b, y, x) of the 4 corners
    weight: tuple[Tensor, Tensor, Tensor, Tensor]  # zero where the sample counts as zero
    y: Tensor  # unclamped sample row
    x: Tensor  # unclamped sample column
    y_low: Tensor
    y_high: Tensor
    x_low: Tensor
    x_high: Tensor
    valid: Tensor  # bool: inside the map and inside its RoI's grid


def _axis(coord: Tensor, valid: Tensor, size: int) -> tuple[Tensor, Tensor, Tensor]:
    """The low and high neighbours and the weight of the high one, as mmcv's RoIAlign."""
    # Invalid samples (outside, inf, nan) are moved to 0 so that indexing stays in range.
    clamped = torch.where(valid, coord.clamp(0, size), torch.zeros_like(coord))
    low = clamped.floor().long()
    last = low >= size - 1
    low = torch.where(last, size - 1, low)
    high = torch.where(last, size - 1, low + 1)
    clamped = torch.where(last, low.to(coord.dtype), clamped)
    return low, high, clamped - low


def _samples(bins: _Bins, iy: int, ix: int, height: int, width: int) -> _Samples:
    # mmcv's order of operations, so that float32 rounds alike.
    y = (bins.y0 + (iy + 0.5) * bins.bin_h / bins.grid_h.clamp(min=1)).reshape(-1)
    x = (bins.x0 + (ix + 0.5) * bins.bin_w / bins.grid_w.clamp(min=1)).reshape(-1)
    in_grid = ((iy < bins.grid_h) & (ix < bins.grid_w)).expand_as(bins.y0).reshape(-1)
    valid = in_grid & (y >= -1) & (y <= height) & (x >= -1) & (x <= width)
    y_low, y_high, ly = _axis(y, valid, height)
    x_low, x_high, lx = _axis(x, valid, width)
    hy, hx = 1 - ly, 1 - lx
    zero = torch.zeros_like(y)
    weight = tuple(torch.where(valid, w, zero) for w in (hy * hx, hy * lx, ly * hx, ly * lx))
    base = (bins.batch * (height * width)).expand_as(bins.y0).reshape(-1)
    index = (
        base + y_low * width + x_low,
        base + y_low * width + x_high,
        base + y_high * width + x_low,
        base + y_high * width + x_high,
    )
    return _Samples(index, weight, y, x, y_low, y_high, x_low, x_high, valid)  # type: ignore[arg-type]


def _pixels(input: Tensor) -> Tensor:
    """``input`` (N, C, H, W) as (N * H * W, C) rows, one per pixel."""
    batch, channels, height, width = input.shape
    return input.permute(0, 2, 3, 1).reshape(batch * height * width, channels)


def _all_samples(
    bins: _Bins, extent: tuple[int, int], height: int, width: int
) -> Iterator[_Samples]:
    for iy in range(extent[0]):
        for ix in range(extent[1]):
            yield _samples(bins, iy, ix, height, width)


class _DeformRoIPoolFunction(torch.autograd.Function):
    """The pooling, with mmcv's gradients for ``input`` and ``offset``."""

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        input: Tensor,
        rois: Tensor,
        offset: Tensor | None,
        output_size: tuple[int, int],
        spatial_scale: float,
        sampling_ratio: int,
        gamma: float,
    ) -> Tensor:
        _, channels, height, width = input.shape
        bins = _bins(rois, offset, output_size, spatial_scale, sampling_ratio, gamma)
        extent = _grid_extent(bins, sampling_ratio)
        feat = _pixels(input)
        total = input.new_zeros(rois.size(0) * output_size[0] * output_size[1], channels)
        for s in _all_samples(bins, extent, height, width):
            for index, weight in zip(s.index, s.weight):
                total.addcmul_(feat.index_select(0, index), weight[:, None])
        ctx.save_for_backward(input, rois, offset)
        ctx.geometry = (output_size, spatial_scale, sampling_ratio, gamma, extent)  # type: ignore[attr-defined]
        out = (total / bins.count).reshape(rois.size(0), *output_size, channels)
        return out.permute(0, 3, 1, 2).contiguous()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor | None, ...]:
        input, rois, offset = ctx.saved_tensors
        output_size, spatial_scale, sampling_ratio, gamma, extent = ctx.geometry
        batch, channels, height, width = input.shape
        bins = _bins(rois, offset, output_size, spatial_scale, sampling_ratio, gamma)
        grad = _pixels(grad_output) / bins.count
        feat = _pixels(input)
        grad_feat = torch.zeros_like(feat) if ctx.needs_input_grad[0] else None
        want_offset = offset is not None and ctx.needs_input_grad[2]
        grad_y = grad_x = grad.new_zeros(grad.size(0))
        for s in _all_samples(bins, extent, height, width):
            if grad_feat is not None:
                for index, weight in zip(s.index, s.weight):
                    grad_feat.index_add_(0, index, grad * weight[:, None])
            if want_offset:
                dy, dx = _offset_gradient(s, grad, feat)
                grad_y = grad_y + dy
                grad_x = grad_x + dx
        grad_input = None
        if grad_feat is not None:
            grad_input = grad_feat.reshape(batch, height, width, channels).permute(0, 3, 1, 2)
        grad_offset = None
        if want_offset:
            shape = (rois.size(0), *output_size)
            along_x = gamma * bins.roi_w * grad_x.reshape(shape)
            along_y = gamma * bins.roi_h * grad_y.reshape(shape)
            grad_offset = torch.stack((along_x, along_y), dim=1)
        return grad_input, None, grad_offset, None, None, None, None


def _offset_gradient(s: _Samples, grad: Tensor, feat: Tensor) -> tuple[Tensor, Tensor]:
    """mmcv's gradient of one grid position's samples along y and x, before ``gamma * roi size``.

    As mmcv's kernel, it pairs the unclamped sample position with the clamped
    neighbours: the derivative of the bilinear blend inside the map, not
    quite it within a pixel of the edges.
    """
    # Each corner's value, summed over channels against the output's gradient.
    g00, g01, g10, g11 = ((feat.index_select(0, index) * grad).sum(1) for index in s.index)
    y, x = s.y, s.x
    y_low, y_high = s.y_low.to(y.dtype), s.y_high.to(y.dtype)
    x_low, x_high = s.x_low.to(x.dtype), s.x_high.to(x.dtype)
    along_x = g11 * (y - y_low) + g01 * (y_high - y) + g10 * (y_low - y) + g00 * (y - y_high)
    along_y = g11 * (x - x_low) + g10 * (x_high - x) + g01 * (x_low - x) + g00 * (x - x_high)
    zero = torch.zeros_like(y)
    return torch.where(s.valid, along_y, zero), torch.where(s.valid, along_x, zero)


def deform_roi_pool(
    input: Tensor,
    rois: Tensor,
    offset: Tensor | None,
    output_size: IntPair,
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    gamma: float = 0.1,
) -> Tensor:
    """Deformable RoI pooling: RoIAlign (aligned) whose bins move by ``offset``.

    Args:
        input: (N, C, H, W) float feature map.
        rois: (K, 5) float, (batch index, x1, y1, x2, y2) in image coordinates.
        offset: (K, 2, PH, PW) float, per bin (dx, dy) as fractions of the
            RoI's width and height (times ``gamma``); None (or empty) for none.
        output_size: Int or (PH, PW).
        spatial_scale: Feature map size over image size.
        sampling_ratio: Samples per bin side; 0 for ``ceil(roi size / output size)``.
        gamma: Scale of the offsets.

    Returns:
        (K, C, PH, PW), ``input``'s dtype (float16 and bfloat16 are computed in float32).

    Raises:
        TypeError: a tensor is not floating point.
        ValueError: shapes that do not fit together.
    """
    size = _pair(output_size)
    if len(size) != 2 or not all(isinstance(v, int) and v > 0 for v in size):
        raise ValueError(
            f"mmcv.ops.deform_roi_pool: output_size must be a positive int or a pair of them, "
            f"found {output_size!r}"
        )
    pooled: tuple[int, int] = (size[0], size[1])
    _check_inputs(input, rois, offset, pooled)
    if offset is not None and offset.numel() == 0:
        offset = None
    compute = float_compute_dtype(input.dtype)
    out = _DeformRoIPoolFunction.apply(
        input.to(compute),
        rois.to(compute),
        None if offset is None else offset.to(compute),
        pooled,
        float(spatial_scale),
        int(sampling_ratio),
        float(gamma),
    )
    return out.to(input.dtype)


def _check_inputs(
    input: Tensor, rois: Tensor, offset: Tensor | None, output_size: tuple[int, int]
) -> None:
    op = "mmcv.ops.deform_roi_pool"
    if input.dim() != 4:
        raise ValueError(f"{op}: input must be 4D (N, C, H, W), found {input.dim()}D")
    if rois.dim() != 2 or rois.size(1) != 5:
        raise ValueError(
            f"{op}: rois must be (K, 5), (batch index, x1, y1, x2, y2), found {tuple(rois.shape)}"
        )
    check_float("deform_roi_pool", input=input, rois=rois, offset=offset)
    if offset is not None and offset.numel() != 0:
        expected = (rois.size(0), 2, *output_size)
        if tuple(offset.shape) != expected:
            raise ValueError(
                f"{op}: offset must have shape {expected} (K, 2, PH, PW), "
                f"found {tuple(offset.shape)}"
            )


class DeformRoIPool(nn.Module):
    """:func:`deform_roi_pool` with its settings.

    Args:
        output_size: Int or (PH, PW).
        spatial_scale: Feature map size over image size.
        sampling_ratio: Samples per bin side; 0 for adaptive.
        gamma: Scale of the offsets.
    """

    def __init__(
        self,
        output_size: IntPair,
        spatial_scale: float = 1.0,
        sampling_ratio: int = 0,
        gamma: float = 0.1,
    ) -> None:
        super().__init__()
        self.output_size = _pair(output_size)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = int(sampling_ratio)
        self.gamma = float(gamma)

    def forward(self, input: Tensor, rois: Tensor, offset: Tensor | None = None) -> Tensor:
        """Pools ``rois`` from ``input``; see :func:`deform_roi_pool`.

        Args:
            input: (N, C, H, W).
            rois: (K, 5), (batch index, x1, y1, x2, y2).
            offset: (K, 2, PH, PW), or None.

        Returns:
            (K, C, PH, PW).
        """
        return deform_roi_pool(
            input, rois, offset, self.output_size, self.spatial_scale, self.sampling_ratio,
            self.gamma,
        )  # fmt: skip


def _linear_head(in_features: int, hidden: int, out_features: int, layers: int) -> nn.Sequential:
    """``layers`` Linear layers with ReLUs between; the last starts at zero."""
    modules: list[nn.Module] = []
    widths = [in_features] + [hidden] * (layers - 1) + [out_features]
    for i in range(layers):
        modules.append(nn.Linear(widths[i], widths[i + 1]))
        if i < layers - 1:
            modules.append(nn.ReLU(inplace=True))
    last = modules[-1]
    with torch.no_grad():
        last.weight.zero_()  # type: ignore[union-attr]
        last.bias.zero_()  # type: ignore[union-attr]
    return nn.Sequential(*modules)


class _PackBase(DeformRoIPool):
    """The Packs' shared part: their arguments, ``offset_fc`` (``mask_fc`` with
    ``_with_mask``) and the first pass; see :class:`DeformRoIPoolPack`."""

    _with_mask = False

    def __init__(
        self,
        output_size: IntPair,
        output_channels: int,
        deform_fc_channels: int = 1024,
        spatial_scale: float = 1.0,
        sampling_ratio: int = 0,
        gamma: float = 0.1,
    ) -> None:
        super().__init__(output_size, spatial_scale, sampling_ratio, gamma)
        self.output_channels = output_channels
        self.deform_fc_channels = deform_fc_channels
        bins = self.output_size[0] * self.output_size[1]
        self.offset_fc = _linear_head(bins * output_channels, deform_fc_channels, bins * 2, 3)
        if self._with_mask:
            head = _linear_head(bins * output_channels, deform_fc_channels, bins, 2)
            self.mask_fc = nn.Sequential(*head, nn.Sigmoid())

    def _pool_with_offsets(self, input: Tensor, rois: Tensor) -> tuple[Tensor, Tensor]:
        """The first pass: the flattened plain pooling (K, PH * PW * C), and the offsets.

        Args:
            input: (N, output_channels, H, W).
            rois: (K, 5), (batch index, x1, y1, x2, y2).

        Returns:
            ``(flat, offset)``: (K, PH * PW * C) and (K, 2, PH, PW).
        """
        channels = self.output_channels
        if input.dim() != 4 or input.size(1) != channels:
            raise ValueError(
                f"{type(self).__name__}: input must be (N, output_channels={channels}, H, W), "
                f"found {tuple(input.shape)}"
            )
        flat = DeformRoIPool.forward(self, input, rois).reshape(rois.size(0), -1)
        offset = self.offset_fc(flat).reshape(rois.size(0), 2, *self.output_size)
        return flat, offset


class DeformRoIPoolPack(_PackBase):
    """Deformable RoI pooling that computes its own offsets.

    A first pooling without offsets feeds ``offset_fc`` (three Linear layers,
    the last at zero), whose output offsets the second pooling.

    Args:
        output_size: Int or (PH, PW).
        output_channels: Channels of the input (and output).
        deform_fc_channels: Width of ``offset_fc``'s hidden layers.
        spatial_scale: Feature map size over image size.
        sampling_ratio: Samples per bin side; 0 for adaptive.
        gamma: Scale of the offsets.
    """

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:  # type: ignore[override]
        """Pools ``rois`` from ``input`` at the offsets ``offset_fc`` computes.

        Args:
            input: (N, output_channels, H, W).
            rois: (K, 5), (batch index, x1, y1, x2, y2).

        Returns:
            (K, output_channels, PH, PW).
        """
        _, offset = self._pool_with_offsets(input, rois)
        return super().forward(input, rois, offset)


class ModulatedDeformRoIPoolPack(_PackBase):
    """Deformable RoI pooling with its own offsets and a per-bin mask.

    As :class:`DeformRoIPoolPack` (``offset_fc``), and ``mask_fc`` (two
    Linear layers, the last at zero, then a sigmoid) weighs each output bin.
    Takes :class:`DeformRoIPoolPack`'s arguments (``deform_fc_channels`` is the
    width of both heads' hidden layers).
    """

    _with_mask = True

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:  # type: ignore[override]
        """Pools ``rois`` at the computed offsets, times the computed mask.

        Args:
            input: (N, output_channels, H, W).
            rois: (K, 5), (batch index, x1, y1, x2, y2).

        Returns:
            (K, output_channels, PH, PW).
        """
        flat, offset = self._pool_with_offsets(input, rois)
        mask = self.mask_fc(flat).reshape(rois.size(0), 1, *self.output_size)
        return super().forward(input, rois, offset) * mask
