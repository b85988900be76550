"""The kernel of mmcv's DCNv1 and DCNv2, and the checks of its arguments (not an mmcv module).

Both convolutions run ``torchvision.ops.deform_conv2d``, which takes the offsets
in mmcv's layout (``(dy, dx)`` per kernel point, kernel points row-major, one
block of ``2 * kh * kw`` channels per deformable group) and samples as mmcv's
kernel does: bilinearly, with zeros outside the map, so that a point in the open
box ``(-1, H) x (-1, W)`` still blends with the rows and columns inside and a
point on or beyond its border reads 0.

mmcv-full's backward gives a point on or beyond that border no offset gradient;
torchvision's gives a point exactly at ``-1`` a one-sided difference (the rows
and columns at ``0`` lie one pixel away). :func:`mmcv_offsets` makes the kernel's
gradient mmcv's: such points are moved out of the kernel's reach, through a
``where`` whose gradient is 0 there. mmcv-full also reads 0 at a point with a
NaN coordinate (its kernel's bounds test is false), where torchvision's CPU
kernel crashes; the same move gives mmcv's result (and an infinite offset's,
0). A NaN in the input, the weight or the mask reaches the outputs that read
it, as in mmcv.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn.modules.utils import _pair

from mmpar.compat.ops.backend import check_float, check_int, torchvision_ops

__all__ = [
    "IntPair",
    "check_per_point",
    "compute_dtype",
    "conv_geometry",
    "conv_output_size",
    "deform_conv",
    "int_pair",
    "mmcv_offsets",
]

IntPair = int | tuple[int, int]


def compute_dtype(tensor: Tensor) -> torch.dtype:
    """The dtype torchvision's kernel runs in for ``tensor``: its own, or float32.

    torchvision's CPU kernel has no bfloat16 and sums float16 in float16, and its
    CUDA kernel has no bfloat16: those run in float32 and are cast back.
    """
    if tensor.dtype in (torch.float32, torch.float64):
        return tensor.dtype
    if tensor.dtype == torch.float16 and tensor.device.type == "cuda":
        return tensor.dtype
    return torch.float32


def int_pair(op: str, name: str, value: IntPair, minimum: int) -> tuple[int, int]:
    """``value`` (an int, or a pair of them) as a pair of ints, each at least ``minimum``.

    Args:
        op: The op's mmcv name, for the message.
        name: The argument's name, for the message.
        value: An int or a pair of ints (anything with ``__index__``).
        minimum: The smallest value allowed.

    Returns:
        ``(first, second)``.

    Raises:
        ValueError: ``value`` is not an int or a pair of ints, or is below ``minimum``.
    """
    message = f"mmcv.ops.{op}: {name} must be an int >= {minimum} or a pair, found {value!r}"
    try:
        pair = tuple(operator.index(v) for v in _pair(value))
    except TypeError:
        raise ValueError(message) from None
    if len(pair) != 2 or min(pair) < minimum:
        raise ValueError(message)
    return pair[0], pair[1]


def conv_output_size(
    size: Sequence[int],
    kernel: Sequence[int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> tuple[int, int]:
    """A convolution's ``(out_h, out_w)``, as ``nn.Conv2d`` computes it (it may be < 1).

    Args:
        size: The input's ``(H, W)``.
        kernel: ``(kh, kw)``.
        stride: ``(sh, sw)``.
        padding: ``(ph, pw)``, zeros on both sides.
        dilation: ``(dh, dw)``.
    """
    out_h, out_w = (
        (size[d] + 2 * padding[d] - (dilation[d] * (kernel[d] - 1) + 1)) // stride[d] + 1
        for d in range(2)
    )
    return out_h, out_w


def conv_geometry(
    op: str,
    input: Tensor,
    weight: Tensor,
    stride: IntPair,
    padding: IntPair,
    dilation: IntPair,
    groups: int,
    deform_groups: int,
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]:
    """Checks a deformable convolution's arguments and gives its geometry.

    Args:
        op: The op's mmcv name, for the messages.
        input: (N, C_in, H, W) float.
        weight: (C_out, C_in // groups, kh, kw) float.
        stride: Int or (sh, sw).
        padding: Int or (ph, pw).
        dilation: Int or (dh, dw).
        groups: Blocked connections from input to output channels.
        deform_groups: Groups of input channels that share one set of offsets.

    Returns:
        ``(stride, padding, dilation, (out_h, out_w))``, each a pair of ints.

    Raises:
        TypeError: ``input`` or ``weight`` is not floating point, or ``groups`` or
            ``deform_groups`` is not an int.
        ValueError: shapes or parameters that do not fit together.
    """
    if input.dim() != 4:
        raise ValueError(f"mmcv.ops.{op}: input must be 4D (N, C, H, W), found {input.dim()}D")
    if weight.dim() != 4 or min(weight.shape[1:]) < 1:
        raise ValueError(
            f"mmcv.ops.{op}: weight must be 4D (C_out, C_in // groups, kh, kw), none of "
            f"C_in // groups, kh, kw zero, found {tuple(weight.shape)}"
        )
    check_float(op, input=input, weight=weight)
    if weight.device != input.device:
        raise ValueError(
            f"mmcv.ops.{op}: weight must be on input's device ({input.device}), "
            f"found {weight.device}"
        )
    stride_ = int_pair(op, "stride", stride, 1)
    padding_ = int_pair(op, "padding", padding, 0)
    dilation_ = int_pair(op, "dilation", dilation, 1)
    groups_ = check_int(f"mmcv.ops.{op}", "groups", groups, 1)
    deform_groups_ = check_int(f"mmcv.ops.{op}", "deform_groups", deform_groups, 1)
    channels = input.size(1)
    if weight.size(1) * groups_ != channels:
        raise ValueError(
            f"mmcv.ops.{op}: input has {channels} channels, expected weight.size(1) * groups = "
            f"{weight.size(1)} * {groups_}"
        )
    if weight.size(0) % groups_:
        raise ValueError(
            f"mmcv.ops.{op}: weight.size(0) (output channels) must be divisible by "
            f"groups={groups_}, found {weight.size(0)}"
        )
    if channels % deform_groups_:
        raise ValueError(
            f"mmcv.ops.{op}: input channels must be divisible by deform_groups={deform_groups_}, "
            f"found {channels}"
        )
    out_h, out_w = conv_output_size(input.shape[2:], weight.shape[2:], stride_, padding_, dilation_)
    if out_h < 1 or out_w < 1:
        raise ValueError(
            f"mmcv.ops.{op}: convolution input is too small (input {tuple(input.shape[2:])}, "
            f"output would be {(out_h, out_w)})"
        )
    return stride_, padding_, dilation_, (out_h, out_w)


def check_per_point(
    op: str,
    name: str,
    tensor: Tensor,
    expected: tuple[int, int, int, int],
    layout: str,
    input: Tensor,
    as_memory: bool = False,
) -> Tensor:
    """The offset or mask tensor as the convolution reads it, or a ``ValueError``.

    With ``as_memory`` (DCNv2): mmcv's DCNv2 kernels read each image's ``offset[b]``
    (and ``mask[b]``) as contiguous
    memory of the expected ``(C, out_h, out_w)`` shape without checking its spatial
    size. mmdet's DyHead relies on that: its upper-level DCNv2 gets the offsets of the
    level below, a map twice as large. Such a tensor is read the same way here: its
    first ``C * out_h * out_w`` values per image. One with fewer values (which mmcv
    would read past the end of) is refused.

    Args:
        op: The op's mmcv name, for the message.
        name: ``"offset"`` or ``"mask"``.
        tensor: The tensor to check.
        expected: Its shape ``(N, C, out_h, out_w)``.
        layout: What the channels hold, for the message.
        input: The convolution's input, whose device ``tensor`` must be on.
        as_memory: Read a larger tensor as mmcv's DCNv2 kernel reads its memory.
    """
    check_float(op, **{name: tensor})
    if tensor.device != input.device:
        raise ValueError(
            f"mmcv.ops.{op}: {name} must be on input's device ({input.device}), "
            f"found {tensor.device}"
        )
    shape = tuple(tensor.shape)
    if shape == expected:
        return tensor
    needed = expected[1] * expected[2] * expected[3]
    fits = tensor.dim() == 4 and shape[0] == expected[0] and tensor[:1].numel() >= needed
    if as_memory and fits:
        return tensor.reshape(shape[0], -1)[:, :needed].reshape(expected)
    raise ValueError(f"mmcv.ops.{op}: {name} must have shape {expected} ({layout}), found {shape}")


def mmcv_offsets(
    offset: Tensor,
    size: Sequence[int],
    kernel: Sequence[int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> Tensor:
    """``offset``, with every point that mmcv's kernel treats as outside moved far outside.

    A point whose coordinates ``(y, x)`` (its position in the padded grid plus its
    offset) are not in the open box ``(-1, H) x (-1, W)``, or are NaN, reads 0 in
    mmcv-full's kernels and gets no offset gradient (nor mask gradient). Its
    offsets are replaced by a constant that puts it beyond torchvision's reach
    too, through a ``where``: the values of every other point are unchanged, and
    the gradient of the replaced ones is 0, as mmcv's. Elementwise on the device,
    no host sync.

    Args:
        offset: (N, deform_groups * 2 * kh * kw, out_h, out_w) float.
        size: The input's ``(H, W)``.
        kernel: ``(kh, kw)``.
        stride: ``(sh, sw)``.
        padding: ``(ph, pw)``.
        dilation: ``(dh, dw)``.

    Returns:
        ``offset``'s shape and dtype.
    """
    n, channels, out_h, out_w = offset.shape
    kh, kw = kernel
    points = kh * kw
    device, dtype = offset.device, offset.dtype

    def base(out: int, step: int, pad: int, dil: int, taps: int) -> Tensor:
        # (taps, out): where tap t of output position o samples before its offset.
        starts = torch.arange(out, device=device) * step - pad
        return (starts[None, :] + torch.arange(taps, device=device)[:, None] * dil).to(dtype)

    rows = base(out_h, stride[0], padding[0], dilation[0], kh).repeat_interleave(kw, dim=0)
    cols = base(out_w, stride[1], padding[1], dilation[1], kw).repeat(kh, 1)
    pairs = offset.reshape(n, channels // (2 * points), points, 2, out_h, out_w)
    y = pairs[:, :, :, 0] + rows[:, :, None]
    x = pairs[:, :, :, 1] + cols[:, None, :]
    height, width = size
    inside = (y > -1) & (y < height) & (x > -1) & (x < width)
    # Below -1 whatever the point's place in the grid (at most H + ph - 1, W + pw - 1),
    # with a margin for float16's rounding of large maps.
    far = -2.0 * (max(height + padding[0], width + padding[1]) + 2)
    return torch.where(inside.unsqueeze(3), pairs, far).reshape(offset.shape)


def deform_conv(
    input: Tensor,
    offset: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    mask: Tensor | None,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> Tensor:
    """DCNv1 (``mask`` None) or DCNv2 on torchvision's kernel, with mmcv-full's results.

    The arguments are checked ones (:func:`conv_geometry`, :func:`check_per_point`).
    As mmcv's, the output has ``offset``'s dtype: the other tensors are cast to it
    (mixed precision), and computed in :func:`compute_dtype`.

    Args:
        input: (N, C_in, H, W).
        offset: (N, deform_groups * 2 * kh * kw, out_h, out_w).
        weight: (C_out, C_in // groups, kh, kw).
        bias: (C_out,), or None.
        mask: (N, deform_groups * kh * kw, out_h, out_w), or None.
        stride: ``(sh, sw)``.
        padding: ``(ph, pw)``.
        dilation: ``(dh, dw)``.

    Returns:
        (N, C_out, out_h, out_w), ``offset``'s dtype.
    """
    dtype = offset.dtype
    compute = compute_dtype(offset)
    offset = mmcv_offsets(
        offset.to(compute), input.shape[2:], weight.shape[2:], stride, padding, dilation
    )
    out = torchvision_ops().deform_conv2d(
        input.to(compute),
        offset,
        weight.to(compute),
        None if bias is None else bias.to(compute),
        stride,
        padding,
        dilation,
        None if mask is None else mask.to(compute),
    )
    return out.to(dtype)
