"""Optical-flow correlation: mmcv 1.7.2's ``mmcv.ops.Correlation`` in plain torch.

Definition (mmcv's CUDA kernel; mmcv 1.7.2 has no CPU kernel), with
``P = 2 * max_displacement + 1`` and ``R = dilation_patch * max_displacement``::

    out[n, ph, pw, h, w] = sum_{i < kH, j < kW} sum_c input1[n, c, y1, x1] * input2[n, c, y2, x2]
    y1 = h * stride - padding + i * dilation,  y2 = y1 + ph * dilation_patch - R
    x1 = w * stride - padding + j * dilation,  x2 = x1 + pw * dilation_patch - R

summing only the taps where both ``(y1, x1)`` and ``(y2, x2)`` lie inside the maps, for
``oH = (H + 2 * padding - dilation * (kH - 1) - 1) // stride + 1`` rows (``oW`` alike).
mmcv's backward kernels give exactly this formula's gradients to both inputs, and so does
the backward here. Both run as batched matrix products of tiles of columns, one patch row
and kernel tap at a time, in chunks of output rows of bounded memory
(:mod:`mmpar.compat.ops.flow.correlation_tiles`).

NaN/inf: a tap with a read outside either map contributes exactly 0, as the kernel skips
it (so an inf beside the border does not turn into ``0 * inf = NaN``); inside, values
propagate through the products and sums. In the backward, a NaN or inf of one input makes
the other input's gradient NaN over the columns of its tile (about twice the patch's width)
rather than only where its patch reads it (where mmcv's gradient is non-finite too).

Differences from mmcv-full: float16/bfloat16 are computed in float32 and cast back (mmcv
sums in the input dtype); any device (mmcv: CUDA only). Inputs of different shapes (which
mmcv's kernel reads outside of) and a padded input smaller than the dilated kernel (where
mmcv's output size breaks) are a ``ValueError``; ``dilation_patch`` must be ``>= 1``.
"""

from __future__ import annotations

from typing import Any, Tuple, Union

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.nn.modules.utils import _pair

from mmpar.compat.ops.backend import check_float_tensors, check_int, float_compute_dtype
from mmpar.compat.ops.flow.correlation_tiles import (
    CorrelationGeometry,
    correlation_backward,
    correlation_forward,
)

__all__ = ["Correlation", "CorrelationFunction"]

_OP = "mmcv.ops.Correlation"

IntPair = Union[int, Tuple[int, int]]


def _pair_of(name: str, value: Any, minimum: int) -> Tuple[int, int]:
    pair = _pair(value)
    if len(pair) != 2:
        raise ValueError(f"{_OP}: {name} must be an int or a pair of ints, found {value!r}")
    return tuple(check_int(_OP, name, v, minimum) for v in pair)  # type: ignore[return-value]


