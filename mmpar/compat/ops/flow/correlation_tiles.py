"""mmcv's correlation (:mod:`mmpar.compat.ops.correlation`) as batched matrix products.

For each kernel tap and chunk of output rows, the outputs' columns are taken in tiles of
about the patch's width: one batched matrix product of a tile of input1 ``(tile, C)`` with
the columns of input2 it can meet ``(C, span)``, for the ``P`` rows of input2 the patch
reads, gives every product the tile's ``P x P`` displacements need, and a gather picks
them (the products beyond the patch are a small multiple of those needed; a BLAS product
is far faster than elementwise sums). The backward runs the same pieces the other way:
the output gradient is scattered into the tiles' products and multiplied back to both
inputs. Reads outside a map are masked to 0 in both directions.

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


class _Tiles:
    """Columns in tiles of ``tile`` outputs: ``b_tiles @ a_tiles^T`` ``(B, rows, n, P *
    span, tile)`` holds every product a tile's outputs need (for each of the ``P`` rows of
    input2 their patch reads, ``span`` columns), ``band`` picks them."""

    def __init__(self, g: CorrelationGeometry, device: torch.device) -> None:
        ow, sw, step = g.out[1], g.stride[1], g.dilation_patch[1]
        self.ow, self.tile, self.patch = ow, max(1, min(ow, max(16, 2 * g.radius(1) + 1))), g.patch
        self.count = -(-ow // self.tile)
        self.stride = self.tile * sw
        self.span = (self.tile - 1) * sw + (g.patch - 1) * step + 1
        self.width = (self.count - 1) * self.stride + self.span
        band = torch.arange(g.patch)[:, None] * step + torch.arange(self.tile)[None, :] * sw
        self.band = band.expand(g.patch, -1, -1).to(device)  # (P, P, tile): [ph, pw, t]
        self.rows = (g.dilation_patch[0], g.stride[0])

    def a_tiles(self, a: Tensor) -> Tensor:
        """``(B, rows, n * tile, C)`` -> ``(B, rows, n, tile, C)``."""
        return a.unflatten(2, (self.count, self.tile))

    def b_tiles(self, b: Tensor, top: int, rows: int, left: int) -> Tensor:
        """``(B, rows, n, P * span, C)``: for each output row, the columns of padded input2
        ``b`` ``(B, H'', W'', C)`` its tiles meet in the ``P`` rows its patch reads."""
        step, stride = self.rows
        windows = b[:, top:].unfold(1, (self.patch - 1) * step + 1, stride)[:, :rows, ..., ::step]
        cols = windows[:, :, left:]  # (B, rows, W'' - left, C, P)
        tiles = cols.unfold(2, self.span, self.stride)[:, :, : self.count]
        # (B, rows, n, C, P, span) -> (B, rows, n, P * span, C)
        return tiles.permute(0, 1, 2, 4, 5, 3).flatten(3, 4)

    def band_of(self, full: Tensor) -> Tensor:
        return self.band.expand(full.shape[:3] + self.band.shape)

    def outputs(self, picked: Tensor) -> Tensor:
        """``(B, rows, n, P, P, tile)`` -> ``(B, rows, P, P, oW)``."""
        return picked.permute(0, 1, 3, 4, 2, 5).flatten(4)[..., : self.ow]

    def grad_tiles(self, go: Tensor) -> Tensor:
        """``(B, rows, P, P, oW)`` -> ``(B, rows, n, P, P, tile)``, zero-padded."""
        if self.count * self.tile > self.ow:
            go = F.pad(go, (0, self.count * self.tile - self.ow))
        return go.unflatten(4, (self.count, self.tile)).permute(0, 1, 4, 2, 3, 5)


@dataclass(frozen=True)
class _Piece:
    """One kernel tap and chunk of output rows ``rows``: where it reads padded input1
    ``a[:, rows_a, cols_a]`` and padded input2 from row ``top_b`` and column ``left``,
    and which reads lie inside both maps (``inside`` ``(rows, P, P, oW)``, None: all)."""

    rows: slice
    rows_a: slice
    cols_a: slice
    top_b: int
    left: int
    inside: Optional[Tensor]


def _pieces(g: CorrelationGeometry, tiles: _Tiles, per_row: int) -> Iterator[_Piece]:
    (kh, kw), (sh, sw), (dh, dw), oh = g.kernel, g.stride, g.dilation, g.out[0]
    step = max(1, CHUNK_ELEMENTS // max(1, per_row))
    shifts = [torch.arange(g.patch) * g.dilation_patch[axis] - g.radius(axis) for axis in (0, 1)]
    for i, j in itertools.product(range(kh), range(kw)):
        rows_ok = _inside(g, 0, i, shifts[0])  # (oH, P)
        inside = rows_ok[:, :, None, None] & _inside(g, 1, j, shifts[1]).T[None, None]
        cols_a = slice(j * dw, j * dw + (tiles.count * tiles.tile - 1) * sw + 1, sw)
        for r0 in range(0, oh, step):
            r1 = min(oh, r0 + step)
            top = i * dh + r0 * sh
            part = inside[r0:r1]
            rows_a = slice(top, top + (r1 - r0 - 1) * sh + 1, sh)
            full = bool(part.all())
            yield _Piece(slice(r0, r1), rows_a, cols_a, top, j * dw, None if full else part)


def _padded(x1: Tensor, x2: Tensor, g: CorrelationGeometry, tiles: _Tiles) -> Tuple[Tensor, Tensor]:
    """``a`` ``(B, H', W', C)``: input1 padded; ``b`` ``(B, H'', W'', C)``: input2 padded
    further by the patch radius; both with zero columns on the right for the last tile."""
    (pad_h, pad_w), rad_h, rad_w = g.padding, g.radius(0), g.radius(1)
    last = (g.kernel[1] - 1) * g.dilation[1]  # the last tap's first column
    end_a = last + (tiles.count * tiles.tile - 1) * g.stride[1] + 1
    extra_a = max(0, end_a - x1.shape[3] - 2 * pad_w)
    extra_b = max(0, last + tiles.width - x2.shape[3] - 2 * (pad_w + rad_w))
    a = F.pad(x1, (pad_w, pad_w + extra_a, pad_h, pad_h))
    b = F.pad(x2, (pad_w + rad_w, pad_w + rad_w + extra_b, pad_h + rad_h, pad_h + rad_h))
    return a.permute(0, 2, 3, 1).contiguous(), b.permute(0, 2, 3, 1).contiguous()


def _per_row(x: Tensor, g: CorrelationGeometry, tiles: _Tiles) -> int:
    """Elements of one output row's tiles of input1 and input2 and their products."""
    c, p, span, tile = x.shape[1], g.patch, tiles.span, tiles.tile
    return x.shape[0] * tiles.count * (p * span * (c + tile) + tile * c)


