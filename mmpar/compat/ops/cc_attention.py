"""Criss-cross attention (CCNet), as ``mmcv.ops.cc_attention``.

mmcv 1.7.2's module is itself plain torch; this one computes the same
(einsums over each position's column and row, the position itself counted
once), with mmcv's parameter names, so checkpoints load unchanged. As in mmcv, a
NaN reaches, through the softmax, every position of its row and column. A map
with no rows or no columns is returned as it is (its context is empty).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mmpar.compat.ops.backend import check_int

__all__ = ["NEG_INF_DIAG", "CrissCrossAttention"]


def NEG_INF_DIAG(n: int, device: torch.device) -> Tensor:
    """(n, n) float32: -inf on the diagonal, 0 elsewhere.

    Added to the column energies so that a position's attention to itself
    is counted once (in the row part) rather than twice.
    """
    return torch.diag(torch.full((n,), float("-inf"), device=device))


class _Scale(nn.Module):
    """A learnable scalar factor (mmcv.cnn's ``Scale``: parameter ``scale``)."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(scale, dtype=torch.float))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.scale


class CrissCrossAttention(nn.Module):
    """Criss-Cross Attention (https://arxiv.org/abs/1811.11721), as mmcv's module.

    Each position attends to every position in its row and its column (itself
    once), with a softmax over those H + W - 1 energies; the result, scaled by
    the learnable ``gamma`` (initially 0), is added to the input.

    Args:
        in_channels: Channels of the input, at least 8; query and key have
            ``in_channels // 8``.

    Raises:
        TypeError: ``in_channels`` is not an int.
        ValueError: ``in_channels`` is below 8.
    """

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        # Below 8 the query and key convs have no channels, and nn.Conv2d fails in forward.
        check_int("mmcv.ops.CrissCrossAttention", "in_channels", in_channels, 8)
        self.query_conv = nn.Conv2d(in_channels, in_channels // 8, 1)
        self.key_conv = nn.Conv2d(in_channels, in_channels // 8, 1)
        self.value_conv = nn.Conv2d(in_channels, in_channels, 1)
        self.gamma = _Scale(0.0)
        self.in_channels = in_channels

    def forward(self, x: Tensor) -> Tensor:
        """Adds the criss-cross context to every position.

        Args:
            x: (B, in_channels, H, W) float.

        Returns:
            (B, in_channels, H, W), contiguous.

        Raises:
            TypeError: ``x`` is not floating point.
            ValueError: ``x`` is not (B, in_channels, H, W).
        """
        op = "mmcv.ops.CrissCrossAttention"
        if not isinstance(x, Tensor) or not x.is_floating_point():
            found = x.dtype if isinstance(x, Tensor) else type(x).__name__
            raise TypeError(f"{op}: x must be a floating-point tensor, found {found}")
        if x.dim() != 4 or x.size(1) != self.in_channels:
            raise ValueError(
                f"{op}: x must be (B, C, H, W) with C = in_channels = {self.in_channels}, "
                f"found shape {tuple(x.shape)}"
            )
        if x.shape[2] == 0 or x.shape[3] == 0:
            return x.clone(memory_format=torch.contiguous_format)
        height = x.shape[2]
        query = self.query_conv(x)
        key = self.key_conv(x)
        value = self.value_conv(x)
        # Column energies (b, h, w, i): query at (h, w) against key at (i, w), minus
        # the position itself, which the row energies (b, h, w, j) already hold.
        column = torch.einsum("bchw,bciw->bhwi", query, key)
        column = column + NEG_INF_DIAG(height, query.device).to(column.dtype)[:, None, :]
        row = torch.einsum("bchw,bchj->bhwj", query, key)
        attn = F.softmax(torch.cat([column, row], dim=-1), dim=-1)
        out = torch.einsum("bciw,bhwi->bchw", value, attn[..., :height])
        out = out + torch.einsum("bchj,bhwj->bchw", value, attn[..., height:])
        return (self.gamma(out) + x).contiguous()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(in_channels={self.in_channels})"