def _geometry(x: Tensor, params: Tuple[Any, ...]) -> CorrelationGeometry:
    kernel_size, max_displacement, stride, padding, dilation, dilation_patch = params
    kernel = _pair_of("kernel_size", kernel_size, 1)
    patch = 2 * check_int(_OP, "max_displacement", max_displacement, 0) + 1
    stride, padding = _pair_of("stride", stride, 1), _pair_of("padding", padding, 0)
    dilation = _pair_of("dilation", dilation, 1)
    dilation_patch = _pair_of("dilation_patch", dilation_patch, 1)
    size = (x.shape[2], x.shape[3])
    out = []
    for axis in (0, 1):
        room = size[axis] + 2 * padding[axis] - dilation[axis] * (kernel[axis] - 1) - 1
        if room < 0:
            raise ValueError(
                f"{_OP}: the input padded ({size[axis]} + 2 * {padding[axis]}) must be at least "
                f"the dilated kernel ({dilation[axis] * (kernel[axis] - 1) + 1}) along "
                f"{'HW'[axis]}, found input of shape {tuple(x.shape)}"
            )
        out.append(room // stride[axis] + 1)
    return CorrelationGeometry(
        kernel, patch, stride, padding, dilation, dilation_patch, size, tuple(out)
    )


def _check(input1: Any, input2: Any) -> None:
    if not isinstance(input1, Tensor):
        raise TypeError(f"{_OP}: input1 must be a floating-point tensor, found {type(input1)}")
    check_float_tensors(_OP, input1.device, "input1's", input1=input1, input2=input2)
    if input1.dim() != 4 or input2.shape != input1.shape:
        raise ValueError(
            f"{_OP}: input1 and input2 must have one shape (B, C, H, W), found "
            f"{tuple(input1.shape)} and {tuple(input2.shape)}"
        )
    if input1.dtype != input2.dtype:
        raise TypeError(
            f"{_OP}: input1 and input2 must have one dtype, found {input1.dtype} and {input2.dtype}"
        )


class _Correlate(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x1: Tensor, x2: Tensor, g: CorrelationGeometry) -> Tensor:
        ctx.save_for_backward(x1, x2)
        ctx.geometry = g
        return correlation_forward(x1, x2, g).contiguous()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> Tuple[Tensor, Tensor, None]:
        x1, x2 = ctx.saved_tensors
        return correlation_backward(grad, x1, x2, ctx.geometry) + (None,)


def _correlation(input1: Tensor, input2: Tensor, params: Tuple[Any, ...]) -> Tensor:
    _check(input1, input2)
    g = _geometry(input1, params)
    dtype = float_compute_dtype(input1.dtype)
    return _Correlate.apply(input1.to(dtype), input2.to(dtype), g).to(input1.dtype)


class CorrelationFunction:
    """mmcv's ``CorrelationFunction``: ``apply`` runs the correlation (differentiable)."""

    @staticmethod
    def apply(
        input1: Tensor,
        input2: Tensor,
        kernel_size: IntPair = 1,
        max_displacement: int = 1,
        stride: IntPair = 1,
        padding: IntPair = 1,
        dilation: IntPair = 1,
        dilation_patch: IntPair = 1,
    ) -> Tensor:
        """See :class:`Correlation` (note mmcv's ``padding=1`` default here)."""
        params = (kernel_size, max_displacement, stride, padding, dilation, dilation_patch)
        return _correlation(input1, input2, params)


class Correlation(nn.Module):
    """Correlation of two feature maps over a patch of displacements (FlowNetC, PWC-Net).

    Args:
        kernel_size: The window summed around each position (int or pair).
        max_displacement: The patch radius: ``2 * max_displacement + 1`` displacements
            per axis.
        stride: The stride of the output positions (int or pair).
        padding: Zero padding of the maps (int or pair).
        dilation: The spacing of the window's taps (int or pair).
        dilation_patch: The spacing of the displacements (int or pair, ``>= 1``).
    """

    def __init__(
        self,
        kernel_size: int = 1,
        max_displacement: int = 1,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        dilation_patch: int = 1,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.max_displacement = max_displacement
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.dilation_patch = dilation_patch

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        """Correlates ``input1`` with ``input2`` displaced.

        Args:
            input1: ``(B, C, H, W)`` float.
            input2: ``(B, C, H, W)`` float, same dtype and device.

        Returns:
            ``(B, P, P, oH, oW)`` in the inputs' dtype, ``P = 2 * max_displacement + 1``,
            indexed ``[b, ph, pw, h, w]``; differentiable in both inputs.

        Raises:
            TypeError: non-float inputs, different dtypes, a non-int parameter.
            ValueError: different shapes or devices, a parameter out of range, or an input
                too small for the kernel.
        """
        params = (
            self.kernel_size,
            self.max_displacement,
            self.stride,
            self.padding,
            self.dilation,
            self.dilation_patch,
        )
        return _correlation(input1, input2, params)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(kernel_size={self.kernel_size}, "
            f"max_displacement={self.max_displacement}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, "
            f"dilation_patch={self.dilation_patch})"
        )
