"""mmcv 1.7.2's soft-NMS CPU kernel (``softnms_cpu``): its arithmetic, its steps, its slots.

Not an mmcv module: :func:`mmpar.compat.ops.nms.soft_nms` takes mmcv's arguments,
and :mod:`mmpar.compat.ops.suppression.soft_nms_rounds` computes the kernel's result from
these pieces.

The kernel keeps the boxes in one array. Step ``i`` takes the box of highest score
in slots ``i, i + 1, ...`` (the first in slot order among equal scores), swaps it
into slot ``i``, multiplies the score of every later box by a weight of its IoU
with the taken box, and drops a box whose score falls below ``min_score`` by moving
the array's last box into its slot (walking the slots forward). The result is the
boxes taken, in order, with their scores then.

Non-finite values: a NaN score ranks as ``-inf`` (mmcv's ``max_score < sc[pos]``
would take a NaN found first); a NaN IoU (a box with a NaN coordinate; two boxes of
zero area) counts as 0, weight 1 (mmcv's ``gaussian`` turns the score NaN).
"""

from __future__ import annotations

import heapq
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

import torch
from torch import Tensor

__all__ = [
    "SlotReplay",
    "SoftNMSParams",
    "box_areas",
    "pair_iou",
    "ranking",
    "refill_order",
    "soft_nms_steps",
]


class SoftNMSParams:
    """soft_nms's scalar parameters, and its weights."""

    def __init__(
        self, iou_threshold: float, sigma: float, min_score: float, method: str, offset: int
    ) -> None:
        self.iou_threshold = float(iou_threshold)
        self.sigma = float(sigma)
        self.min_score = float(min_score)
        self.method = method
        self.offset = int(offset)

    def weights(self, ovr: Tensor) -> Tensor:
        """The factor a score is multiplied by, from its IoU ``ovr`` with the taken box.

        A NaN IoU counts as 0 (weight 1).
        """
        if self.method == "gaussian":
            ovr = torch.where(torch.isnan(ovr), torch.zeros_like(ovr), ovr)
            return torch.exp(-(ovr * ovr) / self.sigma)
        near = ovr >= self.iou_threshold
        lowered = torch.zeros_like(ovr) if self.method == "naive" else 1 - ovr
        return torch.where(near, lowered, torch.ones_like(ovr))


def box_areas(boxes: Tensor, offset: int) -> Tensor:
    """``(N,)`` areas of ``(N, 4)`` boxes whose width is ``x2 - x1 + offset``."""
    return (boxes[:, 2] - boxes[:, 0] + offset) * (boxes[:, 3] - boxes[:, 1] + offset)


def pair_iou(a: Tensor, area_a: Tensor, b: Tensor, area_b: Tensor, offset: int) -> Tensor:
    """IoU of ``a[k]`` with ``b[k]`` (``(M, 4)``, or one ``(4,)`` box broadcast), as mmcv's kernels.

    ``area_a`` and ``area_b`` are the boxes' :func:`box_areas` with the same ``offset``.
    """
    lt = torch.maximum(a[..., :2], b[..., :2])
    rb = torch.minimum(a[..., 2:], b[..., 2:])
    wh = (rb - lt + offset).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a + area_b - inter)


def ranking(scores: Tensor) -> Tensor:
    """``scores`` with NaN as ``-inf``, the value boxes are ranked by."""
    return torch.where(torch.isnan(scores), torch.full_like(scores, -float("inf")), scores)


def refill_order(dropped: Tensor) -> Tensor:
    """Where mmcv's kernel leaves the kept boxes of one step after dropping some.

    The kernel walks the slots forward and overwrites each dropped box with the
    last live box (dropping that one too if it is also dropped). So the kept boxes
    among the first ``m`` slots stay, and the holes there are filled, left to
    right, with the kept boxes beyond slot ``m`` taken from the end.

    Args:
        dropped: ``(L,)`` bool, per slot.

    Returns:
        ``(m,)`` long: for each final slot, the slot its box came from.
    """
    kept = ~dropped
    m = int(kept.sum())
    slot = torch.arange(dropped.numel())
    order = slot[:m].clone()
    order[dropped[:m]] = slot[m:][kept[m:]].flip(0)
    return order


