"""mmcv's correlation (:mod:`mmpar.compat.ops.correlation`) as batched matrix products.

For each patch row, kernel tap and chunk of output rows, the outputs' columns are taken in
tiles of about the patch's width: one batched matrix product of a tile of input1
``(tile, C)`` with the columns of input2 it can meet ``(C, span)`` gives every product the
tile's ``P`` horizontal displacements need, and a gather picks them (the products beyond
the patch are a small multiple of those needed; a BLAS product is far faster than the
elementwise sums). The backward runs the same pieces the other way: the output gradient is
scattered into the tiles' products and multiplied back to both inputs. Reads outside a map
are masked to 0 in both directions.

API: ``CorrelationGeometry`` (the parameters as pairs and the sizes),
``correlation_forward(x1, x2, g) -> (B, P, P, oH, oW)``,
``correlation_backward(grad, x1, x2, g) -> (grad_x1, grad_x2)``; ``CHUNK_ELEMENTS`` bounds
the elements of one piece's tiles.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["CHUNK_ELEMENTS", "CorrelationGeometry", "correlation_backward", "correlation_forward"]

# Elements of the largest tiles of one piece (input1's, input2's and their products).
CHUNK_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class CorrelationGeometry:
    """The parameters as (height, width) pairs, the patch size and the output size."""

    kernel: Tuple[int, int]
    patch: int
    stride: Tuple[int, int]
    padding: Tuple[int, int]
    dilation: Tuple[int, int]
    dilation_patch: Tuple[int, int]
    size: Tuple[int, int]
    out: Tuple[int, int]

    def radius(self, axis: int) -> int:
        return self.dilation_patch[axis] * (self.patch - 1) // 2


def _inside(g: CorrelationGeometry, axis: int, tap: int, shift: Tensor) -> Tensor:
    """Which output positions (first dim) read inside both maps along ``axis`` at kernel
    tap ``tap``, for each displacement ``shift`` (last dim) of ``input2``."""
    pos = torch.arange(g.out[axis]) * g.stride[axis] - g.padding[axis] + tap * g.dilation[axis]
    other = pos[:, None] + shift[None, :]
    size = g.size[axis]
    return ((pos >= 0) & (pos < size))[:, None] & (other >= 0) & (other < size)


@dataclass(frozen=True)
class _Piece:
    """One patch row ``ph``, kernel tap and chunk of output rows ``rows``: where it reads
    padded input1 ``a[:, rows_a, cols_a]`` and padded input2 ``b[:, rows_b, :, left:]``,
    and which reads lie inside both maps (``inside`` ``(rows, oW, P)``, None: all)."""

    ph: int
    rows: slice
    rows_a: slice
    cols_a: slice
    rows_b: slice
    left: int
    inside: Optional[Tensor]


def _pieces(g: CorrelationGeometry, per_row: int) -> Iterator[_Piece]:
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = g.kernel, g.stride, g.dilation, g.out
    step = max(1, CHUNK_ELEMENTS // max(1, per_row))
    pw_shifts = torch.arange(g.patch) * g.dilation_patch[1] - g.radius(1)
    for ph, i, j in itertools.product(range(g.patch), range(kh), range(kw)):
        shift = ph * g.dilation_patch[0]
        row_ok = _inside(g, 0, i, torch.tensor([shift - g.radius(0)]))[:, 0]
        inside = row_ok[:, None, None] & _inside(g, 1, j, pw_shifts)[None]
        cols_a = slice(j * dw, j * dw + (ow - 1) * sw + 1, sw)
        for r0 in range(0, oh, step):
            r1 = min(oh, r0 + step)
            top = i * dh + r0 * sh
            part = inside[r0:r1]
            yield _Piece(
                ph,
                slice(r0, r1),
                slice(top, top + (r1 - r0 - 1) * sh + 1, sh),
                cols_a,
                slice(top + shift, top + shift + (r1 - r0 - 1) * sh + 1, sh),
                j * dw,
                None if bool(part.all()) else part,
            )


class _Tiles:
    """Columns in tiles of ``tile`` outputs: ``a_tiles @ b_tiles`` ``(B, rows, n, tile,
    span)`` holds every product a tile's outputs need, ``band`` ``(tile, P)`` picks them."""

    def __init__(self, g: CorrelationGeometry, device: torch.device) -> None:
        ow, sw, step = g.out[1], g.stride[1], g.dilation_patch[1]
        self.ow, self.tile = ow, max(1, min(ow, max(16, 2 * g.radius(1) + 1)))
        self.count = -(-ow // self.tile)
        self.stride = self.tile * sw
        self.span = (self.tile - 1) * sw + (g.patch - 1) * step + 1
        self.width = (self.count - 1) * self.stride + self.span
        band = torch.arange(self.tile)[:, None] * sw + torch.arange(g.patch)[None, :] * step
        self.band = band.to(device)

    def split(self, x: Tensor) -> Tensor:
        """``(B, rows, oW, X)`` -> ``(B, rows, n, tile, X)``, zero-padded."""
        if self.count * self.tile > self.ow:
            x = F.pad(x, (0, 0, 0, self.count * self.tile - self.ow))
        return x.unflatten(2, (self.count, self.tile))

    def b_tiles(self, cols: Tensor) -> Tensor:
        """``(B, rows, C, width')`` columns from ``left`` -> ``(B, rows, n, C, span)``."""
        if cols.shape[-1] < self.width:
            cols = F.pad(cols, (0, self.width - cols.shape[-1]))
        return cols.unfold(3, self.span, self.stride)[:, :, :, : self.count].transpose(2, 3)

    def band_of(self, full: Tensor) -> Tensor:
        return self.band.expand(full.shape[:3] + self.band.shape)


def _padded(x1: Tensor, x2: Tensor, g: CorrelationGeometry) -> Tuple[Tensor, Tensor]:
    """``a`` ``(B, H', W', C)``: input1 padded; ``b`` ``(B, H'', C, W'')``: input2 padded
    further by the patch radius."""
    (pad_h, pad_w), rad_h, rad_w = g.padding, g.radius(0), g.radius(1)
    a = F.pad(x1, (pad_w, pad_w, pad_h, pad_h)).permute(0, 2, 3, 1).contiguous()
    b = F.pad(x2, (pad_w + rad_w, pad_w + rad_w, pad_h + rad_h, pad_h + rad_h))
    return a, b.permute(0, 2, 1, 3).contiguous()


def _per_row(x: Tensor, tiles: _Tiles) -> int:
    """Elements of one output row's tiles of input1 and input2 and their products."""
    return (
        x.shape[0]
        * tiles.count
        * (x.shape[1] * (tiles.span + tiles.tile) + tiles.tile * tiles.span)
    )


def correlation_forward(x1: Tensor, x2: Tensor, g: CorrelationGeometry) -> Tensor:
    """``(B, P, P, oH, oW)``: the definition, piece by piece."""
    a, b = _padded(x1, x2, g)
    tiles = _Tiles(g, x1.device)
    out = x1.new_zeros((x1.shape[0], g.patch, g.out[0], g.out[1], g.patch))
    for piece in _pieces(g, _per_row(x1, tiles)):
        full = tiles.split(a[:, piece.rows_a, piece.cols_a]) @ tiles.b_tiles(
            b[:, piece.rows_b, :, piece.left :]
        )
        picked = full.gather(4, tiles.band_of(full)).flatten(2, 3)[:, :, : g.out[1]]
        if piece.inside is not None:
            picked = torch.where(piece.inside.to(x1.device), picked, 0.0)
        out[:, piece.ph, piece.rows] += picked
    return out.permute(0, 1, 4, 2, 3)


def correlation_backward(
    grad: Tensor, x1: Tensor, x2: Tensor, g: CorrelationGeometry
) -> Tuple[Tensor, Tensor]:
    """The gradients of :func:`correlation_forward` (mmcv's) for ``input1`` and ``input2``."""
    a, b = _padded(x1, x2, g)
    grad_a, grad_b = torch.zeros_like(a), torch.zeros_like(b)
    tiles = _Tiles(g, x1.device)
    groups = -(-tiles.span // tiles.stride)  # tiles t, t + groups, ... do not overlap
    grad = grad.permute(0, 1, 3, 4, 2)  # (B, P, oH, oW, P)
    for piece in _pieces(g, _per_row(x1, tiles)):
        go = grad[:, piece.ph, piece.rows]
        if piece.inside is not None:
            go = torch.where(piece.inside.to(x1.device), go, 0.0)
        a_tiles = tiles.split(a[:, piece.rows_a, piece.cols_a])
        b_tiles = tiles.b_tiles(b[:, piece.rows_b, :, piece.left :])
        full = a_tiles.new_zeros(a_tiles.shape[:4] + (tiles.span,))
        full.scatter_(4, tiles.band_of(full), tiles.split(go))
        grad_a[:, piece.rows_a, piece.cols_a] += (full @ b_tiles.transpose(-1, -2)).flatten(2, 3)[
            :, :, : g.out[1]
        ]
        to_b = a_tiles.transpose(-1, -2) @ full  # (B, rows, n, C, span)
        target = grad_b[:, piece.rows_b, :, piece.left :]
        width = max(tiles.width, target.shape[-1])
        acc = to_b.new_zeros(to_b.shape[:2] + (to_b.shape[3], width))
        windows = acc.unfold(3, tiles.span, tiles.stride)[:, :, :, : tiles.count]
        for first in range(groups):
            windows[:, :, :, first::groups] += to_b[:, :, first::groups].transpose(2, 3)
        target += acc[..., : target.shape[-1]]
    (pad_h, pad_w), rad_h, rad_w = g.padding, g.radius(0), g.radius(1)
    h, w = g.size
    grad1 = grad_a[:, pad_h : pad_h + h, pad_w : pad_w + w].permute(0, 3, 1, 2)
    top, left = pad_h + rad_h, pad_w + rad_w
    grad2 = grad_b[:, top : top + h, :, left : left + w].permute(0, 2, 1, 3)
    return grad1.contiguous(), grad2.contiguous()
