"""The rulebook of a sparse convolution: per kernel offset, its (input row, output row) pairs.

Definition (mmcv 1.7.2's ``getValidOutPos`` / ``getValidOutPosTranspose`` and the
``getIndicePairs*`` kernels): for a kernel offset ``k`` (a ``D``-vector), input site
``x`` and output site ``o`` of the same batch element pair when

* convolution: ``x = o * stride - padding + k * dilation``, ``o`` inside the output
  shape; the output sites are all such ``o`` of all inputs;
* transposed convolution: ``o = x * stride - padding + k * dilation``, ``o`` inside
  the output shape; the output sites likewise;
* submanifold convolution (``subm``): as the convolution with stride 1 and padding
  ``kernel_size // 2`` (whatever stride and padding were given, as mmcv's kernels),
  and the output sites are the input sites.

Offsets are numbered in row-major order of the kernel (the last dimension fastest).
The sites are found without a dense grid: candidate output sites become integer
keys (int32 when ``(batch_size + 2) * volume`` fits, else int64), built axis by axis
(the kernel is a product of its axes). A convolution's output sites are their
``unique`` (sorted, as mmcv's CUDA kernel numbers them; its CPU kernel numbers them
in order of discovery). A submanifold convolution finds its outputs among the
inputs' sorted keys: one ``searchsorted`` per run of offsets along the last axis
(a run's keys are consecutive integers, so the ones present sit at consecutive
positions), and, for an odd undilated kernel, only for the offsets before the
centre: offset ``K - 1 - k`` pairs as offset ``k`` reversed. Pairs come grouped by
offset; within an offset, in input order (SubM: in the sorted order of the sites;
mmcv's CUDA kernel gives no order either).

Duplicate input sites (mmcv does not define them): a convolution sums every input
row into the output site; a submanifold convolution pairs every input row with the
last row of each neighbouring site, as mmcv's grid (last write wins), and each row
with itself for the centre offset, as mmcv's full matmul for the centre.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.sparse.coords import keys_to_sites, site_keys

__all__ = ["ConvGeometry", "Rulebook", "build", "geometry"]


@dataclass
class ConvGeometry:
    """A convolution's kernel and grid; all lists have one int per spatial dimension."""

    kernel_size: List[int]
    stride: List[int]
    padding: List[int]
    dilation: List[int]
    out_shape: List[int]
    subm: bool = False
    transpose: bool = False

    def effective(self) -> "ConvGeometry":
        """The geometry the kernels use: SubM forces stride 1 and padding ``k // 2``."""
        if not self.subm:
            return self
        pad = [k // 2 for k in self.kernel_size]
        ones = [1] * len(pad)
        return ConvGeometry(self.kernel_size, ones, pad, self.dilation, self.out_shape, True)

    def centre(self) -> int:
        """SubM's identity offset (``k * dilation == kernel_size // 2``), or -1 if none."""
        index = 0
        for k, d in zip(self.kernel_size, self.dilation):
            if (k // 2) % d:
                return -1
            index = index * k + (k // 2) // d
        return index


@dataclass
class Rulebook:
    """Compact pairs: ``in_rows`` / ``out_rows`` ``(P,)`` int64, grouped by offset.

    ``counts[k]`` pairs belong to offset ``k``; ``identity`` is an offset whose pairs
    are ``(r, r)`` for every row, done as one matmul (SubM's centre), or -1.
    """

    in_rows: Tensor
    out_rows: Tensor
    counts: List[int]
    num_in: int
    num_out: int
    identity: int = -1
    starts: List[int] = field(init=False)

    def __post_init__(self) -> None:
        self.starts = [0]
        for n in self.counts:
            self.starts.append(self.starts[-1] + n)

    def pairs(self, k: int) -> Tuple[Tensor, Tensor]:
        """Offset ``k``'s ``(in_rows, out_rows)``."""
        s, e = self.starts[k], self.starts[k + 1]
        return self.in_rows[s:e], self.out_rows[s:e]

    def swapped(self) -> "Rulebook":
        """The rulebook with inputs and outputs exchanged (an inverse convolution)."""
        return Rulebook(self.out_rows, self.in_rows, self.counts, self.num_out, self.num_in)


def _axis(x: Tensor, d: int, geo: ConvGeometry) -> Tuple[Tensor, Tensor]:
    """``(k_d, N)`` output coordinates along axis ``d`` of each input coordinate ``x``
    ``(N,)`` for each kernel index along that axis, and whether each is one."""
    t = torch.arange(geo.kernel_size[d], dtype=x.dtype, device=x.device)[:, None]
    t = t * geo.dilation[d]
    s, p, size = geo.stride[d], geo.padding[d], geo.out_shape[d]
    if geo.transpose:
        out = x[None] * s - p + t
        return out, (out >= 0) & (out < size)
    num = x[None] + p - t
    if s == 1:
        return num, (num >= 0) & (num < size)
    out = torch.div(num, s, rounding_mode="floor")
    return out, (out >= 0) & (out < size) & (out * s == num)


def _candidates(sites: Tensor, geo: ConvGeometry, run_start: bool) -> Tuple[Tensor, Tensor]:
    """``(K, N)`` keys of the output sites that each offset pairs with each input
    (built axis by axis: the kernel is a product of its axes), and ``(K, N)`` bool,
    whether that output site exists (inside the output shape, an integer site).

    With ``run_start``, the keys only of the last kernel index of the last axis,
    ``(K / k_last, N)``: the lowest key of each run along the last axis (stride 1).
    """
    n = sites.shape[0]
    volume = _volume(geo.out_shape)
    keys = (sites[:, 0] * volume)[None]
    valid = torch.ones_like(keys, dtype=torch.bool)
    row = volume
    last = len(geo.out_shape) - 1
    for d in range(last + 1):
        row //= geo.out_shape[d]
        out, ok = _axis(sites[:, d + 1], d, geo)
        if d == last and run_start:
            out = out[-1:]
        keys = (keys[:, None, :] + (out * row)[None]).reshape(-1, n)
        valid = (valid[:, None, :] & ok[None]).reshape(-1, n)
    return keys, valid


def _find_walk(sorted_keys: Tensor, low: Tensor, run: int) -> Tuple[Tensor, Tensor]:
    """:func:`_find` for unique ``sorted_keys`` and the runs ``low + run - 1, ...,
    low + 1, low`` of each ``(R, N)`` start ``low``: one search per run, then a walk
    (the keys of a run that exist are at consecutive positions). ``(R * run, N)``."""
    r, n = low.shape
    at = torch.searchsorted(sorted_keys, low, out_int32=True)
    pos = at.new_empty(r, run, n)
    hit = torch.empty(r, run, n, dtype=torch.bool, device=low.device)
    last = sorted_keys.shape[0] - 1
    for step in range(run):
        here = at.clamp_(max=last) if step == 0 else at.clamp(max=last)
        found = sorted_keys.index_select(0, here.view(-1)).view(r, n) == low + step
        pos[:, run - 1 - step] = here
        hit[:, run - 1 - step] = found
        at = at + found
    return pos.view(-1, n), hit.view(-1, n)


def _find(sorted_keys: Tensor, keys: Tensor) -> Tuple[Tensor, Tensor]:
    """Positions in ``sorted_keys`` of ``keys`` (the last of equal ones), and whether
    each is there."""
    pos = torch.searchsorted(sorted_keys, keys, right=True, out_int32=True)
    pos = pos.sub_(1).clamp_(min=0)
    return pos, sorted_keys.index_select(0, pos.view(-1)).view_as(pos) == keys


def _select(valid: Tensor, values: Tensor) -> Tuple[Tensor, Tensor]:
    """``(columns, values)`` at the true entries of ``valid`` ``(K, N)``, row-major."""
    flat = valid.view(-1).nonzero().view(-1)
    return flat % valid.shape[1], values.reshape(-1).index_select(0, flat)


def _counts(valid: Tensor) -> List[int]:
    return valid.sum(1).tolist()


def _mirrored(rows_in: Tensor, rows_out: Tensor, counts: List[int], n: int) -> Rulebook:
    """The SubM rulebook from the pairs of the offsets below the centre: the centre
    is the identity, offset ``K - 1 - k`` has offset ``k``'s pairs reversed (an odd,
    undilated kernel is symmetric)."""
    ins, outs = rows_in.split(counts), rows_out.split(counts)
    ident = torch.arange(n, device=rows_in.device)
    book_in = torch.cat([*ins, ident, *outs[::-1]])
    book_out = torch.cat([*outs, ident, *ins[::-1]])
    return Rulebook(book_in, book_out, counts + [n] + counts[::-1], n, n, len(counts))


def _build_subm(sites: Tensor, geo: ConvGeometry) -> Tuple[Tensor, Rulebook]:
    n = sites.shape[0]
    sorted_keys, order = torch.sort(site_keys(sites, geo.out_shape), stable=True)
    unique = n < 2 or not bool((sorted_keys[1:] == sorted_keys[:-1]).any())
    walk = unique and geo.dilation[-1] == 1
    # Queries in key order: the searches walk the sorted keys in step.
    keys, valid = _candidates(sites.index_select(0, order), geo, walk)
    centre, run = geo.centre(), geo.kernel_size[-1]
    if walk and max(geo.dilation) == 1 and all(k % 2 for k in geo.kernel_size):
        pos, hit = _find_walk(sorted_keys, keys[: centre // run + 1], run)
        below = valid[:centre] & hit[:centre]
        cols, found = _select(below, pos[:centre])
        rows_in, rows_out = order.index_select(0, cols), order.index_select(0, found)
        return sites.to(torch.int32), _mirrored(rows_in, rows_out, _counts(below), n)
    if walk:
        pos, hit = _find_walk(sorted_keys, keys, run)
    else:  # mmcv's grid keeps the last row written at a site
        pos, hit = _find(sorted_keys, keys)
    valid &= hit
    if centre >= 0:
        valid[centre] = True
        pos[centre] = torch.arange(n, dtype=pos.dtype, device=sites.device)
    cols, found = _select(valid, pos)
    rows_in, rows_out = order.index_select(0, cols), order.index_select(0, found)
    return sites.to(torch.int32), Rulebook(rows_in, rows_out, _counts(valid), n, n, centre)


def _build_conv(sites: Tensor, geo: ConvGeometry) -> Tuple[Tensor, Rulebook]:
    keys, valid = _candidates(sites, geo, False)
    cols, found = _select(valid, keys)
    out_keys, rows_out = torch.unique(found, sorted=True, return_inverse=True)
    book = Rulebook(cols, rows_out, _counts(valid), sites.shape[0], out_keys.shape[0])
    return keys_to_sites(out_keys, geo.out_shape), book


def _volume(shape: Sequence[int]) -> int:
    volume = 1
    for size in shape:
        volume *= size
    return volume


def build(sites: Tensor, geo: ConvGeometry, batch_size: int) -> Tuple[Tensor, Rulebook]:
    """The output sites and the rulebook of a convolution over ``sites``.

    Args:
        sites: ``(N, D + 1)`` int ``(batch, *coords)``, checked to lie in the grid.
        geo: The convolution (as given: SubM's stride and padding are replaced here).
        batch_size: The number of batch elements (keys are int32 when they fit).

    Returns:
        ``(outids, rulebook)``: ``outids`` ``(M, D + 1)`` int32 output sites (the
        inputs for SubM), and the pairs.
    """
    geo = geo.effective()
    if sites.shape[0] == 0:
        empty = sites.new_zeros(0, dtype=torch.long)
        k = _volume(geo.kernel_size)
        return sites.to(torch.int32), Rulebook(empty, empty, [0] * k, 0, 0, -1)
    # Candidate keys reach one grid beyond the batch either way (outside sites).
    span = (batch_size + 2) * _volume(geo.out_shape) + _volume(geo.kernel_size)
    sites = sites.to(torch.int32 if span < 2**31 else torch.int64)
    if geo.subm:
        return _build_subm(sites, geo)
    return _build_conv(sites, geo)


def geometry(
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    out_shape: Sequence[int],
    subm: bool,
    transpose: bool,
) -> ConvGeometry:
    """A :class:`ConvGeometry` of lists."""
    return ConvGeometry(
        list(kernel_size),
        list(stride),
        list(padding),
        list(dilation),
        list(out_shape),
        bool(subm),
        bool(transpose),
    )
