"""Deformable RoI pooling, mmcv's ``mmcv.ops.deform_roi_pool``, on torchvision and plain torch.

mmcv's kernel is RoIAlign with ``aligned=True`` (the RoI shifted by half a
pixel, no minimum size) where each output bin may move: bin ``(ph, pw)`` of
RoI ``n`` is shifted by ``gamma * (roi_w * offset[n, 0, ph, pw],
roi_h * offset[n, 1, ph, pw])``. Each bin averages a grid of bilinear samples
(``sampling_ratio`` per side, or ``ceil(roi size / output size)`` when it is
0), and a sample outside ``[-1, H] x [-1, W]`` counts as zero.

Without offsets that is :func:`~mmpar.compat.ops.roi_align.roi_align` (average,
aligned), torchvision's kernel, to the bit. With offsets the samples are listed
and pooled by :func:`~mmpar.compat.ops.roi.roi_sample_pool.average_of_samples`: only
the samples near the map are listed (so a huge box costs what the map does), and
the backward pass lists them again (nothing of size samples is kept). The
gradients are mmcv's: the input's is exact, the offset's is mmcv's formula, which
near the map's edges (a sample within a pixel of the top or left edge, or past
the last row or column's centre) is not the derivative of the clamped forward. A
NaN offset moves its bin nowhere: the bin reads 0 (mmcv's kernel reads memory at
an undefined place).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import ArgumentError, check_int, float_compute_dtype
from mmpar.compat.ops.roi.roi_inputs import (
    Size,
    check_roi_inputs,
    check_sample_count,
    finite_number,
    kernel_rois,
    sampling_ratio_value,
    size_pair,
    spatial_scale_value,
)
from mmpar.compat.ops.roi.roi_sample_pool import average_of_samples
from mmpar.compat.ops.roi_align import roi_align

__all__ = ["DeformRoIPool", "DeformRoIPoolPack", "ModulatedDeformRoIPoolPack", "deform_roi_pool"]

_OP = "deform_roi_pool"


def deform_roi_pool(
    input: Tensor,
    rois: Tensor,
    offset: Tensor | None,
    output_size: Size,
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
        spatial_scale: Feature map size over image size, positive.
        sampling_ratio: Samples per bin side, ``>= 0``; 0 for ``ceil(roi size / output size)``.
        gamma: Scale of the offsets, finite.

    Returns:
        (K, C, PH, PW), ``input``'s dtype (float16 and bfloat16 are computed in float32).

    Raises:
        TypeError: a tensor is not floating point, or an argument of a wrong type.
        ValueError: shapes that do not fit together (the rois' is also an
            ``AssertionError``, as mmcv's), a bad value, or a roi's batch index or a
            non-finite roi (on the CPU; elsewhere such a roi pools zeros).
    """
    size = size_pair(_OP, output_size)
    scale = spatial_scale_value(_OP, spatial_scale)
    ratio = sampling_ratio_value(_OP, sampling_ratio)
    gamma = finite_number(_OP, "gamma", gamma)
    check_roi_inputs(_OP, input, rois)
    check_sample_count(_OP, ratio, rois.shape[0], size)
    offset = _checked_offset(input, rois, offset, size)
    if offset is None:
        return roi_align(input, rois, size, scale, ratio, "avg", True)
    compute = float_compute_dtype(input.dtype)
    boxes, replaced = kernel_rois(rois.detach().to(compute), input.shape[0], scale)
    offset = offset.to(compute)
    if replaced is not None:  # a replaced roi must not move back onto the map
        offset = torch.where(replaced[:, None, None, None], 0.0, offset)
    out = average_of_samples(input.to(compute), boxes, offset, size, scale, ratio, True, gamma)
    return out.to(input.dtype)


