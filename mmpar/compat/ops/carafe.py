"""CARAFE, content-aware reassembly of features (``mmcv.ops.carafe``), in plain torch.

`CARAFE <https://arxiv.org/abs/1905.02188>`_ upsamples by ``scale_factor``: each
output pixel is a weighted sum of the ``kernel_size x kernel_size`` input pixels
around the input pixel it falls in, with weights predicted per output pixel::

    out[n, c, y, x] = sum_{i, j < k} masks[n, g * k * k + i * k + j, y, x]
                      * features[n, c, y // s + i - (k - 1) / 2, x // s + j - (k - 1) / 2]

where ``g = c // (C / group_size)`` and features outside the map are 0. This is
the definition of both of mmcv-full's kernels (``carafe`` and ``carafe_naive``),
so both names run the same code here; it is differentiable by autograd with
respect to ``features`` and ``masks``, on any device and floating dtype. A NaN in
``features`` or ``masks`` reaches every output whose window reads it, as in mmcv's
kernels (a NaN times a weight of 0 is still NaN).

Where mmcv asserts an argument (the sizes, the masks' shape, channels divisible
by ``group_size``), the error is an ``ArgumentError``: a ``ValueError`` and an
``AssertionError``.
"""

from __future__ import annotations

import math
from typing import Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mmpar.compat.ops.backend import ArgumentError

__all__ = [
    "CARAFE",
    "CARAFEFunction",
    "CARAFENaive",
    "CARAFENaiveFunction",
    "CARAFEPack",
    "carafe",
    "carafe_naive",
]


def _as_int(op: str, name: str, value: Union[int, float], minimum: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value != int(value)
    ):
        raise TypeError(f"{op}: {name} must be an int, found {value!r}")
    if int(value) < minimum:
        raise ArgumentError(f"{op}: {name} must be >= {minimum}, found {value!r}")
    return int(value)


