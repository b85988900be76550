"""Masked convolution, mmcv's ``mmcv.ops.masked_conv``.

mmcv convolves only where the mask is positive and leaves zeros (not the
bias) elsewhere; stride 1, one image, and no backward pass (the gradients
are None). mmpar computes the whole convolution with ``F.conv2d`` and keeps
the masked positions, which gives the same values.

Where the output is smaller than the input (``padding < (k - 1) / 2``), the
mask's positions beyond the output have no output pixel and are ignored (mmcv's
CUDA kernel writes them to other positions); checking them would stop the
device for a host-side read. A NaN in ``features`` reaches the masked outputs
whose window reads it, as in mmcv.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable
from torch.nn.modules.utils import _pair

from mmpar.compat.ops.backend import ArgumentError, check_float_tensors, unsupported
from mmpar.compat.ops.sampling.deform_sampling import IntPair, conv_output_size, int_pair

__all__ = ["MaskedConv2d", "masked_conv2d"]


class _MaskedConv2dFunction(torch.autograd.Function):
    """The masked convolution; as mmcv's, its backward gives no gradients."""

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        features: Tensor,
        keep: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        padding: tuple[int, int],
    ) -> Tensor:
        out = F.conv2d(features, weight, bias, padding=padding)
        return torch.where(keep, out, torch.zeros((), dtype=out.dtype, device=out.device))

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_output: Tensor) -> tuple[None, ...]:
        return (None,) * 5


def _check(features: Tensor, mask: Tensor, weight: Tensor, bias: Tensor | None) -> None:
    # mmcv asserts the shapes of features and mask: ArgumentError is an AssertionError too.
    op = "mmcv.ops.masked_conv2d"
    if not isinstance(features, Tensor) or features.dim() != 4 or features.size(0) != 1:
        found = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
        raise ArgumentError(f"{op}: features must be (1, C, H, W), found {found}")
    if (
        not isinstance(mask, Tensor)
        or mask.dim() != 3
        or mask.size(0) != 1
        or (mask.shape[1:] != features.shape[2:])
    ):
        found = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
        raise ArgumentError(
            f"{op}: mask must be (1, H, W) = (1, {features.size(2)}, {features.size(3)}), "
            f"found {found}"
        )
    if not features.is_floating_point():
        raise TypeError(f"{op}: features must be floating point, found {features.dtype}")
    if mask.is_complex():
        raise TypeError(f"{op}: mask must be real-valued, found {mask.dtype}")
    if weight is None:
        raise TypeError(f"{op}: weight must be a floating-point tensor, found NoneType")
    check_float_tensors(op, features.device, "features'", weight=weight, bias=bias)
    if weight.dim() != 4 or weight.size(1) != features.size(1):
        raise ValueError(
            f"{op}: weight must be (C_out, {features.size(1)}, kh, kw), found {tuple(weight.shape)}"
        )
    if bias is not None and tuple(bias.shape) != (weight.size(0),):
        raise ValueError(f"{op}: bias must be ({weight.size(0)},), found {tuple(bias.shape)}")


def _output_mask(mask: Tensor, out_h: int, out_w: int) -> Tensor:
    """The positive positions of ``mask`` (1, H, W) on the (1, 1, out_h, out_w) output.

    Positions beyond the output are dropped: elementwise, no host sync.
    """
    positive = mask[0] > 0
    height, width = positive.shape
    keep = positive.new_zeros(out_h, out_w)
    rows, cols = min(out_h, height), min(out_w, width)
    keep[:rows, :cols] = positive[:rows, :cols]
    return keep[None, None]


