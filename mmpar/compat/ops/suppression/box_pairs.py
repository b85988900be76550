"""Which axis-aligned rectangles intersect given ones, without comparing every pair.

Not an mmcv module: :mod:`mmpar.compat.ops.suppression.soft_nms_rounds` finds with it the
boxes whose IoU with a box can change a score.

The rectangles are grouped by size (the longer side, in powers of 2). Within a
group they are cut by horizontal strips about as high as the group's median
rectangle (a rectangle is listed once in each strip it crosses) and sorted by
left edge within a strip. A query looks, in each strip it crosses, at the
rectangles that start between its left edge less the group's widest rectangle
and its right edge; a pair met in several strips counts in the first strip the
two share. The work grows with the rectangles near each query, not with the
count.

A few rectangles (up to ``_SWEEP``, as many as an image's detections of one
class) cost less without groups or strips: they are sorted by left edge, and
each block of queries is compared at once with the run of rectangles that start
in its reach (:class:`_Sweep`).
"""

from __future__ import annotations

import math
from typing import Iterator, List, Tuple, Union

import torch
from torch import Tensor

__all__ = ["RectangleIndex"]

#: Candidate pairs generated at once.
_CHUNK = 1 << 20
#: Up to this many rectangles, one sweep (no size groups, no strips) costs less.
_SWEEP = 1024
#: Queries a sweep compares at once with the rectangles in their reach.
_BLOCK = 32


def _size_class(xl: Tensor, yl: Tensor, xr: Tensor, yr: Tensor) -> Tensor:
    side = torch.maximum(xr - xl, yr - yl).clamp(min=1e-30)
    return torch.floor(torch.log2(side)).long()


