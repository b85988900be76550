"""Deformable convolution (DCNv1), mmcv's ``mmcv.ops.deform_conv``.

The kernel is ``torchvision.ops.deform_conv2d`` without a mask, as
:mod:`mmpar.compat.ops.sampling.deform_sampling` runs it: mmcv's offset layout and
sampling, and mmcv-full's gradients, border points included.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from mmpar.compat.ops.backend import ArgumentError, check_int
from mmpar.compat.ops.modulated_deform_conv import (
    OffsetConvPack,
    rename_deform_groups,
    set_conv_attributes,
)
from mmpar.compat.ops.sampling.deform_sampling import (
    IntPair,
    check_per_point,
    conv_geometry,
    deform_conv,
)

__all__ = ["DeformConv2d", "DeformConv2dPack", "deform_conv2d"]


def deform_conv2d(
    input: Tensor,
    offset: Tensor,
    weight: Tensor,
    stride: IntPair = 1,
    padding: IntPair = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    deform_groups: int = 1,
    bias: bool = False,
    im2col_step: int = 32,
) -> Tensor:
    """Deformable 2D convolution (DCNv1).

    ``out[n, o, y, x] = sum over c, i, j of weight[o, c, i, j] *
    bilinear(input[n, c], y * sh - ph + i * dh + dy, x * sw - pw + j * dw + dx)``,
    with ``(dy, dx) = offset[n, g, 2k : 2k + 2, y, x]``, ``k = i * kw + j``,
    ``g`` the deformable group of channel ``c``, and zero outside the map. As
    mmcv's, the output has ``offset``'s dtype: ``input`` and ``weight`` are
    cast to it (mixed precision).

    Args:
        input: (N, C_in, H, W) float.
        offset: (N, deform_groups * 2 * kh * kw, out_h, out_w) float: per group,
            per kernel point, (dy, dx).
        weight: (C_out, C_in // groups, kh, kw) float.
        stride: Int or (sh, sw).
        padding: Int or (ph, pw): zeros added on both sides.
        dilation: Int or (dh, dw).
        groups: Blocked connections from input to output channels.
        deform_groups: Groups of input channels, each with its own offsets.
        bias: Must be False (mmcv's DCNv1 has no bias).
        im2col_step: How many images mmcv's kernel unrolls at a time. It does
            not change the result, and torchvision's kernel chooses its own; as
            mmcv, a batch larger than it must be divisible by it.

    Returns:
        (N, C_out, out_h, out_w), ``offset``'s dtype.

    Raises:
        TypeError: a tensor is not floating point.
        ArgumentError: ``bias`` is not False, or a batch larger than ``im2col_step``
            is not divisible by it (mmcv asserts both; a ValueError too).
        ValueError: shapes or parameters that do not fit together.
    """
    op = "deform_conv2d"
    if bias is not False:
        raise ArgumentError(
            f"mmcv.ops.{op}: bias must be False (mmcv's DCNv1 has no bias), found {bias!r}"
        )
    step = check_int(f"mmcv.ops.{op}", "im2col_step", im2col_step, 1)
    batch = input.size(0) if isinstance(input, Tensor) and input.dim() else 0
    if batch and batch % min(step, batch):
        raise ArgumentError(
            f"mmcv.ops.{op}: batch size must be divisible by im2col_step when larger, as "
            f"in mmcv: found batch size {batch}, im2col_step {step}"
        )
    stride_, padding_, dilation_, out_size = conv_geometry(
        op, input, weight, stride, padding, dilation, groups, deform_groups
    )
    offset = check_per_point(
        op, "offset", offset,
        (input.size(0), deform_groups * 2 * weight.size(2) * weight.size(3), *out_size),
        "N, deform_groups * 2 * kh * kw, out_h, out_w", input,
    )  # fmt: skip
    return deform_conv(input, offset, weight, None, None, stride_, padding_, dilation_)


class DeformConv2d(nn.Module):
    """Deformable 2D convolution (DCNv1), with its weight (no bias).

    Args:
        in_channels: Channels of the input.
        out_channels: Channels of the output.
        kernel_size: Int or (kh, kw).
        stride: Int or (sh, sw).
        padding: Int or (ph, pw).
        dilation: Int or (dh, dw).
        groups: Blocked connections from input to output channels.
        deform_groups: Groups of input channels with their own offsets
            (``deformable_groups=``, deprecated, is accepted with a warning).
        bias: Must be False.
        im2col_step: A batch larger than it must be divisible by it, as in mmcv; see
            :func:`deform_conv2d`.

    Raises:
        ArgumentError: ``bias`` is set, or the channels are not divisible by ``groups``
            (mmcv asserts both; a ValueError too).
        ValueError: a size out of range.
    """

    @rename_deform_groups("DeformConv2d")
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntPair,
        stride: IntPair = 1,
        padding: IntPair = 0,
        dilation: IntPair = 1,
        groups: int = 1,
        deform_groups: int = 1,
        bias: bool = False,
        im2col_step: int = 32,
    ) -> None:
        super().__init__()
        if bias:
            raise ArgumentError(
                f"mmcv.ops.DeformConv2d: bias must be False (mmcv's DCNv1 has no bias), "
                f"found {bias!r}"
            )
        set_conv_attributes(
            self, "DeformConv2d", in_channels, out_channels, kernel_size, stride, padding,
            dilation, groups, deform_groups,
        )  # fmt: skip
        self.im2col_step = im2col_step
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Kaiming-uniform weight (for ReLU), as mmcv."""
        nn.init.kaiming_uniform_(self.weight, nonlinearity="relu")

    def forward(self, x: Tensor, offset: Tensor) -> Tensor:
        """The convolution of ``x`` sampled at ``offset``.

        Args:
            x: (N, C_in, H, W).
            offset: (N, deform_groups * 2 * kh * kw, out_h, out_w), per kernel
                point (dy, dx): ``[y0, x0, y1, x1, ...]``, points in row-major order.

        Returns:
            (N, C_out, out_h, out_w).
        """
        # As mmcv: an input smaller than the kernel is zero-padded at the bottom
        # and right (with its offsets), and the output cropped by as much.
        pad_h = max(self.kernel_size[0] - x.size(2), 0)
        pad_w = max(self.kernel_size[1] - x.size(3), 0)
        if pad_h or pad_w:
            x = F.pad(x, (0, pad_w, 0, pad_h))
            offset = F.pad(offset, (0, pad_w, 0, pad_h))
        out = self._deform_conv(x, offset)
        if pad_h or pad_w:
            out = out[:, :, : out.size(2) - pad_h, : out.size(3) - pad_w].contiguous()
        return out

    def _deform_conv(self, x: Tensor, offset: Tensor) -> Tensor:
        """:func:`deform_conv2d` with this layer's weight and geometry."""
        return deform_conv2d(
            x, offset, self.weight, self.stride, self.padding, self.dilation,
            self.groups, self.deform_groups, False, self.im2col_step,
        )  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(in_channels={self.in_channels},\n"
            f"out_channels={self.out_channels},\n"
            f"kernel_size={self.kernel_size},\n"
            f"stride={self.stride},\n"
            f"padding={self.padding},\n"
            f"dilation={self.dilation},\n"
            f"groups={self.groups},\n"
            f"deform_groups={self.deform_groups},\n"
            "bias=False)"
        )


class DeformConv2dPack(OffsetConvPack, DeformConv2d):
    """DCNv1 that computes its own offsets, a drop-in for ``nn.Conv2d`` (mmcv's "DCN").

    ``conv_offset``, an ``nn.Conv2d`` with the same geometry, gives the
    ``deform_groups * 2 * kh * kw`` offset channels; it starts at zero, so the
    layer starts as a plain convolution. Takes :class:`DeformConv2d`'s arguments.
    """

    _log_name = "DeformConv2dPack"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._build_conv_offset(2)
        self.init_offset()

    def init_offset(self) -> None:
        """``conv_offset`` at zero."""
        self._zero_conv_offset()

    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]
        """The convolution of ``x`` at the offsets ``conv_offset`` computes.

        Args:
            x: (N, C_in, H, W).

        Returns:
            (N, C_out, out_h, out_w).
        """
        return self._deform_conv(x, self._offsets_of(x))
