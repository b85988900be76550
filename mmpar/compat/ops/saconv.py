"""Switchable Atrous Convolution (DetectoRS), as ``mmcv.ops.saconv``.

``SAConv2d`` subclasses ``mmcv.cnn.ConvAWS2d`` (its weight standardisation,
and its checkpoint loading that recovers ``weight_gamma``/``weight_beta``), so
it needs mmcv 1.x; the class is built on first access of the name, and this
module imports without mmcv. ``use_deform=True`` runs this package's
``deform_conv2d``.

As in mmcv, ``bias`` is created (and loaded) but never added: both branches
convolve without it. The 5x5 mean of the switch pads by reflection, so the input
must be at least 3x3 (mmcv's too: torch's reflection padding refuses less); a
NaN in it reaches, through the global context, every output of its image.
"""

from __future__ import annotations

from typing import Any, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mmpar.compat.ops.backend import check_int, check_layer_input

__all__ = ["SAConv2d"]  # noqa: F822 (built on first access, by __getattr__)

_IntPair = Union[int, tuple[int, int]]


def __getattr__(name: str) -> Any:
    if name == "SAConv2d":
        cls = _build_saconv2d()
        globals()["SAConv2d"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _conv_aws2d() -> type:
    try:
        from mmcv.cnn import ConvAWS2d
    except ImportError as err:
        raise ImportError(
            "mmcv.ops.SAConv2d (mmpar's stand-in) subclasses mmcv.cnn.ConvAWS2d, which could "
            f"not be imported ({err}); install mmcv 1.x (pip install mmcv==1.7.2)"
        ) from err
    return ConvAWS2d


def _check_input(x: Tensor, in_channels: int) -> None:
    """One-line errors for :meth:`SAConv2d.forward`'s input, rather than torch's."""
    op = "mmcv.ops.SAConv2d"
    if not isinstance(x, Tensor) or not x.is_floating_point():
        found = x.dtype if isinstance(x, Tensor) else type(x).__name__
        raise TypeError(f"{op}: x must be a floating-point tensor, found {found}")
    if x.dim() != 4 or x.size(1) != in_channels or min(x.shape[2:]) < 3:
        raise ValueError(
            f"{op}: x must be (N, in_channels={in_channels}, H, W) with H, W >= 3 (the "
            f"switch's 5x5 mean pads by reflection), found {tuple(x.shape)}"
        )


def _build_saconv2d() -> type:
    """The ``SAConv2d`` class, on top of mmcv's ``ConvAWS2d``."""
    base = _conv_aws2d()

    class SAConv2d(base):  # type: ignore[misc, valid-type]
        """Switchable Atrous Convolution (https://arxiv.org/abs/2006.02334), as mmcv's.

        Adds a global context to the input, then blends per position two
        convolutions with the standardised weight: one as configured, and one
        with 3x the padding and dilation and the weight plus ``weight_diff``;
        the blend ``switch`` is a 1x1 conv of the 5x5 mean of the input.
        Adds a global context to the result.

        Args:
            in_channels: Input channels.
            out_channels: Output channels.
            kernel_size: Kernel size; 3 when ``use_deform``.
            stride: Stride.
            padding: Zero padding of the small branch (the large one has 3x).
            dilation: Dilation of the small branch (the large one has 3x).
            groups: Groups.
            bias: Create a ``bias`` parameter (as in mmcv it is never used).
            use_deform: Deformable convolutions, with offsets predicted by
                ``offset_s``/``offset_l`` (3x3 convs) from the 5x5 mean.

        Raises:
            ValueError: padding given as a string, or ``use_deform`` with a
                kernel other than 3x3.
        """

        def __init__(
            self,
            in_channels: int,
            out_channels: int,
            kernel_size: _IntPair,
            stride: _IntPair = 1,
            padding: _IntPair = 0,
            dilation: _IntPair = 1,
            groups: int = 1,
            bias: bool = True,
            use_deform: bool = False,
        ) -> None:
            if isinstance(padding, str):
                raise ValueError(
                    "mmcv.ops.SAConv2d: padding must be an int or a pair of ints, "
                    f"found {padding!r}"
                )
            for name, value in (("stride", stride), ("dilation", dilation)):
                for v in value if isinstance(value, (tuple, list)) else (value,):
                    check_int("mmcv.ops.SAConv2d", name, v, 1)
            groups = check_int("mmcv.ops.SAConv2d", "groups", groups, 1)
            if in_channels % groups or out_channels % groups:
                raise ValueError(
                    f"mmcv.ops.SAConv2d: groups={groups} must divide in_channels={in_channels} "
                    f"and out_channels={out_channels}"
                )
            super().__init__(
                in_channels,
                out_channels,
                kernel_size,
                stride=stride,
                padding=padding,
                dilation=dilation,
                groups=groups,
                bias=bias,
            )
            if use_deform and tuple(self.kernel_size) != (3, 3):
                raise ValueError(
                    "mmcv.ops.SAConv2d: use_deform=True needs kernel_size 3 (offset_s/offset_l "
                    f"predict 2 * 3 * 3 = 18 offsets), found kernel_size={kernel_size!r}"
                )
            self.use_deform = use_deform
            self.switch = nn.Conv2d(self.in_channels, 1, kernel_size=1, stride=stride, bias=True)
            self.weight_diff = nn.Parameter(torch.zeros_like(self.weight))
            self.pre_context = nn.Conv2d(self.in_channels, self.in_channels, 1, bias=True)
            self.post_context = nn.Conv2d(self.out_channels, self.out_channels, 1, bias=True)
            if self.use_deform:
                self.offset_s = self._offset_conv(stride)
                self.offset_l = self._offset_conv(stride)
            self.init_weights()

        def _offset_conv(self, stride: _IntPair) -> nn.Conv2d:
            return nn.Conv2d(self.in_channels, 18, kernel_size=3, padding=1, stride=stride)

        def init_weights(self) -> None:
            """mmcv's init: switch weight 0 / bias 1 (all small branch), the rest zero."""
            nn.init.zeros_(self.switch.weight)
            nn.init.ones_(self.switch.bias)
            with torch.no_grad():
                self.weight_diff.zero_()
            convs = [self.pre_context, self.post_context]
            if self.use_deform:
                convs += [self.offset_s, self.offset_l]
            for conv in convs:
                nn.init.zeros_(conv.weight)
                nn.init.zeros_(conv.bias)

        def forward(self, x: Tensor) -> Tensor:
            """(N, in_channels, H, W) -> (N, out_channels, H', W'), H', W' as the conv's.

            Raises:
                TypeError: ``x`` is not floating point, or not of the layer's dtype.
                ValueError: ``x`` is not (N, in_channels, H, W) with H, W >= 3, or not
                    on the layer's device.
            """
            _check_input(x, self.in_channels)
            check_layer_input("mmcv.ops.SAConv2d", "x", x, self.weight)
            x = x + self.pre_context(F.adaptive_avg_pool2d(x, output_size=1))
            local_mean = F.avg_pool2d(F.pad(x, (2, 2, 2, 2), mode="reflect"), 5, stride=1)
            switch = self.switch(local_mean)
            weight = self._get_weight(self.weight)
            small = self._branch(x, local_mean, weight, self.padding, self.dilation, "offset_s")
            large_padding = tuple(3 * p for p in self.padding)
            large_dilation = tuple(3 * d for d in self.dilation)
            large = self._branch(
                x, local_mean, weight + self.weight_diff, large_padding, large_dilation, "offset_l"
            )
            out = switch * small + (1 - switch) * large
            return out + self.post_context(F.adaptive_avg_pool2d(out, output_size=1))

        def _branch(
            self,
            x: Tensor,
            local_mean: Tensor,
            weight: Tensor,
            padding: tuple[int, ...],
            dilation: tuple[int, ...],
            offset_conv: str,
        ) -> Tensor:
            """One branch's convolution (no bias), deformable when ``use_deform``."""
            if not self.use_deform:
                return F.conv2d(x, weight, None, self.stride, padding, dilation, self.groups)
            from mmpar.compat.ops.deform_conv import deform_conv2d

            offset = getattr(self, offset_conv)(local_mean)
            return deform_conv2d(x, offset, weight, self.stride, padding, dilation, self.groups, 1)

    SAConv2d.__module__ = __name__
    SAConv2d.__qualname__ = "SAConv2d"
    return SAConv2d
