"""Soft-NMS: the result of mmcv 1.7.2's CPU kernel, without a pass over the boxes per box taken.

Not an mmcv module: :func:`mmpar.compat.ops.nms.soft_nms` checks mmcv's arguments
and calls :func:`soft_nms_keep` here. The kernel and its vocabulary (steps, slots,
weights) are in :mod:`mmpar.compat.ops.soft_nms_kernel`. Here:

1. step 0 is the kernel's: every other box is rescored, and those below
   ``min_score`` dropped, whether or not the first box overlaps them;
2. afterwards a score changes only through a weight other than 1, from a box that
   overlaps it enough (IoU above 0, and at least ``iou_threshold`` for ``linear``
   and ``naive``). Those pairs are found box by box as boxes reach the top of the
   scores (:class:`~mmpar.compat.ops.box_pairs.RectangleIndex`);
3. the steps are decided in rounds: a box is taken when its score is above that of
   every undecided box at most two overlaps away; no box can then come before it
   and change its score, and each box it overlaps receives at most one weight per
   round, in the kernel's order. Its weights apply, dropping the boxes that fall
   below ``min_score``. Scores only fall, so the boxes come out in the order of
   their scores when taken. A round looks at the undecided boxes of highest score
   only (an epoch: fewer where the pairs are many), and the rounds are bounded by
   the longest chain of overlapping boxes, not by the box count;
4. slots matter only among equal scores: where equal scores meet at the top, and
   for the boxes whose score is NaN (taken last, in slot order), the kernel's
   swaps and refills are replayed (:class:`~mmpar.compat.ops.soft_nms_kernel.SlotReplay`,
   a Python loop over the boxes taken) up to that point.

:func:`~mmpar.compat.ops.soft_nms_kernel.soft_nms_steps`, the kernel step by step,
runs where scores can rise (``min_score < 0``: a negative score rises when
multiplied by a weight below 1), where every pair interacts (``naive`` with
``iou_threshold == 0``), and for a few boxes (it costs less there).

Cost: sparse boxes (few overlaps each) run faster than torchvision's ``nms``;
dense clusters (hundreds of boxes over one object) cost a round per box taken
from a cluster, each over the cluster's pairs.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.soft_nms_kernel import (
    SlotReplay,
    SoftNMSParams,
    box_areas,
    pair_iou,
    ranking,
    refill_order,
    soft_nms_steps,
)
from mmpar.compat.ops.soft_nms_pairs import PairStore

__all__ = ["soft_nms_keep"]

#: Up to this many boxes, the kernel step by step costs less.
_FEW_BOXES = 32
#: How many undecided boxes an epoch of rounds looks at: first, fewest, most.
_EPOCH, _EPOCH_MIN, _EPOCH_MAX = 256, 32, 8192
#: The most pairs an epoch's rounds go over.
_EPOCH_PAIRS = 1 << 15

_UNDECIDED, _TAKEN, _DROPPED, _NAN = 0, 1, 2, 3


class _Rounds:
    """Steps 1.. of the kernel, decided in rounds over the overlapping pairs.

    Each epoch looks at the (at most) ``_EPOCH`` undecided boxes of highest score,
    those above a threshold ``tau``: no box below it can outrank them, so their
    rounds need only the pairs they are in. An epoch ends when none is left above
    ``tau``, or when equal scores block the top.

    Args:
        ids: ``(m,)`` the boxes still live after step 0 with a score that is not NaN.
        scores: ``(m,)`` their scores after step 0.
        neighbours: The pairs of those boxes (local indices).
        params: The method and its parameters.
        replay: Makes the :class:`SlotReplay` after step 0, when slots are needed.
    """

    def __init__(
        self,
        ids: Tensor,
        scores: Tensor,
        neighbours: PairStore,
        params: SoftNMSParams,
        replay: Callable[[], SlotReplay],
    ) -> None:
        self.ids, self.key, self.params = ids, scores, params
        m = ids.numel()
        self.pairs = neighbours
        self.status = torch.full((m,), _UNDECIDED, dtype=torch.int8)
        self.replayed = torch.zeros(m, dtype=torch.bool)
        self.make_replay = replay
        self.replay: Optional[SlotReplay] = None
        self.drop_log: List[Tuple[Tensor, Tensor]] = []
        self.order: List[int] = []  # boxes replayed so far, in the order taken

    def run(self) -> None:
        epoch = _EPOCH
        while True:
            und = self.status == _UNDECIDED
            left = int(und.sum())
            if left == 0:
                return
            top, tau = und, None
            if left > epoch:
                tau = torch.topk(self.key[und], epoch, sorted=False).values.min()
                top = und & (self.key > tau)
                if not bool(top.any()):  # the ``epoch`` best scores are equal
                    self._break_tie(und)
                    continue
            top, tau = self._fewer(top, tau)
            if not bool(top.any()):  # equal scores at the top
                self._break_tie(und)
                continue
            pairs = self.pairs.of(top, und)
            looked, before = int(top.sum()), int((self.status == _TAKEN).sum())
            while True:
                ready = self._ready(top, pairs)
                if not bool(ready.any()) or not self._take(ready, pairs):
                    # Equal scores meet: the stricter rule, which takes none of them.
                    ready = self._ready_two_hops(top, pairs)
                    if not bool(ready.any()):  # equal scores block the top
                        self._break_tie(und)
                        break
                    self._take(ready, pairs)
                und = self.status == _UNDECIDED
                top = top & und if tau is None else top & und & (self.key > tau)
                if not bool(top.any()):
                    break
                src, dst, _ = pairs
                on = torch.nonzero(top.index_select(0, src) & und.index_select(0, dst)).squeeze(1)
                pairs = tuple(t.index_select(0, on) for t in pairs)
            # Wider epochs where most of the boxes looked at were taken (few overlaps).
            taken = int((self.status == _TAKEN).sum()) - before
            if taken * 2 > looked:
                looked *= 2
            elif taken * 8 < looked:
                looked //= 2
            epoch = min(max(looked, _EPOCH_MIN), _EPOCH_MAX)

    def _fewer(self, top: Tensor, tau: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
        """The best of ``top`` whose pairs add up to about ``_EPOCH_PAIRS``, and tau.

        Dense boxes: each round then costs less, and fewer boxes have their pairs
        found only to be dropped before they are taken.
        """
        boxes = torch.nonzero(top).squeeze(1)
        mean = self.pairs.mean_degree()
        enough = max(int(2 * _EPOCH_PAIRS / mean), 2) if mean else boxes.numel()
        many = enough < boxes.numel()
        if many:  # estimate the pairs of a few more boxes than the budget needs, not all
            best = torch.topk(self.key.index_select(0, boxes), enough)
            boxes = boxes.index_select(0, best.indices)
        degree = self.pairs.degrees(boxes)
        if not many and float(degree.sum()) <= _EPOCH_PAIRS:
            return top, tau
        keys, order = torch.sort(self.key.index_select(0, boxes), descending=True)
        cut = int(torch.searchsorted(torch.cumsum(degree.index_select(0, order), 0), _EPOCH_PAIRS))
        cut = max(cut, 1)  # the best box at least
        if cut >= keys.numel():
            if not many:
                return top, tau
            cut = keys.numel() - 1  # tau: the last of the ``enough`` best
        return top & (self.key > keys[cut]), keys[cut]

    def _ready(self, top: Tensor, pairs: Tuple[Tensor, Tensor, Tensor]) -> Tensor:
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

    def _ready_two_hops(self, top: Tensor, pairs: Tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """The ``top`` boxes whose score is above every other one of ``top`` within two overlaps.

        No two of them overlap one box: for equal scores, where :meth:`_ready`'s order
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

    def _take(self, ready: Tensor, pairs: Tuple[Tensor, Tensor, Tensor]) -> bool:
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
        self.status.masked_fill_(ready, _TAKEN)
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
        status = torch.where(torch.isnan(scores), _NAN, _UNDECIDED).to(torch.int8)
        self.status.index_copy_(0, boxes, status.masked_fill_(dropped, _DROPPED))
        if bool(dropped.any()):
            self.drop_log.append((self.ids[by[dropped]], self.ids[boxes[dropped]]))

    def _flush_drops(self) -> None:
        for by, dropped in self.drop_log:
            self.replay.add_drops(by, dropped)
        self.drop_log = []

    def _replay_to(self, above: Optional[float]) -> SlotReplay:
        """The replay, advanced through the taken boxes scored above ``above`` (None: all)."""
        if self.replay is None:
            self.replay = self.make_replay()
        self._flush_drops()
        todo = (self.status == _TAKEN) & ~self.replayed
        if above is not None:
            todo &= self.key > above
        local = torch.nonzero(todo).squeeze(1)
        keys, order = torch.sort(self.key.index_select(0, local), descending=True, stable=True)
        local = local.index_select(0, order)
        self.replayed[local] = True
        self.order += self.replay.take_in_order(self.ids[local].tolist(), keys.tolist())
        return self.replay

    def _break_tie(self, und: Tensor) -> None:
        """Equal scores block the top: the kernel takes the one first in slot order."""
        top = float(self.key[und].max())
        replay = self._replay_to(top)
        level = torch.nonzero(((self.status == _TAKEN) & ~self.replayed) | und).squeeze(1)
        level = level[self.key[level] == top]
        local_of = dict(zip(self.ids[level].tolist(), level.tolist()))
        group = list(local_of)
        while True:  # ends at the first undecided box: there is one at the top
            box = replay.first(group)
            group.remove(box)
            local = local_of[box]
            undecided = bool(und[local])
            if undecided:
                one = torch.arange(und.numel()) == local
                self._take(one, self.pairs.of(one, und))
                self._flush_drops()
            self.replayed[local] = True
            replay.take(box)
            self.order.append(box)
            if undecided:
                return

    def taken(self, nan_boxes: bool) -> Tuple[Tensor, Optional[SlotReplay]]:
        """The boxes taken after step 0, in the kernel's order.

        Args:
            nan_boxes: Whether some live box has a NaN score (they need the replay).

        Returns:
            ``(K,)`` box indices, and the replay if one ran to the end.
        """
        nan_boxes = nan_boxes or bool((self.status == _NAN).any())
        rest = torch.nonzero((self.status == _TAKEN) & ~self.replayed).squeeze(1)
        keys, order = torch.sort(self.key.index_select(0, rest), descending=True, stable=True)
        if nan_boxes or bool((keys[1:] == keys[:-1]).any()):
            replay = self._replay_to(None)
            return torch.tensor(self.order, dtype=torch.long), replay
        rest = self.ids.index_select(0, rest.index_select(0, order))
        return torch.cat((torch.tensor(self.order, dtype=torch.long), rest)), None


