"""Greedy NMS of boxes by a pairwise IoU, as mmcv's ``iou3d`` NMS kernels decide it
(not an mmcv module).

The boxes are given in visiting order (mmcv sorts them by score first). A box is
kept unless a kept box before it has an IoU with it strictly above the threshold.

1. Candidate pairs: the boxes whose axis-aligned extents meet (a sweep over the boxes
   sorted by left edge, in chunks of :data:`_CHUNK_PAIRS` pairs), of which those whose
   IoU can exceed the threshold (a bound from the extents' overlap and the areas).
2. The greedy result, in rounds: an undecided box none of whose candidates before it
   is undecided (or kept and not yet compared with it) is kept; then the IoUs of the
   just-kept boxes with their later candidates are computed (in chunks), and the
   boxes above the threshold dropped. Only the pairs of kept boxes are evaluated;
   each round decides at least the first undecided box, and the rounds are bounded
   by the longest chain of overlaps, not by the box count.
"""

from __future__ import annotations

from typing import Callable, Iterator, Tuple

import torch
from torch import Tensor

__all__ = ["Extents", "greedy_keep"]

#: Candidate pairs generated (and IoUs computed) at once.
_CHUNK_PAIRS = 1 << 17

#: ``(left, right, bottom, top)``, ``(N,)`` each: closed axis-aligned extents.
Extents = Tuple[Tensor, Tensor, Tensor, Tensor]


def _candidates(extents: Extents) -> Iterator[Tuple[Tensor, Tensor]]:
    """Chunks of pairs ``(a, b)``, ``a < b``, of boxes whose (finite) extents meet."""
    left, right, bottom, top = extents
    n = left.shape[0]
    by_left = torch.argsort(left)
    ends = torch.searchsorted(left[by_left], right[by_left], right=True)
    position = torch.arange(n, device=left.device)
    counts = (ends - position - 1).clamp(min=0)
    reached = torch.cumsum(counts, 0)
    begin = 0
    while begin < n:
        done = int(reached[begin] - counts[begin])
        stop = int(torch.searchsorted(reached, done + _CHUNK_PAIRS, right=True))
        stop = max(begin + 1, stop)
        s = torch.repeat_interleave(position[begin:stop], counts[begin:stop])
        rank = torch.arange(s.numel(), device=left.device) - (reached[s] - counts[s] - done)
        a, b = by_left[s], by_left[s + 1 + rank]
        near = (bottom[a] <= top[b]) & (bottom[b] <= top[a])
        a, b = a[near], b[near]
        yield torch.minimum(a, b), torch.maximum(a, b)
        begin = stop


def _rounds(n: int, first: Tensor, second: Tensor, drops: Callable[[Tensor, Tensor], Tensor]):
    """``(n,)`` bool: the boxes greedy NMS keeps, given the candidate pairs ``first < second``.

    Each round keeps every undecided box that no undecided or unasked earlier box may
    drop, then asks ``drops`` about the pairs of the boxes just kept: only the pairs of
    kept boxes are ever evaluated, and each round decides the first undecided box.
    """
    undecided, kept, dropped = 0, 1, 2
    state = torch.zeros(n, dtype=torch.int8, device=first.device)
    while True:
        open_ = state == undecided
        if not bool(open_.any()):
            return state == kept
        live = open_[second] & (state[first] != dropped)
        first, second = first[live], second[live]
        waiting = torch.zeros_like(open_)
        waiting[second] = True
        state[open_ & ~waiting] = kept
        now = state[first] == kept
        asked_first, asked_second = first[now], second[now]
        hit = torch.cat(
            [
                drops(asked_first[i : i + _CHUNK_PAIRS], asked_second[i : i + _CHUNK_PAIRS])
                for i in range(0, asked_first.numel(), _CHUNK_PAIRS)
            ]
            or [open_[:0]]
        )
        state[asked_second[hit]] = dropped
        first, second = first[~now], second[~now]


def _may_drop(extents: Extents, areas: Tensor, a: Tensor, b: Tensor, threshold: float) -> Tensor:
    """Whether the IoU of pairs ``(a, b)`` may exceed ``threshold``: the overlap is at
    most that of the extents, and the IoU grows with the overlap."""
    left, right, bottom, top = extents
    width = torch.minimum(right[a], right[b]) - torch.maximum(left[a], left[b])
    height = torch.minimum(top[a], top[b]) - torch.maximum(bottom[a], bottom[b])
    inter = width.clamp(min=0) * height.clamp(min=0)
    union = areas[a] + areas[b] - inter
    bound = torch.where(union > 0, inter / union, torch.inf)
    return bound * (1 + 1e-4) + 1e-6 > threshold


def greedy_keep(
    boxes: Tensor,
    extents: Extents,
    areas: Tensor,
    iou: Callable[[Tensor, Tensor], Tensor],
    threshold: float,
) -> Tensor:
    """The positions greedy NMS keeps, ascending (the boxes are in visiting order).

    Args:
        boxes: ``(N, D)`` boxes in visiting order.
        extents: Their axis-aligned extents; a pair whose extents do not meet has an
            IoU of 0, and so does a pair with a box of non-finite extents. Every point
            the overlap covers is in both extents.
        areas: ``(N,)`` the areas the IoU's union adds.
        iou: ``(a, b) -> (k,)``, the IoUs of the aligned pairs of ``(k, D)`` boxes.
        threshold: A box is dropped by a kept earlier one whose IoU with it is above this.

    Returns:
        ``(K,)`` long positions.
    """
    n = boxes.shape[0]
    if n == 0 or threshold < 0:  # with a negative threshold, the first box drops all
        return torch.arange(min(n, 1), device=boxes.device)
    finite = torch.stack(extents).isfinite().all(0)
    ids = finite.nonzero().squeeze(1)
    firsts, seconds = [], []
    for a, b in _candidates(tuple(e.index_select(0, ids) for e in extents)):
        a, b = ids.index_select(0, a), ids.index_select(0, b)
        near = _may_drop(extents, areas, a, b, threshold)
        firsts.append(a[near])
        seconds.append(b[near])
    empty = torch.zeros(0, dtype=torch.long, device=boxes.device)
    first, second = torch.cat(firsts or [empty]), torch.cat(seconds or [empty])

    def drops(a: Tensor, b: Tensor) -> Tensor:
        return iou(boxes.index_select(0, a), boxes.index_select(0, b)) > threshold

    return _rounds(n, first, second, drops).nonzero().squeeze(1)
