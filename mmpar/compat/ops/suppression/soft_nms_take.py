"""Soft-NMS's rounds, one at a time: which boxes can be taken together, and their weights.

Not an mmcv module: :mod:`mmpar.compat.ops.suppression.soft_nms_rounds` runs the rounds (epochs,
equal scores, slots); :class:`RoundTakes` holds the scores and states of the boxes
after the kernel's step 0 and takes a round's boxes from the pairs of the boxes
looked at (:class:`~mmpar.compat.ops.suppression.soft_nms_pairs.PairStore`).
"""

from __future__ import annotations

from typing import List, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.suppression.soft_nms_kernel import SoftNMSParams

__all__ = ["DROPPED", "NAN", "TAKEN", "UNDECIDED", "RoundTakes"]

#: The states of a box: not yet decided, taken, dropped below min_score, score NaN.
UNDECIDED, TAKEN, DROPPED, NAN = 0, 1, 2, 3


class RoundTakes:
    """The boxes' scores and states, changed round by round as the kernel's steps would.

    Args:
        ids: ``(m,)`` the boxes (indices into the input) still live after step 0.
        scores: ``(m,)`` their scores after step 0 (updated in place).
        params: The method and its parameters.
    """

    def __init__(self, ids: Tensor, scores: Tensor, params: SoftNMSParams) -> None:
        self.ids, self.key, self.params = ids, scores, params
        self.status = torch.full((ids.numel(),), UNDECIDED, dtype=torch.int8)
        #: ``(by, dropped)`` index pairs: box ``dropped[k]`` dropped at the step of ``by[k]``
        self.drop_log: List[Tuple[Tensor, Tensor]] = []

    def ready(self, top: Tensor, pairs: Tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """The ``top`` boxes that can be taken now, with their weights in the kernel's order.

        A box is ready when its score is above that of each undecided box it overlaps
        (none of them can come before it and change its score), and, for each of those,
        above that of every other box overlapping it that is not ready: the weights a
        box receives from the boxes taken now are then the next ones the kernel gives
        it, in the order of their scores. ``pairs`` are those from ``top`` to
        undecided boxes; boxes below ``top`` rank below.
        """
        key = self.key
        src, dst, _ = pairs
        ks = key.index_select(0, src)
        low = torch.full_like(key, -float("inf"))
        ready = top.index_fill(0, src[ks <= key.index_select(0, dst)], False)
        while True:
            on = ready.index_select(0, src)
            blocked = torch.where(on, low[:1], ks)  # the scores of the pairs' unready boxes
            near = low.clone().scatter_reduce_(0, dst, blocked, "amax")
            fail = on & (ks <= near.index_select(0, dst))
            if not bool(fail.any()):
                return ready
            ready.index_fill_(0, src[fail], False)

    def ready_two_hops(self, top: Tensor, pairs: Tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """The ``top`` boxes whose score is above every other one of ``top`` within two overlaps.

        No two of them overlap one box: for equal scores, where :meth:`ready`'s order
        of the weights is the kernel's slot order.
        """
        key = self.key
        src, dst, _ = pairs
        ks = key.index_select(0, src)
        best = torch.where(top, key, torch.full_like(key, -float("inf")))
        best.scatter_reduce_(0, dst, ks, "amax")  # best score of ``top`` around each box
        best_at_dst = best.index_select(0, dst)
        count = (top & (key == best)).to(torch.int32)
        count.scatter_add_(0, dst, (ks == best_at_dst).to(torch.int32))  # how many have it
        unique = count == 1
        blocked = torch.zeros_like(top)
        bad = (best_at_dst != ks) | ~unique.index_select(0, dst)
        blocked.index_fill_(0, src[bad], True)
        return top & (key == best) & unique & ~blocked

    def take(self, ready: Tensor, pairs: Tuple[Tensor, Tensor, Tensor]) -> bool:
        """Takes the ``ready`` boxes, each box they overlap weighted in the order of their scores.

        Returns:
            False, having changed nothing, where two of them of equal score overlap
            one box (their order is the kernel's slot order).
        """
        src, dst, w = pairs
        on = torch.nonzero(ready.index_select(0, src)).squeeze(1)
        x, y, w = src.index_select(0, on), dst.index_select(0, on), w.index_select(0, on)
        hits = torch.zeros_like(self.key, dtype=torch.int32)
        hits.index_add_(0, y, torch.ones_like(y, dtype=torch.int32))
        many = hits.index_select(0, y) > 1
        if bool(many.any()):  # boxes weighted more than once: in the order of the scores
            one, many = torch.nonzero(~many).squeeze(1), torch.nonzero(many).squeeze(1)
            kx = self.key.index_select(0, x.index_select(0, many))
            order = many.index_select(0, torch.argsort(kx, descending=True, stable=True))
            order = order.index_select(0, torch.argsort(y.index_select(0, order), stable=True))
            if not self._weigh_in_turn(*(t.index_select(0, order) for t in (x, y, w))):
                return False
            x, y, w = (t.index_select(0, one) for t in (x, y, w))
        rescored = self.key.index_select(0, y) * w
        self._rescore(x, y, rescored, rescored < self.params.min_score)
        self.status.masked_fill_(ready, TAKEN)
        return True

    def _weigh_in_turn(self, x: Tensor, y: Tensor, w: Tensor) -> bool:
        """Weights ``w`` from boxes ``x`` on boxes ``y`` (sorted by ``y``, then by the score of
        ``x``, descending), one after the other, as the kernel's steps give them.

        Returns:
            False, having changed nothing, where two ``x`` of equal score weight one box.
        """
        kx = self.key.index_select(0, x)
        same = y[1:] == y[:-1]
        if bool((same & (kx[1:] == kx[:-1])).any()):
            return False
        # A row per box weighted, its weights in turn; padded with 1 (a product it keeps).
        first = torch.cat((same.new_ones(1), ~same))
        at = torch.arange(y.numel())
        row = torch.cumsum(first, 0) - 1
        col = at - torch.cummax(torch.where(first, at, 0), 0)[0]
        shape = (int(row[-1]) + 1, int(col.max()) + 1)
        weights = w.new_ones(shape).index_put_((row, col), w)
        takers = x.new_zeros(shape).index_put_((row, col), x)
        boxes = y.index_select(0, torch.nonzero(first).squeeze(1))
        score = self.key.index_select(0, boxes)
        scores = []
        for weight in weights.unbind(1):  # rounded after each product, as the kernel's
            score = score * weight
            scores.append(score)
        below = torch.stack(scores, 1) < self.params.min_score  # stays below once below
        dropped = below.any(1)
        # Dropped at its first weight below min_score, by that weight's box.
        by = takers.gather(1, below.to(torch.int8).argmax(1, keepdim=True)).squeeze(1)
        self._rescore(by, boxes, score, dropped)
        return True

    def _rescore(self, by: Tensor, boxes: Tensor, scores: Tensor, dropped: Tensor) -> None:
        """New ``scores`` of ``boxes`` (distinct); ``dropped`` ones dropped by boxes ``by``."""
        self.key.index_copy_(0, boxes, scores)
        status = torch.where(torch.isnan(scores), NAN, UNDECIDED).to(torch.int8)
        self.status.index_copy_(0, boxes, status.masked_fill_(dropped, DROPPED))
        if bool(dropped.any()):
            self.drop_log.append((self.ids[by[dropped]], self.ids[boxes[dropped]]))
