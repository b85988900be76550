"""Modulated deformable convolution (DCNv2), mmcv's ``mmcv.ops.modulated_deform_conv``.

The kernel is ``torchvision.ops.deform_conv2d`` with a mask: like mmcv's, it
takes the offsets as ``(dy, dx)`` pairs per kernel point, kernel points in
row-major order, one block of ``2 * kh * kw`` channels per deformable group,
and samples bilinearly with zeros outside the map (a point in
``(-1, H) x (-1, W)`` still blends with the rows and columns inside).
mmcv's ``deform_conv`` module shares this module's helpers, as mmcv's does, and
``masked_conv`` checks its padding and works out its size with them.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.nn.modules.utils import _pair, _single

from mmpar.compat.ops.backend import check_float, renamed_kwargs, torchvision_ops

__all__ = ["ModulatedDeformConv2d", "ModulatedDeformConv2dPack", "modulated_deform_conv2d"]

logger = logging.getLogger(__name__)

IntPair = int | tuple[int, int]
_F = TypeVar("_F", bound=Callable[..., Any])


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
        TypeError: ``input`` or ``weight`` is not floating point.
        ValueError: shapes or parameters that do not fit together.
    """
    if input.dim() != 4:
        raise ValueError(f"mmcv.ops.{op}: input must be 4D (N, C, H, W), found {input.dim()}D")
    if weight.dim() != 4:
        raise ValueError(
            f"mmcv.ops.{op}: weight must be 4D (C_out, C_in // groups, kh, kw), "
            f"found {weight.dim()}D"
        )
    check_float(op, input=input, weight=weight)
    stride_ = int_pair(op, "stride", stride, 1)
    padding_ = int_pair(op, "padding", padding, 0)
    dilation_ = int_pair(op, "dilation", dilation, 1)
    channels = input.size(1)
    if groups < 1 or weight.size(1) * groups != channels:
        raise ValueError(
            f"mmcv.ops.{op}: input has {channels} channels, expected weight.size(1) * groups = "
            f"{weight.size(1)} * {groups}"
        )
    if weight.size(0) % groups:
        raise ValueError(
            f"mmcv.ops.{op}: weight.size(0) (output channels) must be divisible by "
            f"groups={groups}, found {weight.size(0)}"
        )
    if deform_groups < 1 or channels % deform_groups:
        raise ValueError(
            f"mmcv.ops.{op}: input channels must be divisible by deform_groups={deform_groups}, "
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
    """
    shape = tuple(tensor.shape)
    if shape == expected:
        return tensor
    needed = expected[1] * expected[2] * expected[3]
    fits = tensor.dim() == 4 and shape[0] == expected[0] and tensor[:1].numel() >= needed
    if as_memory and fits:
        return tensor.reshape(shape[0], -1)[:, :needed].reshape(expected)
    raise ValueError(f"mmcv.ops.{op}: {name} must have shape {expected} ({layout}), found {shape}")


def set_conv_attributes(
    module: nn.Module,
    cls_name: str,
    in_channels: int,
    out_channels: int,
    kernel_size: IntPair,
    stride: IntPair,
    padding: IntPair,
    dilation: IntPair,
    groups: int,
    deform_groups: int,
) -> None:
    """Sets a deformable conv's geometry, ``nn.Conv2d``'s attributes and its empty weight.

    ``weight``: (out_channels, in_channels // groups, kh, kw), for ``reset_parameters``.

    Raises:
        ValueError: the channels are not divisible by ``groups``.
    """
    if groups < 1 or in_channels % groups or out_channels % groups:
        raise ValueError(
            f"{cls_name}: in_channels ({in_channels}) and out_channels "
            f"({out_channels}) must be divisible by groups ({groups})"
        )
    module.in_channels = in_channels
    module.out_channels = out_channels
    module.kernel_size = _pair(kernel_size)
    module.stride = _pair(stride)
    module.padding = _pair(padding)
    module.dilation = _pair(dilation)
    module.groups = groups
    module.deform_groups = deform_groups
    # nn.Conv2d's attributes, which mmcv's conv builders read.
    module.transposed = False
    module.output_padding = _single(0)
    module.weight = nn.Parameter(
        torch.empty(out_channels, in_channels // groups, *module.kernel_size)
    )


def rename_deform_groups(cls_name: str) -> Callable[[_F], _F]:
    """Accepts mmcv's deprecated ``deformable_groups=`` for ``deform_groups=``, with a warning."""
    return renamed_kwargs(
        {"deformable_groups": "deform_groups"},
        "{owner}: give {new} only ({old} is its deprecated name), not both",
        cls_name,
    )


def load_old_offset_keys(
    module_name: str, state_dict: dict[str, Any], prefix: str, local_metadata: dict[str, Any]
) -> None:
    """Renames a version-1 checkpoint's ``<name>_offset.*`` keys to ``<name>.conv_offset.*``.

    Early checkpoints stored a Pack's offset convolution beside it, as
    ``layer1.0.conv2_offset.weight`` for the Pack ``layer1.0.conv2``.
    """
    version = local_metadata.get("version")
    if version is None or version < 2:
        for param in ("weight", "bias"):
            new_key = f"{prefix}conv_offset.{param}"
            old_key = f"{prefix[:-1]}_offset.{param}"
            if new_key not in state_dict and old_key in state_dict:
                state_dict[new_key] = state_dict.pop(old_key)
    if version is not None and version > 1:
        logger.info(f"{module_name} {prefix.rstrip('.')} is upgraded to version 2.")


class OffsetConvPack(nn.Module):
    """What the DCNv1 and DCNv2 Packs share: their ``conv_offset``, and old checkpoints.

    A Pack lists it before its layer (``class Pack(OffsetConvPack, Layer)``): the
    layer sets the geometry (:func:`set_conv_attributes`), the Pack builds
    ``conv_offset`` from it, and version-1 checkpoints load (see
    :func:`load_old_offset_keys`).
    """

    _version = 2
    #: The Pack's name in the upgrade's log line, mmcv's (not always the class's).
    _log_name = ""
    # Set by set_conv_attributes.
    in_channels: int
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    deform_groups: int

    def _build_conv_offset(self, per_point: int) -> None:
        """``conv_offset``: the layer's geometry, ``per_point`` channels per group and kernel point.

        Its output is (N, deform_groups * per_point * kh * kw, out_h, out_w).
        """
        kh, kw = self.kernel_size
        self.conv_offset = nn.Conv2d(
            self.in_channels,
            self.deform_groups * per_point * kh * kw,
            kernel_size=self.kernel_size,
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            bias=True,
        )

    def _zero_conv_offset(self) -> None:
        """``conv_offset``'s weight and bias at zero: the Pack starts as its plain layer."""
        with torch.no_grad():
            self.conv_offset.weight.zero_()
            self.conv_offset.bias.zero_()

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        load_old_offset_keys(self._log_name, state_dict, prefix, local_metadata)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


def modulated_deform_conv2d(
    input: Tensor,
    offset: Tensor,
    mask: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    deform_groups: int = 1,
) -> Tensor:
    """Modulated deformable 2D convolution (DCNv2).

    ``out[n, o, y, x] = bias[o] + sum over c, i, j of weight[o, c, i, j] *
    mask[n, g, k, y, x] * bilinear(input[n, c], y * sh - ph + i * dh + dy,
    x * sw - pw + j * dw + dx)``, with ``k = i * kw + j``, ``g`` the deformable
    group of channel ``c``, ``(dy, dx) = offset[n, g, 2k : 2k + 2, y, x]`` and
    zero outside the map. As mmcv's, the output has ``offset``'s dtype:
    ``input``, ``mask``, ``weight`` and ``bias`` are cast to it (mixed precision).

    Args:
        input: (N, C_in, H, W) float.
        offset: (N, deform_groups * 2 * kh * kw, out_h, out_w) float: per group,
            per kernel point, (dy, dx).
        mask: (N, deform_groups * kh * kw, out_h, out_w) float: per group, per
            kernel point, the factor of its sample.
        weight: (C_out, C_in // groups, kh, kw) float.
        bias: (C_out,) float, or None.
        stride: Int or (sh, sw).
        padding: Int or (ph, pw): zeros added on both sides.
        dilation: Int or (dh, dw).
        groups: Blocked connections from input to output channels.
        deform_groups: Groups of input channels, each with its own offsets and mask.

    Returns:
        (N, C_out, out_h, out_w), ``offset``'s dtype.

    Raises:
        TypeError: a tensor is not floating point.
        ValueError: shapes or parameters that do not fit together.
    """
    op = "modulated_deform_conv2d"
    check_float(op, offset=offset, mask=mask, bias=bias)
    stride_, padding_, dilation_, out_size = conv_geometry(
        op, input, weight, stride, padding, dilation, groups, deform_groups
    )
    points = weight.size(2) * weight.size(3)
    batch = input.size(0)
    offset = check_per_point(
        op, "offset", offset, (batch, deform_groups * 2 * points, *out_size),
        "N, deform_groups * 2 * kh * kw, out_h, out_w", as_memory=True,
    )  # fmt: skip
    mask = check_per_point(
        op, "mask", mask, (batch, deform_groups * points, *out_size),
        "N, deform_groups * kh * kw, out_h, out_w", as_memory=True,
    )  # fmt: skip
    if bias is not None and tuple(bias.shape) != (weight.size(0),):
        raise ValueError(
            f"mmcv.ops.{op}: bias must have shape ({weight.size(0)},), found {tuple(bias.shape)}"
        )
    dtype = offset.dtype
    compute = compute_dtype(offset)
    out = torchvision_ops().deform_conv2d(
        input.to(compute),
        offset.to(compute),
        weight.to(compute),
        None if bias is None else bias.to(compute),
        stride_,
        padding_,
        dilation_,
        mask.to(compute),
    )
    return out.to(dtype)


class ModulatedDeformConv2d(nn.Module):
    """Modulated deformable 2D convolution (DCNv2), with its weight and bias.

    Args:
        in_channels: Channels of the input.
        out_channels: Channels of the output.
        kernel_size: Int or (kh, kw).
        stride: Int or (sh, sw).
        padding: Int or (ph, pw).
        dilation: Int or (dh, dw).
        groups: Blocked connections from input to output channels.
        deform_groups: Groups of input channels with their own offsets and mask
            (``deformable_groups=``, deprecated, is accepted with a warning).
        bias: Whether to add a learned bias (any truthy value, such as mmcv's
            ``"auto"``, adds one).
    """

    @rename_deform_groups("ModulatedDeformConv2d")
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
        bias: bool | str = True,
    ) -> None:
        super().__init__()
        set_conv_attributes(
            self, "ModulatedDeformConv2d", in_channels, out_channels, kernel_size, stride,
            padding, dilation, groups, deform_groups,
        )  # fmt: skip
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.init_weights()

    def init_weights(self) -> None:
        """Weight uniform in ``+-1 / sqrt(in_channels * kh * kw)``, bias zero."""
        bound = 1.0 / math.sqrt(self.in_channels * self.kernel_size[0] * self.kernel_size[1])
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.zero_()

    def forward(self, x: Tensor, offset: Tensor, mask: Tensor) -> Tensor:
        """The convolution of ``x`` sampled at ``offset``, weighted by ``mask``.

        Args:
            x: (N, C_in, H, W).
            offset: (N, deform_groups * 2 * kh * kw, out_h, out_w), (dy, dx) pairs.
            mask: (N, deform_groups * kh * kw, out_h, out_w).

        Returns:
            (N, C_out, out_h, out_w).
        """
        return modulated_deform_conv2d(
            x, offset, mask, self.weight, self.bias, self.stride, self.padding,
            self.dilation, self.groups, self.deform_groups,
        )  # fmt: skip


class ModulatedDeformConv2dPack(OffsetConvPack, ModulatedDeformConv2d):
    """DCNv2 that computes its own offsets and mask, a drop-in for ``nn.Conv2d`` (mmcv's "DCNv2").

    ``conv_offset``, an ``nn.Conv2d`` with the same geometry, gives
    ``3 * deform_groups * kh * kw`` channels, split in three equal chunks
    ``o1, o2, m``: the offsets are ``cat(o1, o2)`` and the mask ``sigmoid(m)``.
    It starts at zero (no offsets, mask 0.5). Takes
    :class:`ModulatedDeformConv2d`'s arguments.
    """

    _log_name = "ModulatedDeformConvPack"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._build_conv_offset(3)
        self.init_weights()

    def init_weights(self) -> None:
        """The parent's initialisation, and ``conv_offset`` at zero."""
        super().init_weights()
        # The parent's __init__ calls this before conv_offset exists.
        if hasattr(self, "conv_offset"):
            self._zero_conv_offset()

    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]
        """The convolution of ``x`` at the offsets and mask ``conv_offset`` computes.

        Args:
            x: (N, C_in, H, W).

        Returns:
            (N, C_out, out_h, out_w).
        """
        o1, o2, mask = torch.chunk(self.conv_offset(x), 3, dim=1)
        offset = torch.cat((o1, o2), dim=1)
        return super().forward(x, offset, torch.sigmoid(mask))