def masked_conv2d(
    features: Tensor,
    mask: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    padding: IntPair = 0,
    stride: IntPair = 1,
) -> Tensor:
    """Convolution evaluated where ``mask`` is positive, zero elsewhere.

    The mask is indexed by output position (the input's and the output's
    sizes agree when ``padding = (k - 1) / 2``). As mmcv's, no gradient flows
    back through it.

    Args:
        features: (1, C_in, H, W) float: one image.
        mask: (1, H, W): positions whose value is > 0 are computed (those beyond
            a smaller output are ignored).
        weight: (C_out, C_in, kh, kw).
        bias: (C_out,), or None (mmcv needs one; a masked position then gets
            the convolution alone).
        padding: Int or (ph, pw): zeros added on both sides.
        stride: Must be 1.

    Returns:
        (1, C_out, H + 2 * ph - kh + 1, W + 2 * pw - kw + 1), ``features``' dtype:
        the convolution plus bias where the mask is positive, 0 elsewhere.

    Raises:
        UnsupportedOpError: ``stride`` is not 1 (neither is it in mmcv).
        TypeError: ``features``, ``weight`` or ``bias`` is not floating point, or
            ``mask`` is complex.
        ValueError: a negative padding, weight or bias that do not fit or are on another
            device, or features smaller than the kernel.
        ArgumentError: features or mask of another shape (mmcv asserts them).
    """
    stride_ = _pair(stride)
    if tuple(stride_) != (1, 1):
        raise unsupported("masked_conv2d", "stride", stride, "stride=1, as mmcv")
    pad = int_pair("masked_conv2d", "padding", padding, 0)
    _check(features, mask, weight, bias)
    out_h, out_w = conv_output_size(features.shape[2:], weight.shape[2:], (1, 1), pad, (1, 1))
    if min(out_h, out_w) < 1 or weight.size(0) == 0:
        if min(out_h, out_w) < 0:
            raise ValueError(
                f"mmcv.ops.masked_conv2d: features are too small for the kernel (input "
                f"{tuple(features.shape[2:])}, output would be {(out_h, out_w)})"
            )
        # Nothing to convolve (F.conv2d refuses a weight of no output channels).
        return features.new_zeros(1, weight.size(0), out_h, out_w)
    keep = _output_mask(mask, out_h, out_w).to(features.device)
    dtype = features.dtype
    # CPU convolutions in float16/bfloat16 run in float32, then cast back.
    compute = dtype if features.is_cuda or dtype == torch.float64 else torch.float32
    out = _MaskedConv2dFunction.apply(
        features.to(compute),
        keep,
        weight.to(compute),
        None if bias is None else bias.to(compute),
        pad,
    )
    return out.to(dtype)


class MaskedConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose forward takes an optional mask (see :func:`masked_conv2d`).

    Without a mask it is the plain convolution. With one, as mmcv's, it is the
    masked convolution with the layer's padding only: stride and dilation are
    not applied (mmcv's masked kernel has neither) and there are no gradients.

    Args:
        in_channels: Channels of the input.
        out_channels: Channels of the output.
        kernel_size: Int or (kh, kw).
        stride: Int or (sh, sw) (the plain convolution's only).
        padding: Int or (ph, pw).
        dilation: Int or (dh, dw) (the plain convolution's only).
        groups: Blocked connections (the masked convolution supports 1 only).
        bias: Whether to add a learned bias.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntPair,
        stride: IntPair = 1,
        padding: IntPair = 0,
        dilation: IntPair = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias
        )

    def forward(self, input: Tensor, mask: Tensor | None = None) -> Tensor:
        """The convolution of ``input``, masked by ``mask`` when given.

        Args:
            input: (N, C_in, H, W); N must be 1 with a mask.
            mask: (1, H, W), or None for the plain convolution.

        Returns:
            (N, C_out, out_h, out_w).

        Raises:
            UnsupportedOpError: a mask with ``groups`` other than 1.
        """
        if mask is None:
            return super().forward(input)
        if self.groups != 1:
            raise unsupported("MaskedConv2d", "groups", self.groups, "groups=1 with a mask")
        return masked_conv2d(input, mask, self.weight, self.bias, self.padding)  # type: ignore[arg-type]