def soft_nms_steps(boxes: Tensor, scores: Tensor, params: SoftNMSParams) -> Tuple[Tensor, Tensor]:
    """mmcv's ``softnms_cpu`` step by step, each step vectorised over the boxes not yet taken.

    Args:
        boxes: ``(N, 4)`` float32/float64 CPU boxes.
        scores: ``(N,)`` scores of the same dtype.
        params: The method and its parameters.

    Returns:
        ``(K,)`` long indices of the kept boxes in the order taken, and ``(K,)``
        their scores when taken.
    """
    n = boxes.shape[0]
    scores = scores.clone()
    areas = box_areas(boxes, params.offset)
    slots = torch.arange(n)  # slots[p]: the box in the kernel's array slot p
    live = n
    i = 0
    # index_select/index_copy_, not tensor[indices]: advanced indexing costs ~10x more per call.
    while i < live:
        best = i + int(torch.argmax(ranking(scores.index_select(0, slots[i:live]))))
        slots[i], slots[best] = slots[best].clone(), slots[i].clone()
        top, rest = slots[i], slots[i + 1 : live]
        if rest.numel() == 0:
            break
        ovr = pair_iou(
            boxes[top],
            areas[top],
            boxes.index_select(0, rest),
            areas.index_select(0, rest),
            params.offset,
        )
        rescored = scores.index_select(0, rest) * params.weights(ovr)
        scores.index_copy_(0, rest, rescored)
        dropped = rescored < params.min_score
        if bool(dropped.any()):
            rest = rest.index_select(0, refill_order(dropped))
            slots[i + 1 : i + 1 + rest.numel()] = rest
            live = i + 1 + rest.numel()
        i += 1
    inds = slots[:live]
    return inds, scores.index_select(0, inds)


class SlotReplay:
    """The kernel's array of slots, advanced one taken box at a time.

    Plain Python, run only as far as slots decide something: the order among
    equal scores, and the order of the boxes whose score is NaN.

    Args:
        slots: The boxes in slot order after step 0 (slot 0 holds the first box).
        n: The number of boxes.
    """

    def __init__(self, slots: Tensor, n: int) -> None:
        self.slots: List[int] = slots.tolist()
        pos = torch.zeros(n, dtype=torch.long)
        pos[slots] = torch.arange(slots.numel())
        self.pos: List[int] = pos.tolist()
        self.front = 1
        self.end = len(self.slots)
        #: taken box -> the boxes dropped at its step
        self.drops: Dict[int, List[int]] = {}
        #: the live boxes whose slot the last :meth:`take` changed
        self.moved: List[int] = []

    def add_drops(self, by: Tensor, dropped: Tensor) -> None:
        """Records that each ``dropped[k]`` was dropped at the step that took ``by[k]``."""
        for taker, box in zip(by.tolist(), dropped.tolist()):
            self.drops.setdefault(taker, []).append(box)

    def drop(self, taker: int, dropped: List[int]) -> None:
        """Records that the boxes ``dropped`` were dropped at the step that took ``taker``."""
        self.drops.setdefault(taker, []).extend(dropped)

    def take(self, box: int) -> None:
        """The kernel's step that takes ``box``: the swap, then the refills of its drops.

        :attr:`moved` lists the live boxes whose slot it changed.
        """
        slots, pos, front = self.slots, self.pos, self.front
        p, other = pos[box], slots[front]
        slots[p], pos[other] = other, p
        slots[front], pos[box] = box, front
        self.front = front + 1
        self.moved = [other]
        dropped = self.drops.pop(box, None)
        if not dropped:
            return
        gone = set(dropped)
        # Holes in slot order; each takes the last live box, itself dropped if it is in ``gone``.
        for hole in sorted(pos[d] for d in dropped):
            while hole < self.end:
                self.end -= 1
                if self.end == hole:
                    break
                moved = slots[self.end]
                slots[hole], pos[moved] = moved, hole
                self.moved.append(moved)
                if moved not in gone:
                    break

    def take_in_slot_order(
        self, group: Set[int], step: Optional[Callable[[int], Iterable[int]]] = None
    ) -> List[int]:
        """Takes the boxes of ``group`` (live), each time the first in slot order.

        Args:
            group: The boxes; emptied.
            step: Called with each box as it is taken, before its swap: records the
                boxes dropped at its step (:meth:`drop`) and returns those of
                ``group`` it takes out of it (lowered below the others).

        Returns:
            The boxes in the order taken.
        """
        pos = self.pos
        heap = [(pos[box], box) for box in group]
        heapq.heapify(heap)
        done: List[int] = []
        while group:
            at, box = heapq.heappop(heap)
            if box not in group or pos[box] != at:  # taken, left, or moved since pushed
                continue
            group.discard(box)
            if step is not None:
                group.difference_update(step(box))
            self.take(box)
            done.append(box)
            for moved in self.moved:
                if moved in group:
                    heapq.heappush(heap, (pos[moved], moved))
        return done

    def take_in_order(self, boxes: List[int], keys: List[float]) -> List[int]:
        """Takes ``boxes``, sorted by descending ``keys``; equal keys in slot order.

        Returns:
            The boxes in the order taken.
        """
        done: List[int] = []
        k = 0
        while k < len(boxes):
            j = k + 1
            while j < len(boxes) and keys[j] == keys[k]:
                j += 1
            if j == k + 1:
                self.take(boxes[k])
                done.append(boxes[k])
            else:
                done += self.take_in_slot_order(set(boxes[k:j]))
            k = j
        return done

    def live(self) -> List[int]:
        """The boxes not yet taken nor dropped, in slot order."""
        return self.slots[self.front : self.end]
