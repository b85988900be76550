"""Upsample, FIR-filter, downsample: mmcv 1.7.2's ``mmcv.ops.upfirdn2d`` on torch convolutions.

Per channel of each image, along each axis: insert ``up - 1`` zeros after every sample
(``H`` becomes ``H * up``), pad ``pad0`` zeros before and ``pad1`` after (a negative pad
crops), convolve with ``kernel`` (a true convolution: correlation with the flipped
kernel, only where the kernel lies wholly inside), and keep every ``down``-th sample from
the first. The output is ``(H * up + pad0 + pad1 - kernel_h) // down + 1`` high, and
likewise wide. ``pad`` is ``(pad0, pad1)`` for both axes or ``(pad_x0, pad_x1, pad_y0,
pad_y1)``; ``up`` and ``down`` an int or ``(x, y)``.

With ``up == 1`` this is one strided ``conv2d``; with ``up > 1``, ``conv_transpose2d``
with stride ``up`` (the zero-inserted convolution without multiplying the zeros), then
the padding and the stride ``down``. Plain autograd: differentiable twice in ``input``,
as mmcv's CUDA Function, and also in ``kernel``, as mmcv's CPU path (mmcv's CUDA Function
gives the kernel no gradient). float16/bfloat16 are computed in float32 and returned in
``input``'s dtype.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Union

import torch.nn.functional as F
from torch import Tensor

from mmpar.compat.ops.backend import check_float, float_compute_dtype

__all__ = ["upfirdn2d", "upfirdn2d_native"]

IntPair = Union[int, Sequence[int]]


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _factor_pair(name: str, value: IntPair) -> tuple[int, int]:
    pair = (value, value) if _is_int(value) else value
    if not isinstance(pair, Sequence) or len(pair) != 2 or not all(_is_int(v) for v in pair):
        raise TypeError(f"mmcv.ops.upfirdn2d: {name} must be an int or (x, y) ints, got {value!r}")
    if min(pair) < 1:
        raise ValueError(f"mmcv.ops.upfirdn2d: {name} must be >= 1, got {value!r}")
    return int(pair[0]), int(pair[1])


def _pad_or_crop(x: Tensor, left: int, right: int, top: int, bottom: int) -> Tensor:
    """Zero-pad the last two dims by the positive amounts, then crop the negative ones."""
    x = F.pad(x, [max(left, 0), max(right, 0), max(top, 0), max(bottom, 0)])
    height, width = x.shape[-2:]
    return x[..., max(-top, 0) : height - max(-bottom, 0), max(-left, 0) : width - max(-right, 0)]


def _check(input: Tensor, kernel: Tensor) -> None:
    for name, value in (("input", input), ("kernel", kernel)):
        if not isinstance(value, Tensor):
            raise TypeError(
                f"mmcv.ops.upfirdn2d: {name} must be a torch.Tensor, got {type(value).__name__}"
            )
    check_float("upfirdn2d", input=input, kernel=kernel)
    if input.dim() != 4:
        raise ValueError(
            f"mmcv.ops.upfirdn2d: input must have shape (N, C, H, W), got {tuple(input.shape)}"
        )
    if kernel.dim() != 2 or 0 in kernel.shape:
        raise ValueError(
            "mmcv.ops.upfirdn2d: kernel must have shape (kernel_h, kernel_w), both >= 1, "
            f"got {tuple(kernel.shape)}"
        )
    if kernel.device != input.device:
        raise ValueError(
            f"mmcv.ops.upfirdn2d: kernel must be on input's device {input.device}, "
            f"got {kernel.device}"
        )


def upfirdn2d_native(
    input: Tensor,
    kernel: Tensor,
    up_x: int,
    up_y: int,
    down_x: int,
    down_y: int,
    pad_x0: int,
    pad_x1: int,
    pad_y0: int,
    pad_y1: int,
) -> Tensor:
    """:func:`upfirdn2d` with every factor and pad given apart (mmcv's CPU path's signature).

    Args:
        input: ``(N, C, H, W)`` float.
        kernel: ``(kernel_h, kernel_w)`` float, on ``input``'s device.
        up_x: Upsampling factor along W; ``up_y`` along H.
        up_y: See ``up_x``.
        down_x: Downsampling factor along W; ``down_y`` along H.
        down_y: See ``down_x``.
        pad_x0: Zeros before the upsampled W axis (negative: crop); ``pad_x1`` after.
        pad_x1: See ``pad_x0``.
        pad_y0: Likewise before the H axis; ``pad_y1`` after.
        pad_y1: See ``pad_y0``.

    Returns:
        ``(N, C, out_h, out_w)`` in ``input``'s dtype, ``out_h = (H * up_y + pad_y0 + pad_y1
        - kernel_h) // down_y + 1`` and likewise ``out_w``.

    Raises:
        TypeError: A non-tensor or non-float input or kernel, or a non-int factor or pad.
        ValueError: A wrong shape or device, a factor below 1, or a kernel larger than the
            upsampled, padded input.
    """
    _check(input, kernel)
    ups = _factor_pair("up", (up_x, up_y))
    _factor_pair("down", (down_x, down_y))
    pads = (pad_x0, pad_x1, pad_y0, pad_y1)
    if not all(_is_int(p) for p in pads):
        raise TypeError(f"mmcv.ops.upfirdn2d: pad must be ints, got {pads!r}")
    n, c, height, width = input.shape
    kernel_h, kernel_w = kernel.shape
    out_h = (height * up_y + pad_y0 + pad_y1 - kernel_h) // down_y + 1
    out_w = (width * up_x + pad_x0 + pad_x1 - kernel_w) // down_x + 1
    if out_h < 1 or out_w < 1:
        padded = (height * up_y + pad_y0 + pad_y1, width * up_x + pad_x0 + pad_x1)
        raise ValueError(
            f"mmcv.ops.upfirdn2d: kernel {tuple(kernel.shape)} is larger than the upsampled, "
            f"padded input {padded} (input {(height, width)}, up (x, y) {ups}, pad {pads})"
        )
    dtype = float_compute_dtype(input.dtype)
    x = input.to(dtype).reshape(n * c, 1, height, width)
    weight = kernel.to(dtype)[None, None]
    if ups == (1, 1) or x.numel() == 0:
        # up == 1 (nothing to insert), or an empty map, which conv_transpose2d cannot take:
        # zero insertion by padding a view.
        x = x.reshape(n * c, height, 1, width, 1)
        x = F.pad(x, [0, up_x - 1, 0, 0, 0, up_y - 1])
        x = x.reshape(n * c, 1, height * up_y, width * up_x)
        x = _pad_or_crop(x, pad_x0, pad_x1, pad_y0, pad_y1)
        out = F.conv2d(x, weight.flip(2, 3), stride=(down_y, down_x))
    else:
        # Sample i * up + j of the full convolution is the zero-inserted convolution's; the
        # valid part over the padded signal starts at kernel - 1 - pad0 of it.
        full = F.conv_transpose2d(x, weight, stride=(up_y, up_x))
        out = _pad_or_crop(
            full,
            pad_x0 - (kernel_w - 1),
            up_x + pad_x1 - kernel_w,
            pad_y0 - (kernel_h - 1),
            up_y + pad_y1 - kernel_h,
        )[..., ::down_y, ::down_x]
    # A crop's view: contiguous, as mmcv's kernel returns it (callers .view() the result).
    return out.reshape(n, c, out_h, out_w).to(input.dtype).contiguous()


def upfirdn2d(
    input: Tensor,
    kernel: Tensor,
    up: IntPair = 1,
    down: IntPair = 1,
    pad: Sequence[int] = (0, 0),
) -> Tensor:
    """Upsample by zero insertion, FIR-filter and downsample each channel (StyleGAN2).

    Args:
        input: ``(N, C, H, W)`` float.
        kernel: ``(kernel_h, kernel_w)`` float FIR filter, on ``input``'s device.
        up: Upsampling factor, an int or ``(x, y)``.
        down: Downsampling factor, an int or ``(x, y)``.
        pad: ``(pad0, pad1)`` for both axes, or ``(pad_x0, pad_x1, pad_y0, pad_y1)``;
            zeros before and after the upsampled axis, negative to crop.

    Returns:
        ``(N, C, out_h, out_w)`` in ``input``'s dtype (see :func:`upfirdn2d_native`).

    Raises:
        TypeError: See :func:`upfirdn2d_native`.
        ValueError: ``pad`` not 2 or 4 ints, or as :func:`upfirdn2d_native`.
    """
    up_x, up_y = _factor_pair("up", up)
    down_x, down_y = _factor_pair("down", down)
    pads = tuple(pad) if isinstance(pad, Sequence) else ()
    if len(pads) == 2:
        pads = (pads[0], pads[1], pads[0], pads[1])
    if len(pads) != 4:
        raise ValueError(
            f"mmcv.ops.upfirdn2d: pad must be (pad0, pad1) or (pad_x0, pad_x1, pad_y0, pad_y1), "
            f"got {pad!r}"
        )
    return upfirdn2d_native(input, kernel, up_x, up_y, down_x, down_y, *pads)