class _Strips:
    """One size group: rectangles ``ids`` of the index, in strips sorted by left edge."""

    def __init__(self, ids: Tensor, xl: Tensor, yl: Tensor, xr: Tensor, yr: Tensor) -> None:
        n = ids.numel()
        self.ids, self.xl, self.yl, self.xr, self.yr = ids, xl, yl, xr, yr
        self.y0 = yl.min()
        extent = float(yr.max() - self.y0)
        # Strips no lower than the median rectangle, and not more than ~4 sqrt(n) of them.
        self.height = max(
            float((yr - yl).median()), extent / (4 * n**0.5 + 1), 1e-12 * (extent + 1)
        )
        self.first = self.strip(yl)
        span = self.strip(yr) - self.first + 1
        box = torch.repeat_interleave(torch.arange(n), span)
        start = torch.cumsum(span, 0) - span
        strip = self.first.index_select(0, box) + torch.arange(box.numel()) - start[box]
        by_left = torch.argsort(xl, stable=True)
        self.left_sorted = xl.index_select(0, by_left)
        rank = torch.empty_like(by_left)
        rank[by_left] = torch.arange(n)
        self.span = n + 1
        # One sort key: strip, then left edge (as a rank, so the key is an exact integer).
        self.key, perm = torch.sort(strip * self.span + rank.index_select(0, box))
        self.box = box.index_select(0, perm)
        # The entries' edges and first strips, in entry order (the scans read runs of them).
        self.e_xr, self.e_yl, self.e_yr, self.e_first = (
            t.index_select(0, self.box) for t in (xr, yl, yr, self.first)
        )
        self.strips = int(strip.max()) + 1
        self.widest = float((xr - xl).max())

    def strip(self, y: Tensor) -> Tensor:
        """The strip of each ``y``: -1 above the first, clipped below the last."""
        last = float(getattr(self, "strips", 1 << 40))
        return torch.floor((y - self.y0) / self.height).clamp(min=-1, max=last).long()

    def ranges(
        self, qxl: Tensor, qyl: Tensor, qxr: Tensor, qyr: Tensor
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Per (query, strip it crosses): ``(k, strip, first, lo, counts)``.

        The query's position ``k``, the strip, the query's first strip, and the run
        ``lo .. lo + counts`` of sorted entries it is compared with: the rectangles
        of the strip that start in ``[xl - widest, xr]``.
        """
        first = self.strip(qyl).clamp(min=0)
        last = self.strip(qyr).clamp(max=self.strips - 1)
        span = (last - first + 1).clamp(min=0)
        k = torch.repeat_interleave(torch.arange(qxl.numel()), span)
        start = torch.cumsum(span, 0) - span
        strip = torch.repeat_interleave(first - start, span) + torch.arange(k.numel())
        lo_rank = torch.searchsorted(self.left_sorted, qxl.index_select(0, k) - self.widest)
        hi_rank = torch.searchsorted(self.left_sorted, qxr.index_select(0, k), right=True)
        lo = torch.searchsorted(self.key, strip * self.span + lo_rank)
        counts = torch.searchsorted(self.key, strip * self.span + hi_rank) - lo
        return k, strip, first, lo, counts

    def intersecting(
        self, qxl: Tensor, qyl: Tensor, qxr: Tensor, qyr: Tensor
    ) -> Tuple[Tensor, Tensor]:
        """``(k, r)``: query ``k`` (a position in the query tensors) meets rectangle ``ids[r]``."""
        k, strip, first, lo, counts = self.ranges(qxl, qyl, qxr, qyr)
        # Per (query, strip): the query's left edge, vertical extent and first strip.
        qx, qy0, qy1, qf = (t.index_select(0, k) for t in (qxl, qyl, qyr, first))
        found_k: List[Tensor] = [k[:0]]
        found_r: List[Tensor] = [k[:0]]
        bounds = torch.cumsum(counts, 0)
        e0 = 0
        while e0 < counts.numel():
            e1 = int(torch.searchsorted(bounds, bounds[e0] - counts[e0] + _CHUNK, right=True))
            e1 = max(e1, e0 + 1)
            c = counts[e0:e1]
            # Each candidate's (query, strip) entry, then its sorted entry ``at``.
            owner = torch.repeat_interleave(torch.arange(e1 - e0), c)
            start = lo[e0:e1] - (torch.cumsum(c, 0) - c)
            at = torch.arange(owner.numel()) + start.index_select(0, owner)
            owner += e0
            keep = self.e_xr.index_select(0, at) >= qx.index_select(0, owner)
            keep &= self.e_yl.index_select(0, at) <= qy1.index_select(0, owner)
            keep &= qy0.index_select(0, owner) <= self.e_yr.index_select(0, at)
            # Counted in the first strip both cross.
            both = torch.maximum(self.e_first.index_select(0, at), qf.index_select(0, owner))
            keep &= strip.index_select(0, owner) == both
            pick = torch.nonzero(keep).squeeze(1)
            found_k.append(k.index_select(0, owner.index_select(0, pick)))
            found_r.append(self.box.index_select(0, at.index_select(0, pick)))
            e0 = e1
        if len(found_k) == 2:  # one chunk: no copy
            return found_k[1], found_r[1]
        return torch.cat(found_k), torch.cat(found_r)


class _Sweep:
    """All the rectangles ``ids`` of a small index, sorted by left edge.

    A block of :data:`_BLOCK` queries (sorted by left edge too) meets only the
    rectangles that start between its first left edge less the widest rectangle
    and its last right edge: one run of the sorted rectangles, compared with
    every query of the block at once.
    """

    def __init__(self, ids: Tensor, xl: Tensor, yl: Tensor, xr: Tensor, yr: Tensor) -> None:
        order = torch.argsort(xl, stable=True)
        self.ids = ids.index_select(0, order)
        self.edges = torch.stack((xl, yl, xr, yr)).index_select(1, order)  # (4, n)
        self.widest = float((xr - xl).max())

    def intersecting(
        self, qxl: Tensor, qyl: Tensor, qxr: Tensor, qyr: Tensor
    ) -> Tuple[Tensor, Tensor]:
        """``(k, r)``: query ``k`` (a position in the query tensors) meets rectangle ``ids[r]``."""
        n_q = qxl.numel()
        by_left = torch.argsort(qxl, stable=True)
        blocks = -(-n_q // _BLOCK)
        # Queries in blocks of the same size: the last one repeated, then masked off.
        fill = torch.arange(blocks * _BLOCK).clamp(max=n_q - 1)
        slot = by_left.index_select(0, fill)
        q = torch.stack((qxl, qyl, qxr, qyr)).index_select(1, slot).view(4, blocks, _BLOCK)
        left = self.edges[0]
        lo = torch.searchsorted(left, q[0, :, 0] - self.widest)
        hi = torch.searchsorted(left, q[2].amax(1), right=True)
        run = (hi - lo).clamp(min=0)
        width = int(run.max())
        at = (lo[:, None] + torch.arange(width)).clamp(max=left.numel() - 1)  # (blocks, width)
        e = self.edges.index_select(1, at.view(-1)).view(4, blocks, 1, width)
        qe = q[..., None]  # (4, blocks, _BLOCK, 1)
        meet = (e[2] >= qe[0]) & (e[0] <= qe[2]) & (e[3] >= qe[1]) & (e[1] <= qe[3])
        meet &= (torch.arange(width) < run[:, None])[:, None, :]
        meet &= (torch.arange(blocks * _BLOCK) < n_q).view(blocks, _BLOCK, 1)
        block, row, col = torch.nonzero(meet).unbind(1)
        k = slot.index_select(0, block * _BLOCK + row)
        return k, at.view(-1).index_select(0, block * width + col)


class RectangleIndex:
    """Closed rectangles ``[xl, xr] x [yl, yr]``, indexed for :meth:`intersecting`.

    Args:
        xl, yl, xr, yr: ``(n,)`` finite float64 edges, ``xl <= xr``, ``yl <= yr``.
    """

    def __init__(self, xl: Tensor, yl: Tensor, xr: Tensor, yr: Tensor) -> None:
        self.xl, self.yl, self.xr, self.yr = xl, yl, xr, yr
        self.size = _size_class(xl, yl, xr, yr)
        self.groups: List[Tuple[int, Union[_Strips, _Sweep]]] = []
        if 0 < xl.numel() <= _SWEEP:
            self.sweep = _Sweep(torch.arange(xl.numel()), xl, yl, xr, yr)
            return
        self.sweep = None
        for c in torch.unique(self.size).tolist():
            ids = torch.nonzero(self.size == c).squeeze(1)
            edges = (t.index_select(0, ids) for t in (xl, yl, xr, yr))
            self.groups.append((c, _Strips(ids, *edges)))

    def _near_groups(
        self, query: Tensor, size_ratio: float
    ) -> Iterator[Tuple[Union[_Strips, _Sweep], Tensor, List[Tensor]]]:
        """Each size group, with the queries that may meet it: positions, edges."""
        edges = [t.index_select(0, query) for t in (self.xl, self.yl, self.xr, self.yr)]
        if self.sweep is not None:  # one group: all the queries, whatever their size
            yield self.sweep, torch.arange(query.numel()), edges
            return
        size = self.size.index_select(0, query)
        reach = 1 << 40 if size_ratio <= 0 else math.ceil(math.log2(1 / size_ratio)) + 1
        for c, group in self.groups:
            near = torch.nonzero((size - c).abs() <= reach).squeeze(1)
            if near.numel():
                yield group, near, [t.index_select(0, near) for t in edges]

    def intersecting(self, query: Tensor, size_ratio: float = 0.0) -> Tuple[Tensor, Tensor]:
        """The pairs ``(q, r)``, ``q`` in ``query``, ``r != q``, of rectangles that intersect.

        Args:
            query: ``(Q,)`` long indices of distinct rectangles.
            size_ratio: Skip the pairs whose longer sides differ by more than this
                factor's inverse (0: none), by their size groups (powers of 2).

        Returns:
            ``(q, r)``: ``(P,)`` long each; every intersecting pair once per query
            (a superset of them with ``size_ratio``).
        """
        found_q, found_r = [query.new_zeros(0)], [query.new_zeros(0)]
        if query.numel() == 0:
            return found_q[0], found_r[0]
        for group, near, edges in self._near_groups(query, size_ratio):
            k, r = group.intersecting(*edges)
            q, r = query.index_select(0, near.index_select(0, k)), group.ids.index_select(0, r)
            pick = torch.nonzero(q != r).squeeze(1)
            found_q.append(q.index_select(0, pick))
            found_r.append(r.index_select(0, pick))
        return torch.cat(found_q), torch.cat(found_r)