def soft_nms_keep(boxes: Tensor, scores: Tensor, params: SoftNMSParams) -> Tuple[Tensor, Tensor]:
    """mmcv's ``softnms_cpu``: the boxes kept, in the order taken, and their scores then.

    Args:
        boxes: ``(N, 4)`` float32/float64 CPU boxes.
        scores: ``(N,)`` scores of the same dtype.
        params: The method and its parameters.

    Returns:
        ``(K,)`` long indices of the kept boxes in the order taken, and ``(K,)``
        their scores when taken.
    """
    n = boxes.shape[0]
    dense = params.method == "naive" and params.iou_threshold <= 0
    if n <= _FEW_BOXES or params.min_score < 0 or dense:
        return soft_nms_steps(boxes, scores, params)
    areas = box_areas(boxes, params.offset)
    # Step 0, as the kernel: every other box rescored, and dropped below min_score.
    first = int(torch.argmax(ranking(scores)))
    ovr = pair_iou(boxes[first], areas[first], boxes, areas, params.offset)
    rescored = scores * params.weights(ovr)
    rescored[first] = scores[first]
    live = rescored >= params.min_score
    live |= torch.isnan(rescored)
    live[first] = False
    graph = torch.nonzero(live & ~torch.isnan(rescored)).squeeze(1)
    neighbours = PairStore(boxes.index_select(0, graph), areas.index_select(0, graph), params)

    def replay() -> SlotReplay:
        slots = torch.arange(n)
        slots[0], slots[first] = first, 0
        rest = slots[1:]
        rest = rest.index_select(0, refill_order(~live.index_select(0, rest)))
        return SlotReplay(torch.cat((slots[:1], rest)), n)

    rounds = _Rounds(graph, rescored.index_select(0, graph), neighbours, params, replay)
    rounds.run()
    nan_boxes = bool((live & torch.isnan(rescored)).any())
    taken, slot_replay = rounds.taken(nan_boxes)
    rescored.index_copy_(0, graph, rounds.key)
    inds = [torch.tensor([first]), taken]
    if slot_replay is not None:
        inds.append(torch.tensor(slot_replay.live(), dtype=torch.long))
    inds = torch.cat(inds)
    return inds, rescored.index_select(0, inds)