def correlation_forward(x1: Tensor, x2: Tensor, g: CorrelationGeometry) -> Tensor:
    """``(B, P, P, oH, oW)``: the definition, one kernel tap and chunk of rows at a time."""
    tiles = _Tiles(g, x1.device)
    a, b = _padded(x1, x2, g, tiles)
    out = x1.new_zeros((x1.shape[0], g.out[0], g.patch, g.patch, g.out[1]))
    for piece in _pieces(g, tiles, _per_row(x1, g, tiles)):
        rows = piece.rows.stop - piece.rows.start
        b_tiles = tiles.b_tiles(b, piece.top_b, rows, piece.left)
        full = b_tiles @ tiles.a_tiles(a[:, piece.rows_a, piece.cols_a]).transpose(-1, -2)
        full = full.unflatten(3, (g.patch, tiles.span))  # (B, rows, n, P, span, tile)
        picked = tiles.outputs(full.gather(4, tiles.band_of(full)))
        if piece.inside is not None:
            picked = torch.where(piece.inside.to(x1.device), picked, 0.0)
        out[:, piece.rows] += picked
    return out.permute(0, 2, 3, 1, 4)


def _to_b(to_b: Tensor, tiles: _Tiles) -> Tensor:
    """The tiles' gradients ``(B, rows, n, P * span, C)`` added up by column: ``(B, rows,
    P, width, C)`` from ``left``."""
    to_b = to_b.unflatten(3, (tiles.patch, tiles.span)).permute(0, 1, 3, 2, 5, 4)
    acc = to_b.new_zeros(to_b.shape[:3] + (tiles.width, to_b.shape[4]))
    windows = acc.unfold(3, tiles.span, tiles.stride)[:, :, :, : tiles.count]
    groups = -(-tiles.span // tiles.stride)  # tiles t, t + groups, ... do not overlap
    for first in range(groups):
        windows[:, :, :, first::groups] += to_b[:, :, :, first::groups]
    return acc


def correlation_backward(
    grad: Tensor, x1: Tensor, x2: Tensor, g: CorrelationGeometry
) -> Tuple[Tensor, Tensor]:
    """The gradients of :func:`correlation_forward` (mmcv's) for ``input1`` and ``input2``."""
    tiles = _Tiles(g, x1.device)
    a, b = _padded(x1, x2, g, tiles)
    grad_a, grad_b = torch.zeros_like(a), torch.zeros_like(b)
    grad = grad.permute(0, 3, 1, 2, 4)  # (B, oH, P, P, oW)
    step, sh = tiles.rows
    for piece in _pieces(g, tiles, _per_row(x1, g, tiles)):
        rows = piece.rows.stop - piece.rows.start
        go = grad[:, piece.rows]
        if piece.inside is not None:
            go = torch.where(piece.inside.to(x1.device), go, 0.0)
        a_tiles = tiles.a_tiles(a[:, piece.rows_a, piece.cols_a])
        b_tiles = tiles.b_tiles(b, piece.top_b, rows, piece.left)
        full = go.new_zeros(a_tiles.shape[:3] + (g.patch, tiles.span, tiles.tile))
        full = full.scatter_(4, tiles.band_of(full), tiles.grad_tiles(go)).flatten(3, 4)
        to_a = (full.transpose(-1, -2) @ b_tiles).flatten(2, 3)
        grad_a[:, piece.rows_a, piece.cols_a] += to_a
        to_b = _to_b(full @ a_tiles, tiles)
        # Row of padded input2 read by output row r at patch row ph: top + r * sh + ph * step.
        index = torch.arange(rows)[:, None] * sh + torch.arange(g.patch)[None, :] * step
        target = grad_b[:, :, piece.left : piece.left + tiles.width]
        target.index_add_(1, (index.flatten() + piece.top_b).to(x1.device), to_b.flatten(1, 2))
    (pad_h, pad_w), rad_h, rad_w = g.padding, g.radius(0), g.radius(1)
    h, w = g.size
    grad1 = grad_a[:, pad_h : pad_h + h, pad_w : pad_w + w].permute(0, 3, 1, 2)
    top, left = pad_h + rad_h, pad_w + rad_w
    grad2 = grad_b[:, top : top + h, left : left + w].permute(0, 3, 1, 2)
    return grad1.contiguous(), grad2.contiguous()
