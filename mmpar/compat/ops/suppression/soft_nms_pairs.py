"""Soft-NMS's overlapping pairs, found box by box as the boxes reach the top of the scores.

Not an mmcv module: :mod:`mmpar.compat.ops.suppression.soft_nms_rounds` decides mmcv's
soft-NMS steps in rounds over these pairs. A pair ``(src, dst)`` matters when
``src``, taken, multiplies the score of ``dst`` by a weight other than 1: IoU above
0, and at least ``iou_threshold`` for ``linear`` and ``naive``. Most boxes of a
dense cluster are dropped before they are taken, so the pairs of a box are found
only when it nears the top, to the boxes still undecided then (the index holds
only those once most are decided), and the store keeps them in one run per box.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.suppression.box_pairs import RectangleIndex
from mmpar.compat.ops.suppression.soft_nms_kernel import SoftNMSParams, pair_iou

__all__ = ["PairStore", "crowding"]


#: Cells per side of the grid :func:`crowding` counts in.
_GRID = 64


def crowding(cx: Tensor, cy: Tensor, hx: Tensor, hy: Tensor) -> Tensor:
    """``(n,)`` how many of the boxes have their centre near each one's: a guess of its pairs.

    Near: within twice its half-sides ``hx``, ``hy`` of its centre ``cx``, ``cy``
    (``(n,)`` float64 each), counted in the cells of a grid that cover that.
    """
    cells = []
    for c, h in ((cy, hy), (cx, hx)):
        lo, step = c.min(), (c.max() - c.min()).clamp(min=1e-12) / _GRID
        cell = ((c - lo) / step).floor().clamp(0, _GRID - 1).long()
        first = ((c - 2 * h - lo) / step).floor().clamp(0, _GRID - 1).long()
        last = ((c + 2 * h - lo) / step).floor().clamp(0, _GRID - 1).long() + 1
        cells.append((cell, first, last))
    (row, top, bottom), (col, left, right) = cells
    table = torch.zeros(_GRID + 1, _GRID + 1, dtype=torch.float64)
    table.view(-1).index_add_(0, (row + 1) * (_GRID + 1) + col + 1, torch.ones_like(cx))
    table = table.cumsum(0).cumsum(1).view(-1)
    corner = lambda r, c: table.index_select(0, r * (_GRID + 1) + c)  # noqa: E731
    return corner(bottom, right) - corner(top, right) - corner(bottom, left) + corner(top, left)


class PairStore:
    """The pairs whose IoU gives a weight other than 1, found box by box as they are needed.

    Only the boxes that reach the top of the scores need theirs: in a dense cluster
    most boxes are dropped first.

    Args:
        boxes: ``(m, 4)`` boxes, float32/float64.
        areas: ``(m,)`` their :func:`~mmpar.compat.ops.suppression.soft_nms_kernel.box_areas`.
        params: The method and its parameters.
    """

    def __init__(self, boxes: Tensor, areas: Tensor, params: SoftNMSParams) -> None:
        self.params = params
        self.table = torch.cat((boxes, areas[:, None]), 1)  # a box and its area: one gather
        off = params.offset
        x1, y1, x2, y2 = boxes.double().unbind(1)
        x2, y2 = x2 + off, y2 + off
        # Only boxes of finite, positive width and height intersect others.
        proper = torch.isfinite(boxes).all(1) & (x2 > x1) & (y2 > y1)
        self.proper = torch.nonzero(proper).squeeze(1)
        x1, y1, x2, y2 = (t.index_select(0, self.proper) for t in (x1, y1, x2, y2))
        # IoU >= t needs intersection >= t / (1 + t) * (both areas), so x overlap
        # >= t / (1 + t) * (both widths) (same in y), and widths (heights) within a
        # factor t of each other: the boxes shrunk about their centres by
        # (1 - t) / (1 + t) then still intersect (1% slack for rounding).
        t = 0.0 if params.method == "gaussian" else params.iou_threshold
        self.size_ratio = 0.99 * t
        shrink = (1.0 - self.size_ratio) / (1.0 + self.size_ratio)
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        hx, hy = (x2 - x1) * (shrink / 2), (y2 - y1) * (shrink / 2)
        #: The shrunk rectangles of the proper boxes, and the index of some of them.
        self.rects = torch.stack((cx - hx, cy - hy, cx + hx, cy + hy), 1)
        self.slot = torch.full((boxes.shape[0],), -1, dtype=torch.long)
        self._reindex(self.proper.new_ones(self.proper.numel(), dtype=torch.bool))
        self.done = ~proper
        m = boxes.shape[0]
        # The store: each box's pairs (done boxes) in one run, ``start`` .. ``start + count``.
        self.start = torch.zeros(m, dtype=torch.long)
        self.count = torch.zeros(m, dtype=torch.long)
        # A rough count of each box's pairs, and how it compared with the pairs found.
        self.crowding = torch.zeros(m, dtype=torch.float64)
        if self.proper.numel():
            self.crowding[self.proper] = crowding(cx, cy, hx, hy)
        self.counted, self.found = 0.0, 0
        empty = torch.zeros(0, dtype=torch.long)
        # The store's first ``size`` pairs; its capacity doubles as it fills.
        self.src, self.dst, self.w = empty, empty, boxes.new_zeros(0)
        self.size = 0

    def mean_degree(self) -> float:
        """The mean number of pairs of the boxes done so far (0 before any)."""
        done = int(self.done.sum()) - (self.done.numel() - self.proper.numel())
        return self.size / done if done else 0.0

    def degrees(self, boxes: Tensor) -> Tensor:
        """``(k,)`` float: the pairs of ``boxes``, exact where found, else estimated."""
        scale = (self.found + 1) / (self.counted + 1)
        guess = self.crowding.index_select(0, boxes) * scale
        return torch.where(
            self.done.index_select(0, boxes), self.count.index_select(0, boxes).double(), guess
        )

    def _reindex(self, keep: Tensor) -> None:
        """Indexes the proper boxes where ``keep`` (``(len(proper),)`` bool), alone."""
        at = torch.nonzero(keep).squeeze(1)
        self.indexed = self.proper.index_select(0, at)
        self.slot.fill_(-1)
        self.slot[self.indexed] = torch.arange(at.numel())
        self.index = RectangleIndex(*self.rects.index_select(0, at).unbind(1))

    def _find(self, boxes: Tensor, und: Tensor) -> None:
        """Adds the pairs from ``boxes`` (indices, not yet done) to undecided boxes."""
        # A box once decided stays so: its pairs are never asked for again. Where most
        # of the indexed boxes are decided, the index of the undecided ones costs less.
        live = und.index_select(0, self.proper)
        if 2 * int(live.sum()) < self.indexed.numel():
            self._reindex(live)
        q, r = self.index.intersecting(self.slot.index_select(0, boxes), self.size_ratio)
        q, r = self.indexed.index_select(0, q), self.indexed.index_select(0, r)
        on = torch.nonzero(und.index_select(0, r)).squeeze(1)
        a, b = q.index_select(0, on), r.index_select(0, on)
        ta, tb = self.table.index_select(0, a), self.table.index_select(0, b)
        ovr = pair_iou(ta[:, :4], ta[:, 4], tb[:, :4], tb[:, 4], self.params.offset)
        near = ovr > 0
        if self.params.method != "gaussian":
            near &= ovr >= self.params.iou_threshold
        pick = torch.nonzero(near).squeeze(1)
        a, order = torch.sort(a.index_select(0, pick), stable=True)  # in runs by box
        pick = pick.index_select(0, order)
        b, ovr = b.index_select(0, pick), ovr.index_select(0, pick)
        per = torch.bincount(a, minlength=self.done.numel())
        first = torch.cumsum(per, 0) - per + self.size
        self.start.index_copy_(0, boxes, first.index_select(0, boxes))
        self.count.index_copy_(0, boxes, per.index_select(0, boxes))
        self.counted += float(self.crowding.index_select(0, boxes).sum())
        self.found += int(per.index_select(0, boxes).sum())
        self._store(a, b, self.params.weights(ovr))
        self.done.index_fill_(0, boxes, True)

    def _store(self, src: Tensor, dst: Tensor, w: Tensor) -> None:
        end = self.size + src.numel()
        if end > self.src.numel():
            grown = max(end, 2 * self.src.numel())
            self.src, self.dst, self.w = (
                torch.cat((t[: self.size], t.new_empty(grown - self.size)))
                for t in (self.src, self.dst, self.w)
            )
        for t, new in ((self.src, src), (self.dst, dst), (self.w, w)):
            t[self.size : end] = new
        self.size = end

    def of(self, top: Tensor, und: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """``(src, dst, weight)``: the pairs from the ``top`` boxes to undecided boxes.

        Args:
            top: ``(m,)`` bool, the boxes whose pairs are wanted (undecided).
            und: ``(m,)`` bool, the undecided boxes.
        """
        new = torch.nonzero(top & ~self.done).squeeze(1)
        if new.numel():
            self._find(new, und)
        boxes = torch.nonzero(top).squeeze(1)
        runs = self.count.index_select(0, boxes)
        shift = self.start.index_select(0, boxes) - (torch.cumsum(runs, 0) - runs)
        at = torch.arange(int(runs.sum())) + torch.repeat_interleave(shift, runs)
        dst = self.dst.index_select(0, at)
        at = at.index_select(0, torch.nonzero(und.index_select(0, dst)).squeeze(1))
        return tuple(t.index_select(0, at) for t in (self.src, self.dst, self.w))
