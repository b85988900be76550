"""Modulated deformable convolution (DCNv2), mmcv's ``mmcv.ops.modulated_deform_conv``.

The kernel is ``torchvision.ops.deform_conv2d`` with a mask, as
:mod:`mmpar.compat.ops.sampling.deform_sampling` runs it: mmcv's offset layout and
sampling, and mmcv-full's gradients, border points included. mmcv's
``deform_conv`` module shares this module's layer helpers, as mmcv's does.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.nn.modules.utils import _single

from mmpar.compat.ops.backend import (
    ArgumentError,
    check_float,
    check_int,
    check_layer_input,
    renamed_kwargs,
)
from mmpar.compat.ops.sampling.deform_sampling import (
    IntPair,
    check_per_point,
    conv_geometry,
    conv_output_size,
    deform_conv,
    int_pair,
)

__all__ = ["ModulatedDeformConv2d", "ModulatedDeformConv2dPack", "modulated_deform_conv2d"]

logger = logging.getLogger(__name__)

_F = TypeVar("_F", bound=Callable[..., Any])


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
        TypeError: a channel or group count that is not an int.
        ValueError: a size out of range, or channels not divisible by ``deform_groups``.
        ArgumentError: channels not divisible by ``groups`` (mmcv asserts it).
    """
    op = f"mmcv.ops.{cls_name}"
    in_channels, out_channels, groups, deform_groups = (
        check_int(op, name, value, minimum) for name, value, minimum in (
            ("in_channels", in_channels, 0), ("out_channels", out_channels, 0),
            ("groups", groups, 1), ("deform_groups", deform_groups, 1),
        )
    )  # fmt: skip
    if in_channels % groups or out_channels % groups:
        raise ArgumentError(
            f"{op}: in_channels ({in_channels}) and out_channels "
            f"({out_channels}) must be divisible by groups ({groups})"
        )
    if in_channels % deform_groups:
        raise ValueError(
            f"{op}: in_channels ({in_channels}) must be divisible by deform_groups "
            f"({deform_groups})"
        )
    module.in_channels = in_channels
    module.out_channels = out_channels
    module.kernel_size = int_pair(cls_name, "kernel_size", kernel_size, 1)
    module.stride = int_pair(cls_name, "stride", stride, 1)
    module.padding = int_pair(cls_name, "padding", padding, 0)
    module.dilation = int_pair(cls_name, "dilation", dilation, 1)
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

    def _offsets_of(self, x: Tensor) -> Tensor:
        """``conv_offset(x)``, once ``x`` is checked: a clear error rather than torch's conv's.

        Raises:
            TypeError: ``x`` is not a floating-point tensor, or not of ``conv_offset``'s dtype.
            ValueError: ``x`` is not (N, in_channels, H, W), is smaller than the kernel
                reaches, or is not on ``conv_offset``'s device.
        """
        op = f"mmcv.ops.{type(self).__name__}"
        if not isinstance(x, Tensor) or not x.is_floating_point():
            found = x.dtype if isinstance(x, Tensor) else type(x).__name__
            raise TypeError(f"{op}: x must be a floating-point tensor, found {found}")
        if x.dim() != 4 or x.size(1) != self.in_channels:
            raise ValueError(
                f"{op}: x must be (N, in_channels={self.in_channels}, H, W), found {tuple(x.shape)}"
            )
        out_size = conv_output_size(
            x.shape[2:], self.kernel_size, self.stride, self.padding, self.dilation
        )
        if min(out_size) < 1:
            raise ValueError(
                f"{op}: x is too small (input {tuple(x.shape[2:])}, output would be {out_size})"
            )
        check_layer_input(op, "x", x, self.conv_offset.weight)
        return self.conv_offset(x)

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
    stride_, padding_, dilation_, out_size = conv_geometry(
        op, input, weight, stride, padding, dilation, groups, deform_groups
    )
    points = weight.size(2) * weight.size(3)
    batch = input.size(0)
    offset = check_per_point(
        op, "offset", offset, (batch, deform_groups * 2 * points, *out_size),
        "N, deform_groups * 2 * kh * kw, out_h, out_w", input, as_memory=True,
    )  # fmt: skip
    mask = check_per_point(
        op, "mask", mask, (batch, deform_groups * points, *out_size),
        "N, deform_groups * kh * kw, out_h, out_w", input, as_memory=True,
    )  # fmt: skip
    if bias is not None:
        if not isinstance(bias, Tensor):
            raise TypeError(
                f"mmcv.ops.{op}: bias must be a tensor or None, found {type(bias).__name__}"
            )
        check_float(op, bias=bias)
        if tuple(bias.shape) != (weight.size(0),) or bias.device != input.device:
            raise ValueError(
                f"mmcv.ops.{op}: bias must have shape ({weight.size(0)},) on {input.device}, "
                f"found {tuple(bias.shape)} on {bias.device}"
            )
    return deform_conv(input, offset, weight, bias, mask, stride_, padding_, dilation_)


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
        o1, o2, mask = torch.chunk(self._offsets_of(x), 3, dim=1)
        offset = torch.cat((o1, o2), dim=1)
        return super().forward(x, offset, torch.sigmoid(mask))
