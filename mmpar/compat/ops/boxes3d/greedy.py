"""Greedy NMS of boxes by a pairwise IoU, as mmcv's ``iou3d`` NMS kernels decide it
(not an mmcv module).

The boxes are given in visiting order (mmcv sorts them by score first). A box is
kept unless a kept box before it has an IoU with it strictly above the threshold.

1. Candidate pairs: the boxes whose axis-aligned extents meet (a sweep over the boxes
   sorted by left edge, in chunks of :data:`_CHUNK_PAIRS` pairs); only they can have
   an IoU above 0. Their IoUs are computed in those chunks, and the pairs above the
   threshold kept.
2. The greedy result, in rounds: a box all of whose suppressors before it are decided
   is dropped if one of them is kept, else kept; each round decides at least the
   first undecided box, and the rounds are bounded by the longest chain of
   suppressions, not by the box count.
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


def _rounds(n: int, first: Tensor, second: Tensor) -> Tensor:
    """``(n,)`` bool: which boxes greedy NMS keeps, ``first[i]`` suppressing ``second[i]``."""
    undecided, kept, dropped = 0, 1, 2
    state = torch.zeros(n, dtype=torch.int8, device=first.device)
    while True:
        open_ = state == undecided
        if not bool(open_.any()):
            return state == kept
        live = open_[second] & (state[first] != dropped)
        first, second = first[live], second[live]
        by = state[first]
        waiting = torch.zeros_like(open_)
        waiting[second[by == undecided]] = True
        hit = torch.zeros_like(open_)
        hit[second[by == kept]] = True
        state[open_ & hit] = dropped
        state[open_ & ~hit & ~waiting] = kept


def greedy_keep(
    boxes: Tensor, extents: Extents, iou: Callable[[Tensor, Tensor], Tensor], threshold: float
) -> Tensor:
    """The positions greedy NMS keeps, ascending (the boxes are in visiting order).

    Args:
        boxes: ``(N, D)`` boxes in visiting order.
        extents: Their axis-aligned extents, finite; a pair whose extents do not meet
            has an IoU of 0, and so does a pair with a box of non-finite extents.
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
        above = iou(boxes.index_select(0, a), boxes.index_select(0, b)) > threshold
        firsts.append(a[above])
        seconds.append(b[above])
    empty = torch.zeros(0, dtype=torch.long, device=boxes.device)
    first = torch.cat(firsts) if firsts else empty
    second = torch.cat(seconds) if seconds else empty
    return _rounds(n, first, second).nonzero().squeeze(1)
