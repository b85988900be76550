"""The merge cells of NAS-FPN and NAS-FCOS (``mmcv.ops.merge_cells``).

A cell takes two feature maps, optionally convolves each, resizes both to one
size, merges them (sum, concatenation, or global-pooling attention) and
optionally convolves the result. The resize is mmcv's, so that mmdet's necks
compute what they compute with mmcv-full:

* sizes are compared as tuples ``(h, w)`` (lexicographically), the default
  output size being the larger of the two inputs';
* a map "smaller" than the target is resized with ``F.interpolate``;
* a "larger" one is zero-padded to a multiple of the target (split evenly, the
  odd pixel at the bottom / right) and max-pooled with kernel = stride = the
  ratio.

The convolutions are mmcv's ``ConvModule`` (mmcv's pure-Python brick), imported
from ``mmcv.cnn`` when a cell has one; cells without convs need no mmcv.

What mmcv asserts (``upsample_mode``, inputs sharing ``(N, C)``, ``out_size`` of
two values) raises ``ArgumentError``, a ``ValueError`` and an ``AssertionError``.
A NaN goes through the resize as through ``F.interpolate`` and ``F.max_pool2d``
(which keeps it), as in mmcv.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mmpar.compat.ops.backend import ArgumentError, check_int, check_layer_input

__all__ = ["BaseMergeCell", "ConcatCell", "GlobalPoolingCell", "SumCell"]

_UPSAMPLE_MODES = ("nearest", "bilinear")
_DEFAULT_OUT_CONV_CFG: Mapping[str, Any] = MappingProxyType(
    {"groups": 1, "kernel_size": 3, "padding": 1, "bias": True}
)


def _conv_module() -> type:
    try:
        from mmcv.cnn import ConvModule
    except ImportError as err:
        raise ImportError(
            f"merge cells with convolutions build mmcv.cnn.ConvModule, which could not be "
            f"imported ({err}); install mmcv 1.x, or use with_out_conv=False and no input convs"
        ) from err
    return ConvModule


class BaseMergeCell(nn.Module):
    """Two inputs -> optional input convs -> resize -> :meth:`_binary_op` -> optional out conv.

    Args:
        fused_channels: Input channels of ``out_conv``.
        out_channels: Output channels of ``out_conv`` (and channels of the input convs).
        with_out_conv: Whether the merged map goes through ``out_conv``.
        out_conv_cfg: ``ConvModule`` arguments of ``out_conv`` (``groups``,
            ``kernel_size``, ``padding``, ``bias``).
        out_norm_cfg: The norm config of ``out_conv``.
        out_conv_order: The order of ``out_conv``'s conv / norm / act layers.
        with_input1_conv: Whether input 1 goes through a 3x3 ``input1_conv`` first.
        with_input2_conv: Whether input 2 goes through a 3x3 ``input2_conv`` first.
        input_conv_cfg: The conv config of the input convs (``None``: Conv2d).
        input_norm_cfg: The norm config of the input convs.
        upsample_mode: ``'nearest'`` or ``'bilinear'``, how smaller maps are resized.

    Raises:
        ArgumentError: another ``upsample_mode`` (mmcv asserts it; a ValueError too).
        ImportError: a conv is asked for and ``mmcv.cnn`` does not import.
    """

    def __init__(
        self,
        fused_channels: Optional[int] = 256,
        out_channels: Optional[int] = 256,
        with_out_conv: bool = True,
        out_conv_cfg: Mapping[str, Any] = _DEFAULT_OUT_CONV_CFG,
        out_norm_cfg: Optional[dict] = None,
        out_conv_order: tuple = ("act", "conv", "norm"),
        with_input1_conv: bool = False,
        with_input2_conv: bool = False,
        input_conv_cfg: Optional[dict] = None,
        input_norm_cfg: Optional[dict] = None,
        upsample_mode: str = "nearest",
    ) -> None:
        super().__init__()
        if not isinstance(upsample_mode, str) or upsample_mode not in _UPSAMPLE_MODES:
            raise ArgumentError(
                f"mmcv.ops.{type(self).__name__}: upsample_mode must be one of "
                f"{_UPSAMPLE_MODES}, found {upsample_mode!r}"
            )
        self.with_out_conv = with_out_conv
        self.with_input1_conv = with_input1_conv
        self.with_input2_conv = with_input2_conv
        self.upsample_mode = upsample_mode
        if with_out_conv:
            self.out_conv = _conv_module()(
                fused_channels,
                out_channels,
                **dict(out_conv_cfg),
                norm_cfg=out_norm_cfg,
                order=out_conv_order,
            )
        self.input1_conv = (
            self._build_input_conv(out_channels, input_conv_cfg, input_norm_cfg)
            if with_input1_conv
            else nn.Sequential()
        )
        self.input2_conv = (
            self._build_input_conv(out_channels, input_conv_cfg, input_norm_cfg)
            if with_input2_conv
            else nn.Sequential()
        )

    def _build_input_conv(
        self, channel: Optional[int], conv_cfg: Optional[dict], norm_cfg: Optional[dict]
    ) -> nn.Module:
        return _conv_module()(
            channel, channel, 3, padding=1, conv_cfg=conv_cfg, norm_cfg=norm_cfg, bias=True
        )

    def _binary_op(self, x1: Tensor, x2: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must define _binary_op")

    def _resize(self, x: Tensor, size: Sequence[int]) -> Tensor:
        size = tuple(size)
        current: Tuple[int, ...] = tuple(x.shape[-2:])
        if current == size:
            return x
        if current < size:  # lexicographic, as mmcv compares torch.Size tuples
            return F.interpolate(x, size=size, mode=self.upsample_mode)
        h, w = current
        target_h, target_w = size
        if h % target_h or w % target_w:
            pad_h = math.ceil(h / target_h) * target_h - h
            pad_w = math.ceil(w / target_w) * target_w - w
            top, left = pad_h // 2, pad_w // 2
            x = F.pad(x, (left, pad_w - left, top, pad_h - top), mode="constant", value=0.0)
        kernel = (x.shape[-2] // target_h, x.shape[-1] // target_w)
        return F.max_pool2d(x, kernel_size=kernel, stride=kernel)

    def forward(self, x1: Tensor, x2: Tensor, out_size: Optional[Sequence[int]] = None) -> Tensor:
        """Merge ``x1`` (N, C, H1, W1) and ``x2`` (N, C, H2, W2) at ``out_size``.

        Args:
            x1: The first input.
            x2: The second input, with ``x1``'s batch and channels.
            out_size: ``(H, W)`` of the output; ``None``: the larger of the two
                inputs' sizes, compared as ``(h, w)`` tuples.

        Returns:
            (N, C', H, W): C' is ``out_channels`` with ``out_conv``, else the
            merged channels.

        Raises:
            TypeError: inputs that are not floating point (or, with convs, not of
                their dtype), or an ``out_size`` that is not ints.
            ValueError: inputs that are not (N, C, H, W) maps (or, with convs, not
                on their device), or an ``out_size`` below 1.
            ArgumentError: inputs with different batch or channels, or an
                ``out_size`` that is not two values (mmcv asserts them).
        """
        op = f"mmcv.ops.{type(self).__name__}"
        for name, x in (("x1", x1), ("x2", x2)):
            if not isinstance(x, Tensor) or x.dim() != 4 or min(x.shape[2:]) < 1:
                found = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(f"{op}: {name} must be (N, C, H, W) with H, W >= 1, found {found}")
            if not x.is_floating_point():
                raise TypeError(f"{op}: {name} must be a floating-point tensor, found {x.dtype}")
            weight = next(self.parameters(), None)
            if weight is not None:
                check_layer_input(op, name, x, weight)
        if x1.shape[:2] != x2.shape[:2]:
            raise ArgumentError(
                f"{op}: x1 and x2 must share (N, C), found {tuple(x1.shape)} and {tuple(x2.shape)}"
            )
        if out_size is not None:
            if not isinstance(out_size, Sequence) or len(out_size) != 2:
                found = tuple(out_size) if isinstance(out_size, Sequence) else out_size
                raise ArgumentError(f"{op}: out_size must be (H, W), found {found!r}")
            out_size = tuple(check_int(op, "out_size", v, 1) for v in out_size)
        if out_size is None:
            out_size = max(tuple(x1.shape[2:]), tuple(x2.shape[2:]))
        if self.with_input1_conv:
            self._check_channels("x1", x1, self.input1_conv)
        if self.with_input2_conv:
            self._check_channels("x2", x2, self.input2_conv)
        x1 = self._resize(self.input1_conv(x1), out_size)
        x2 = self._resize(self.input2_conv(x2), out_size)
        x = self._binary_op(x1, x2)
        if self.with_out_conv:
            self._check_channels("the merged map", x, self.out_conv)
            x = self.out_conv(x)
        return x

    def _check_channels(self, name: str, x: Tensor, conv_module: nn.Module) -> None:
        """A one-line error, rather than torch's, for a map that ``conv_module`` cannot take."""
        expected = getattr(getattr(conv_module, "conv", None), "in_channels", None)
        if expected is not None and x.size(1) != expected:
            raise ValueError(
                f"mmcv.ops.{type(self).__name__}: {name} must have {expected} channels "
                f"(its conv's in_channels), found {x.size(1)}"
            )


class SumCell(BaseMergeCell):
    """``x1 + x2``.

    Args:
        in_channels: The inputs' channels (``out_conv``'s input channels).
        out_channels: ``out_conv``'s output channels.
        **kwargs: The other arguments of :class:`BaseMergeCell`.
    """

    def __init__(self, in_channels: int, out_channels: int, **kwargs: Any) -> None:
        super().__init__(in_channels, out_channels, **kwargs)

    def _binary_op(self, x1: Tensor, x2: Tensor) -> Tensor:
        return x1 + x2


class ConcatCell(BaseMergeCell):
    """``cat([x1, x2], dim=1)``.

    Args:
        in_channels: The inputs' channels (``out_conv`` takes twice as many).
        out_channels: ``out_conv``'s output channels.
        **kwargs: The other arguments of :class:`BaseMergeCell`.
    """

    def __init__(self, in_channels: int, out_channels: int, **kwargs: Any) -> None:
        super().__init__(in_channels * 2, out_channels, **kwargs)

    def _binary_op(self, x1: Tensor, x2: Tensor) -> Tensor:
        return torch.cat([x1, x2], dim=1)


class GlobalPoolingCell(BaseMergeCell):
    """``x2 + sigmoid(global_avg_pool(x2)) * x1``.

    Args:
        in_channels: The inputs' channels (``out_conv``'s input channels).
        out_channels: ``out_conv``'s output channels.
        **kwargs: The other arguments of :class:`BaseMergeCell`.
    """

    def __init__(
        self, in_channels: Optional[int] = None, out_channels: Optional[int] = None, **kwargs: Any
    ) -> None:
        super().__init__(in_channels, out_channels, **kwargs)
        self.global_pool = nn.AdaptiveAvgPool2d((1, 1))

    def _binary_op(self, x1: Tensor, x2: Tensor) -> Tensor:
        attention = self.global_pool(x2).sigmoid()
        return x2 + attention * x1