def _check(
    op: str,
    features: Tensor,
    masks: Tensor,
    kernel_size: int,
    group_size: int,
    scale_factor: int,
) -> None:
    for name, t in (("features", features), ("masks", masks)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            found = t.dtype if isinstance(t, Tensor) else type(t).__name__
            raise TypeError(f"{op}: {name} must be a floating-point tensor, found {found}")
        if t.dim() != 4:
            raise ArgumentError(f"{op}: {name} must be 4-D (N, C, H, W), found {tuple(t.shape)}")
    if kernel_size % 2 != 1:
        raise ArgumentError(f"{op}: kernel_size must be odd, found {kernel_size}")
    n, c, h, w = features.shape
    if c % group_size:
        raise ArgumentError(
            f"{op}: features' channels ({c}) must be divisible by group_size ({group_size})"
        )
    expected = (n, kernel_size * kernel_size * group_size, h * scale_factor, w * scale_factor)
    if tuple(masks.shape) != expected:
        raise ArgumentError(
            f"{op}: masks must be (N, kernel_size**2 * group_size, H * scale_factor, "
            f"W * scale_factor) = {expected} for features {tuple(features.shape)}, "
            f"found {tuple(masks.shape)}"
        )
    if masks.device != features.device:
        raise ValueError(
            f"{op}: masks must be on features' device ({features.device}), found {masks.device}"
        )


def carafe(
    features: Tensor,
    masks: Tensor,
    kernel_size: int,
    group_size: int,
    scale_factor: int,
) -> Tensor:
    """Reassemble ``features`` into a map ``scale_factor`` times larger.

    Args:
        features: (N, C, H, W) float.
        masks: (N, kernel_size**2 * group_size, H * scale_factor, W * scale_factor)
            float, the reassembly weights (usually softmax-normalised over each
            group's ``kernel_size**2`` channels); channel ``g * k * k + i * k + j``
            weighs offset ``(i, j)`` for channel group ``g``.
        kernel_size: The odd reassembly window ``k``.
        group_size: How many channel groups share one set of weights; divides C.
        scale_factor: The integer upsampling ratio ``s``.

    Returns:
        (N, C, H * s, W * s), in the common dtype of ``features`` and ``masks``.

    Raises:
        TypeError: non-integer sizes, or tensors that are not floating point.
        ArgumentError: sizes out of range, or shapes that do not fit together
            (mmcv asserts them; a ValueError too).
        ValueError: tensors on different devices.
    """
    op = "mmcv.ops.carafe"
    k = _as_int(op, "kernel_size", kernel_size, 1)
    groups = _as_int(op, "group_size", group_size, 1)
    s = _as_int(op, "scale_factor", scale_factor, 1)
    _check(op, features, masks, k, groups, s)
    dtype = torch.promote_types(features.dtype, masks.dtype)
    features, masks = features.to(dtype), masks.to(dtype)
    n, c, h, w = features.shape
    r = (k - 1) // 2
    # Every output pixel (y, x) = (h' * s + a, w' * s + b) reads the window of input
    # pixel (h', w'): split the output into (h', a, w', b) and loop over the k * k
    # offsets, shifting the (zero-padded) input rather than unfolding it k * k times.
    padded = F.pad(features, (r, r, r, r))
    padded = padded.reshape(n, groups, c // groups, h + 2 * r, 1, w + 2 * r, 1)
    weights = masks.reshape(n, groups, k * k, h, s, w, s)
    out = None
    for offset in range(k * k):
        i, j = divmod(offset, k)
        shifted = padded[:, :, :, i : i + h, :, j : j + w, :]
        weight = weights[:, :, offset : offset + 1]
        out = shifted * weight if out is None else torch.addcmul(out, shifted, weight)
    return out.reshape(n, c, h * s, w * s)


#: mmcv's naive kernel computes the same function as its packed one: :func:`carafe`.
carafe_naive = carafe


class CARAFEFunction:
    """mmcv's autograd Function's name: ``apply`` is :func:`carafe`."""

    apply = staticmethod(carafe)


class CARAFENaiveFunction:
    """mmcv's autograd Function's name: ``apply`` is :func:`carafe_naive`."""

    apply = staticmethod(carafe_naive)


class _CARAFEModule(nn.Module):
    def __init__(self, kernel_size: int, group_size: int, scale_factor: int) -> None:
        super().__init__()
        for name, value in (
            ("kernel_size", kernel_size),
            ("group_size", group_size),
            ("scale_factor", scale_factor),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                # mmcv asserts it too; a type error is a TypeError here.
                raise TypeError(
                    f"mmcv.ops.{type(self).__name__}: {name} must be an int, found {value!r}"
                )
        self.kernel_size = kernel_size
        self.group_size = group_size
        self.scale_factor = scale_factor

    def forward(self, features: Tensor, masks: Tensor) -> Tensor:
        """(N, C, H, W) features and their masks -> (N, C, H * s, W * s)."""
        return carafe(features, masks, self.kernel_size, self.group_size, self.scale_factor)


class CARAFE(_CARAFEModule):
    """:func:`carafe` as a module.

    Args:
        kernel_size: The odd reassembly window.
        group_size: The number of channel groups.
        scale_factor: The integer upsampling ratio.

    Raises:
        TypeError: an argument that is not an int.
    """


class CARAFENaive(_CARAFEModule):
    """:func:`carafe_naive` as a module: :class:`CARAFE`'s computation and arguments."""


class CARAFEPack(nn.Module):
    """The CARAFE upsampler: channel compressor, content encoder, CARAFE.

    A 1x1 conv compresses ``channels`` to ``compressed_channels``; a
    ``encoder_kernel`` conv predicts ``up_kernel**2 * up_group`` weights for each
    of the ``scale_factor**2`` output pixels of every input pixel; they are
    pixel-shuffled and softmax-normalised over each window, then :func:`carafe`
    reassembles the input with them.

    Args:
        channels: Input (and output) channels.
        scale_factor: The integer upsampling ratio.
        up_kernel: The CARAFE window.
        up_group: The CARAFE channel groups.
        encoder_kernel: The content encoder's kernel size.
        encoder_dilation: The content encoder's dilation.
        compressed_channels: The channel compressor's output channels.

    Raises:
        TypeError: a size that is not an int.
        ArgumentError: a size below 1, an even ``up_kernel``, or ``channels`` not
            divisible by ``up_group`` (a ValueError too).
    """

    def __init__(
        self,
        channels: int,
        scale_factor: int,
        up_kernel: int = 5,
        up_group: int = 1,
        encoder_kernel: int = 3,
        encoder_dilation: int = 1,
        compressed_channels: int = 64,
    ) -> None:
        super().__init__()
        op = "mmcv.ops.CARAFEPack"
        # As ints (mmcv takes 2.0 for 2): nn.Conv2d refuses float sizes.
        sizes = dict(
            channels=channels,
            scale_factor=scale_factor,
            up_kernel=up_kernel,
            up_group=up_group,
            encoder_kernel=encoder_kernel,
            encoder_dilation=encoder_dilation,
            compressed_channels=compressed_channels,
        )
        (
            channels,
            scale_factor,
            up_kernel,
            up_group,
            encoder_kernel,
            encoder_dilation,
            compressed_channels,
        ) = (_as_int(op, name, value, 1) for name, value in sizes.items())
        if up_kernel % 2 != 1:
            raise ArgumentError(f"{op}: up_kernel must be odd, found {up_kernel}")
        if channels % up_group:
            raise ArgumentError(
                f"{op}: channels ({channels}) must be divisible by up_group ({up_group})"
            )
        self.channels = channels
        self.scale_factor = scale_factor
        self.up_kernel = up_kernel
        self.up_group = up_group
        self.encoder_kernel = encoder_kernel
        self.encoder_dilation = encoder_dilation
        self.compressed_channels = compressed_channels
        self.channel_compressor = nn.Conv2d(channels, compressed_channels, 1)
        self.content_encoder = nn.Conv2d(
            compressed_channels,
            up_kernel * up_kernel * up_group * scale_factor * scale_factor,
            encoder_kernel,
            padding=int((encoder_kernel - 1) * encoder_dilation / 2),
            dilation=encoder_dilation,
            groups=1,
        )
        self.init_weights()

    def init_weights(self) -> None:
        """Xavier-uniform convs with zero biases, then the encoder normal(0, 0.001)."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.xavier_uniform_(m.weight, gain=1)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
        nn.init.normal_(self.content_encoder.weight, mean=0, std=0.001)
        nn.init.constant_(self.content_encoder.bias, 0)

    def kernel_normalizer(self, mask: Tensor) -> Tensor:
        """(N, k*k*G*s*s, H, W) encoder output -> (N, k*k*G, H*s, W*s) softmax weights."""
        # F.pixel_shuffle, as a reshape: torch's pixel_shuffle backward fails on an empty batch.
        s = self.scale_factor
        n, channels, h, w = mask.shape
        mask_c, h, w = channels // (s * s), h * s, w * s
        mask = mask.view(n, mask_c, s, s, h // s, w // s).permute(0, 1, 4, 2, 5, 3)
        groups = mask_c // (self.up_kernel * self.up_kernel)
        mask = mask.reshape(n, groups, self.up_kernel * self.up_kernel, h, w)
        mask = F.softmax(mask, dim=2, dtype=mask.dtype)
        return mask.view(n, mask_c, h, w).contiguous()

    def feature_reassemble(self, x: Tensor, mask: Tensor) -> Tensor:
        """:func:`carafe` of ``x`` with the normalised ``mask``."""
        return carafe(x, mask, self.up_kernel, self.up_group, self.scale_factor)

    def forward(self, x: Tensor) -> Tensor:
        """(N, channels, H, W) -> (N, channels, H * scale_factor, W * scale_factor)."""
        if isinstance(x, Tensor) and not x.is_floating_point():
            raise TypeError(f"mmcv.ops.CARAFEPack: x must be floating point, found {x.dtype}")
        if not isinstance(x, Tensor) or x.dim() != 4 or x.size(1) != self.channels:
            found = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(
                f"mmcv.ops.CARAFEPack: x must be (N, channels={self.channels}, H, W), found {found}"
            )
        compressed_x = self.channel_compressor(x)
        mask = self.content_encoder(compressed_x)
        mask = self.kernel_normalizer(mask)
        return self.feature_reassemble(x, mask)
