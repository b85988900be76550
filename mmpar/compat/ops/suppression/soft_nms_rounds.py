"""Soft-NMS: the result of mmcv 1.7.2's CPU kernel, without a pass over the boxes per box taken.

Not an mmcv module: :func:`mmpar.compat.ops.nms.soft_nms` checks mmcv's arguments
and calls :func:`soft_nms_keep` here. The kernel and its vocabulary (steps, slots,
weights) are in :mod:`mmpar.compat.ops.suppression.soft_nms_kernel`. Here:

1. step 0 is the kernel's: every other box is rescored, and those below
   ``min_score`` dropped, whether or not the first box overlaps them;
2. afterwards a score changes only through a weight other than 1, from a box that
   overlaps it enough (IoU above 0, and at least ``iou_threshold`` for ``linear``
   and ``naive``). Those pairs are found box by box as boxes near the top of the
   scores (:class:`~mmpar.compat.ops.suppression.soft_nms_pairs.PairStore`);
3. the steps are decided in rounds: a box is taken when its score is above that of
   each undecided box it overlaps (none of them can come before it and change its
   score) and, for each of those, above that of every box overlapping it that is not
   taken in the same round (none can weight it in between). A box overlapped by
   several boxes taken in a round gets their weights in turn, in the order of their
   scores, and is dropped at the first that takes it below ``min_score``. Scores
   only fall, so the boxes come out in the order of their scores when taken. Where
   two boxes of equal score would weight one box, the round takes only boxes above
   every other undecided box two overlaps away. A round looks at the undecided
   boxes of highest score only (an epoch: fewer where their pairs, guessed before
   they are found, are many), and the rounds are bounded by the longest chain of
   overlapping boxes, not by the box count;
4. slots matter only among equal scores: where equal scores meet at the top, and
   for the boxes whose score is NaN (taken last, in slot order), the kernel's
   swaps and refills are replayed
   (:class:`~mmpar.compat.ops.suppression.soft_nms_kernel.SlotReplay`,
   a Python loop over the boxes taken) up to that point.

:func:`~mmpar.compat.ops.suppression.soft_nms_kernel.soft_nms_steps`, the kernel step by step,
runs where scores can rise (``min_score < 0``: a negative score rises when
multiplied by a weight below 1), where every pair interacts (``naive`` with
``iou_threshold == 0``), and for a few boxes (it costs less there).

Cost: 10,000 sparse boxes (few overlaps each) run about as fast as torchvision's
``nms``, ``gaussian`` (every overlap counts) about 2.5 times slower. Dense clusters
(hundreds of boxes over one object) cost the pairs of each box taken there
(hundreds each, found with :class:`~mmpar.compat.ops.suppression.box_pairs.RectangleIndex`),
and about a round per box taken from a cluster. A call of a few hundred boxes
costs its fixed work, about a millisecond and a half.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.suppression.soft_nms_kernel import (
    SlotReplay,
    SoftNMSParams,
    box_areas,
    pair_iou,
    ranking,
    refill_order,
    soft_nms_steps,
)
from mmpar.compat.ops.suppression.soft_nms_level import take_level
from mmpar.compat.ops.suppression.soft_nms_pairs import PairStore
from mmpar.compat.ops.suppression.soft_nms_take import NAN, TAKEN, UNDECIDED, RoundTakes

__all__ = ["soft_nms_keep"]

#: Up to this many boxes, the kernel step by step costs less.
_FEW_BOXES = 32
#: How many undecided boxes an epoch of rounds looks at: first, fewest, most.
_EPOCH, _EPOCH_MIN, _EPOCH_MAX = 256, 32, 8192
#: The most pairs an epoch's rounds go over.
_EPOCH_PAIRS = 1 << 15


class _Rounds(RoundTakes):
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
        super().__init__(ids, scores, params)
        self.pairs = neighbours
        self.replayed = torch.zeros(ids.numel(), dtype=torch.bool)
        self.make_replay = replay
        self.replay: Optional[SlotReplay] = None
        self.order: List[int] = []  # boxes replayed so far, in the order taken

    def run(self) -> None:
        epoch = _EPOCH
        while True:
            und = self.status == UNDECIDED
            left = int(und.sum())
            if left == 0:
                return
            top, tau = und, None
            if left > epoch:
                tau = torch.topk(self.key[und], epoch, sorted=False).values.min()
                top = und & (self.key > tau)
                if not bool(top.any()):  # the ``epoch`` best scores are equal
                    self._take_level(und)
                    continue
            top, tau = self._fewer(top, tau)
            if not bool(top.any()):  # equal scores at the top
                self._take_level(und)
                continue
            pairs = self.pairs.of(top, und)
            looked, before = int(top.sum()), int((self.status == TAKEN).sum())
            while True:
                ready = self.ready(top, pairs)
                if not bool(ready.any()) or not self.take(ready, pairs):
                    # Equal scores meet: the stricter rule, which takes none of them.
                    ready = self.ready_two_hops(top, pairs)
                    if not bool(ready.any()):  # equal scores block the top
                        self._take_level(und)
                        break
                    self.take(ready, pairs)
                und = self.status == UNDECIDED
                top = top & und if tau is None else top & und & (self.key > tau)
                if not bool(top.any()):
                    break
                src, dst, _ = pairs
                on = torch.nonzero(top.index_select(0, src) & und.index_select(0, dst)).squeeze(1)
                pairs = tuple(t.index_select(0, on) for t in pairs)
            # Wider epochs where most of the boxes looked at were taken (few overlaps).
            taken = int((self.status == TAKEN).sum()) - before
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

    def _flush_drops(self) -> None:
        for by, dropped in self.drop_log:
            self.replay.add_drops(by, dropped)
        self.drop_log = []

    def _replay_to(self, above: Optional[float]) -> SlotReplay:
        """The replay, advanced through the taken boxes scored above ``above`` (None: all)."""
        if self.replay is None:
            self.replay = self.make_replay()
        self._flush_drops()
        todo = (self.status == TAKEN) & ~self.replayed
        if above is not None:
            todo &= self.key > above
        local = torch.nonzero(todo).squeeze(1)
        keys, order = torch.sort(self.key.index_select(0, local), descending=True, stable=True)
        local = local.index_select(0, order)
        self.replayed[local] = True
        self.order += self.replay.take_in_order(self.ids[local].tolist(), keys.tolist())
        return self.replay

    def _take_level(self, und: Tensor) -> None:
        """Equal scores block the top: the kernel takes them in slot order (:func:`take_level`)."""
        top = float(self.key[und].max())
        replay = self._replay_to(top)
        at_top = self.key == top
        level = torch.nonzero(at_top & ((self.status == TAKEN) & ~self.replayed | und)).squeeze(1)

        def find(boxes: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
            return self.pairs.of(torch.zeros_like(und).index_fill_(0, boxes, True), und)

        self.order += take_level(
            replay, self.ids, self.key, self.status, level, find, self.params.min_score
        )
        self.replayed[level[self.status.index_select(0, level) == TAKEN]] = True

    def taken(self, nan_boxes: bool) -> Tuple[Tensor, Optional[SlotReplay]]:
        """The boxes taken after step 0, in the kernel's order.

        Args:
            nan_boxes: Whether some live box has a NaN score (they need the replay).

        Returns:
            ``(K,)`` box indices, and the replay if one ran to the end.
        """
        nan_boxes = nan_boxes or bool((self.status == NAN).any())
        rest = torch.nonzero((self.status == TAKEN) & ~self.replayed).squeeze(1)
        keys, order = torch.sort(self.key.index_select(0, rest), descending=True, stable=True)
        tied = torch.nonzero(keys[1:] == keys[:-1]).squeeze(1)
        if nan_boxes or (tied.numel() and int(tied[-1]) + 2 == keys.numel()):
            replay = self._replay_to(None)
            return torch.tensor(self.order, dtype=torch.long), replay
        if tied.numel():  # slots order the boxes down to the lowest equal scores
            below = int(tied[-1]) + 2
            self._replay_to(float(keys[below]))
            order = order[below:]
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
