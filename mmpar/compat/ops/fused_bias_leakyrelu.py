"""StyleGAN2's bias + leaky ReLU + scale, as mmcv 1.7.2's ``mmcv.ops.fused_bias_leakyrelu``.

``out = scale * leaky_relu(input + bias, negative_slope)``, the bias broadcast along
dimension 1. Plain torch autograd: its first and second derivatives are those of mmcv's
CUDA Function (the first uses ``negative_slope`` where ``input + bias <= 0``, as mmcv's
test ``out > 0`` does for ``scale > 0``; the second is zero in ``input`` and flows through
``grad_output`` only, which is what StyleGAN2's R1 and path-length penalties need), and
on the CPU mmcv itself runs these same torch ops.

Differences from mmcv-full: one path on every device. float16/bfloat16 are computed in
float32 and the result has ``input``'s dtype (mmcv's CUDA kernel computes in the input's
dtype, its CPU path promotes to the wider of ``input`` and ``bias``). ``bias`` may be None,
as on mmcv's CPU path. Bad arguments raise one-line errors (mmcv asserts).
"""

from __future__ import annotations

import math
import numbers
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mmpar.compat.ops.backend import check_float, check_int, float_compute_dtype

__all__ = ["FusedBiasLeakyReLU", "bias_leakyrelu_ref", "fused_bias_leakyrelu"]


def _check(op: str, input: Tensor, bias: Optional[Tensor], negative_slope: float, scale: float):
    if not isinstance(input, Tensor):
        raise TypeError(f"mmcv.ops.{op}: input must be a torch.Tensor, got {type(input).__name__}")
    if bias is not None and not isinstance(bias, Tensor):
        raise TypeError(f"mmcv.ops.{op}: bias must be a torch.Tensor, got {type(bias).__name__}")
    check_float(op, input=input, bias=bias)
    for name, value in (("negative_slope", negative_slope), ("scale", scale)):
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"mmcv.ops.{op}: {name} must be a float, got {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"mmcv.ops.{op}: {name} must be finite, got {value}")
    if not scale > 0:
        raise ValueError(f"mmcv.ops.{op}: scale must be > 0, got {scale}")
    if input.dim() < 2:
        raise ValueError(
            f"mmcv.ops.{op}: input must have shape (N, C, ...), got {tuple(input.shape)}"
        )
    if bias is None:
        return
    if bias.dim() != 1 or bias.shape[0] != input.shape[1]:
        raise ValueError(
            f"mmcv.ops.{op}: bias must have shape (C,) = ({input.shape[1]},) for input "
            f"{tuple(input.shape)}, got {tuple(bias.shape)}"
        )
    if bias.device != input.device:
        raise ValueError(
            f"mmcv.ops.{op}: bias must be on input's device {input.device}, got {bias.device}"
        )


def fused_bias_leakyrelu(
    input: Tensor,
    bias: Optional[Tensor],
    negative_slope: float = 0.2,
    scale: float = 2**0.5,
) -> Tensor:
    """``scale * leaky_relu(input + bias, negative_slope)`` (StyleGAN2's activation).

    Args:
        input: ``(N, C, ...)`` float feature map.
        bias: ``(C,)`` float, added along dimension 1; None adds nothing.
        negative_slope: The slope below 0, as in ``nn.LeakyReLU``.
        scale: Factor on the result (> 0); ``sqrt(2)`` keeps the variance.

    Returns:
        ``input``'s shape and dtype (float16/bfloat16 are computed in float32).
        Differentiable twice in ``input`` and ``bias``.

    Raises:
        TypeError: A non-tensor or non-float input or bias, or a non-number slope or scale.
        ValueError: ``scale <= 0``, a NaN or infinite slope or scale, or shapes or devices
            that disagree.
    """
    _check("fused_bias_leakyrelu", input, bias, negative_slope, scale)
    dtype = float_compute_dtype(input.dtype)
    x = input.to(dtype)
    if bias is not None:
        x = x + bias.to(dtype).view([-1 if i == 1 else 1 for i in range(input.dim())])
    x = F.leaky_relu(x, float(negative_slope))
    if scale != 1:
        x = x * float(scale)
    return x.to(input.dtype)


def bias_leakyrelu_ref(
    x: Tensor,
    bias: Optional[Tensor],
    negative_slope: float = 0.2,
    scale: float = 2**0.5,
) -> Tensor:
    """mmcv's reference (CPU) path: the same as :func:`fused_bias_leakyrelu`."""
    return fused_bias_leakyrelu(x, bias, negative_slope, scale)


class FusedBiasLeakyReLU(nn.Module):
    """:func:`fused_bias_leakyrelu` with a learnt bias, as mmcv's ``FusedBiasLeakyReLU``.

    Args:
        num_channels: ``C``, the length of the bias (initialised to zeros).
        negative_slope: The slope below 0.
        scale: Factor on the result (> 0).
    """

    def __init__(
        self, num_channels: int, negative_slope: float = 0.2, scale: float = 2**0.5
    ) -> None:
        super().__init__()
        check_int("mmcv.ops.FusedBiasLeakyReLU", "num_channels", num_channels, 0)
        self.bias = nn.Parameter(torch.zeros(num_channels))
        self.negative_slope = negative_slope
        self.scale = scale

    def forward(self, input: Tensor) -> Tensor:
        """``(N, C, ...)`` -> the same shape; see :func:`fused_bias_leakyrelu`."""
        return fused_bias_leakyrelu(input, self.bias, self.negative_slope, self.scale)