def _checked_offset(
    input: Tensor, rois: Tensor, offset: Any, output_size: tuple[int, int]
) -> Tensor | None:
    """``offset`` checked; None for none (None or empty)."""
    if offset is None:
        return None
    if not isinstance(offset, Tensor) or not offset.is_floating_point():
        found = offset.dtype if isinstance(offset, Tensor) else type(offset).__name__
        raise TypeError(f"mmcv.ops.{_OP}: offset must be a floating-point tensor, got {found}")
    if offset.numel() == 0:
        return None
    expected = (rois.shape[0], 2, *output_size)
    if tuple(offset.shape) != expected:
        raise ValueError(
            f"mmcv.ops.{_OP}: offset must have shape {expected} (K, 2, PH, PW), "
            f"found {tuple(offset.shape)}"
        )
    if offset.device != input.device:
        raise ValueError(
            f"mmcv.ops.{_OP}: offset must be on input's device {input.device}, got {offset.device}"
        )
    return offset


class DeformRoIPool(nn.Module):
    """:func:`deform_roi_pool` with its settings.

    Args:
        output_size: Int or (PH, PW).
        spatial_scale: Feature map size over image size, positive.
        sampling_ratio: Samples per bin side, ``>= 0``; 0 for adaptive.
        gamma: Scale of the offsets.
    """

    def __init__(
        self,
        output_size: Size,
        spatial_scale: float = 1.0,
        sampling_ratio: int = 0,
        gamma: float = 0.1,
    ) -> None:
        super().__init__()
        self.output_size = size_pair("DeformRoIPool", output_size)
        self.spatial_scale = spatial_scale_value("DeformRoIPool", spatial_scale)
        self.sampling_ratio = sampling_ratio_value("DeformRoIPool", sampling_ratio)
        self.gamma = finite_number("DeformRoIPool", "gamma", gamma)

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
        output_size: Size,
        output_channels: int,
        deform_fc_channels: int = 1024,
        spatial_scale: float = 1.0,
        sampling_ratio: int = 0,
        gamma: float = 0.1,
    ) -> None:
        super().__init__(output_size, spatial_scale, sampling_ratio, gamma)
        op = f"mmcv.ops.{type(self).__name__}"
        self.output_channels = check_int(op, "output_channels", output_channels, 1)
        self.deform_fc_channels = check_int(op, "deform_fc_channels", deform_fc_channels, 1)
        bins = self.output_size[0] * self.output_size[1]
        width = bins * self.output_channels
        self.offset_fc = _linear_head(width, self.deform_fc_channels, bins * 2, 3)
        if self._with_mask:
            head = _linear_head(width, self.deform_fc_channels, bins, 2)
            self.mask_fc = nn.Sequential(*head, nn.Sigmoid())

    def _pool_with_offsets(self, input: Tensor, rois: Tensor) -> tuple[Tensor, Tensor]:
        """The first pass: the flattened plain pooling (K, PH * PW * C), and the offsets.

        Args:
            input: (N, output_channels, H, W).
            rois: (K, 5), (batch index, x1, y1, x2, y2).

        Returns:
            ``(flat, offset)``: (K, PH * PW * C) and (K, 2, PH, PW), in the heads' dtype.
        """
        channels = self.output_channels
        if not isinstance(input, Tensor) or input.dim() != 4 or input.size(1) != channels:
            found = tuple(input.shape) if isinstance(input, Tensor) else type(input).__name__
            raise ArgumentError(
                f"mmcv.ops.{type(self).__name__}: input must be (N, output_channels={channels}, "
                f"H, W), found {found}"
            )
        pooled = DeformRoIPool.forward(self, input, rois)
        flat = pooled.reshape(pooled.shape[0], channels * self.output_size[0] * self.output_size[1])
        # The heads' dtype: a half or double input to a float32 layer (no autocast) would
        # fail in Linear; the pooling itself takes offsets of any float dtype.
        flat = flat.to(self.offset_fc[0].weight.dtype)
        offset = self.offset_fc(flat).reshape(flat.shape[0], 2, *self.output_size)
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
        mask = self.mask_fc(flat).reshape(flat.shape[0], 1, *self.output_size)
        out = super().forward(input, rois, offset)
        return out * mask.to(out.dtype)
