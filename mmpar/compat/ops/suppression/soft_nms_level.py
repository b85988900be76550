"""Soft-NMS where several boxes share the top score: the kernel's steps there, in slot order.

Not an mmcv module: :mod:`mmpar.compat.ops.suppression.soft_nms_rounds` calls :func:`take_level`
when equal scores block its rounds. mmcv's kernel takes the box of the top score
that comes first in its slots, which lowers the boxes it overlaps (those at the
top score leave it) and may drop some, then the next first in slot order, until no
box is left at that score. Which one comes first depends on the swaps and refills
of every step before (:class:`~mmpar.compat.ops.suppression.soft_nms_kernel.SlotReplay`), so
this runs in plain Python over the level's boxes and their pairs, with the
kernel's arithmetic: one rounded product per weight, in float32 or float64 as the
scores.
"""

from __future__ import annotations

import operator
import struct
from typing import Callable, Dict, List, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.suppression.soft_nms_kernel import SlotReplay
from mmpar.compat.ops.suppression.soft_nms_take import DROPPED, NAN, TAKEN, UNDECIDED

__all__ = ["take_level"]

_FLOAT32 = struct.Struct("f")


def _mul_float32(a: float, b: float) -> float:
    # Two float32 values multiply exactly in float64 (48 significant bits); one
    # rounding to float32 then gives the float32 product.
    return _FLOAT32.unpack(_FLOAT32.pack(a * b))[0]


def _multiply(dtype: torch.dtype) -> Callable[[float, float], float]:
    return _mul_float32 if dtype == torch.float32 else operator.mul


#: Boxes whose pairs are found at once: first, fewest, most.
_BATCH, _BATCH_MIN, _BATCH_MAX = 16, 8, 4096

Pairs = Tuple[Tensor, Tensor, Tensor]


class _Level:
    """The boxes near one level, as Python values: their scores, states and pairs."""

    def __init__(
        self,
        replay: SlotReplay,
        tensors: Tuple[Tensor, Tensor, Tensor],
        level: Tensor,
        find: Callable[[Tensor], Pairs],
        min_score: float,
    ) -> None:
        self.replay, self.find, self.min_score = replay, find, min_score
        self.ids, self.key, self.status = tensors
        self.keys: Dict[int, float] = {}
        self.state: Dict[int, int] = {}
        self.name: Dict[int, int] = {}
        self.load(level)
        self.local_of = {self.name[i]: i for i in level.tolist()}
        self.top = self.keys[int(level[0])]
        self.mul = _multiply(self.key.dtype)
        self.changed: Dict[int, None] = {}  # an ordered set
        self.weights: Dict[int, List[Tuple[int, float]]] = {}
        # The undecided ones, in slot order now: the order their pairs are found in.
        self.queue = [i for i in self.local_of.values() if self.state[i] == UNDECIDED]
        self.queue.sort(key=lambda i: replay.pos[self.name[i]])
        self.next, self.size, self.batch, self.batch_taken = 0, _BATCH, set(), 0

    def load(self, boxes: Tensor) -> None:
        """Reads the scores, states and names of ``boxes`` not read yet."""
        new = [i for i in boxes.tolist() if i not in self.keys]
        at = torch.tensor(new, dtype=torch.long)
        self.keys.update(zip(new, self.key.index_select(0, at).tolist()))
        self.state.update(zip(new, self.status.index_select(0, at).tolist()))
        self.name.update(zip(new, self.ids.index_select(0, at).tolist()))

    def fetch(self, first: int) -> None:
        """Finds the pairs of ``first`` and of the next boxes of the queue still at the top."""
        if self.batch:  # wider while most of a batch was taken, narrower while most left
            grow = 2 * self.batch_taken >= len(self.batch)
            self.size = min(max(self.size * 2 if grow else self.size // 2, _BATCH_MIN), _BATCH_MAX)
        boxes, k, state, keys = [first], self.next, self.state, self.keys
        while k < len(self.queue) and len(boxes) < self.size:
            i = self.queue[k]
            at_top = state[i] == UNDECIDED and keys[i] == self.top
            if at_top and i not in self.weights and i != first:
                boxes.append(i)
            k += 1
        self.next, self.batch, self.batch_taken = k, set(boxes), 0
        src, dst, w = self.find(torch.tensor(boxes, dtype=torch.long))
        self.load(dst)
        for i in boxes:
            self.weights[i] = []
        for a, b, weight in zip(src.tolist(), dst.tolist(), w.tolist()):
            self.weights[a].append((b, weight))

    def step(self, box: int) -> List[int]:
        """The kernel's step that takes ``box``: its weights, in the order of its pairs.

        Returns:
            The boxes it lowers below the top (or drops), to leave the level.
        """
        local = self.local_of[box]
        state, keys, name = self.state, self.keys, self.name
        if state[local] != UNDECIDED:  # taken in a round
            return []
        if local not in self.weights:
            self.fetch(local)
        self.batch_taken += local in self.batch
        state[local] = TAKEN
        self.changed[local] = None
        out, dropped = [], []
        for j, weight in self.weights[local]:
            if state[j] != UNDECIDED:
                continue
            score = self.mul(keys[j], weight)
            keys[j] = score
            self.changed[j] = None
            if score < self.min_score:
                state[j] = DROPPED
                dropped.append(name[j])
            elif score != score:
                state[j] = NAN
            elif score == self.top:  # 0 * weight: still at the top
                continue
            out.append(name[j])
        if dropped:
            self.replay.drop(box, dropped)
        return out

    def write_back(self) -> None:
        """Copies the scores and states that changed into the tensors."""
        if self.changed:
            at = torch.tensor(list(self.changed), dtype=torch.long)
            values = [self.keys[i] for i in self.changed]
            self.key.index_copy_(0, at, torch.tensor(values, dtype=self.key.dtype))
            states = [self.state[i] for i in self.changed]
            self.status.index_copy_(0, at, torch.tensor(states, dtype=self.status.dtype))


def take_level(
    replay: SlotReplay,
    ids: Tensor,
    key: Tensor,
    status: Tensor,
    level: Tensor,
    find: Callable[[Tensor], Pairs],
    min_score: float,
) -> List[int]:
    """Takes every box at the top score ``key[level]``, as the kernel's steps would.

    Updates ``key`` and ``status`` in place: the level's undecided boxes taken, the
    boxes they overlap weighted in the order taken, and dropped below ``min_score``.
    The pairs of a box are found as it nears its turn, with the next ones in slot
    order: more at a time while most of them are taken, fewer while most are
    lowered first (a cluster of equal scores, where the first taken lowers the rest).

    Args:
        replay: The slots, advanced to the level (every box of a higher score taken).
        ids: ``(m,)`` the boxes' indices in the input (the replay's names).
        key: ``(m,)`` their scores, float32 or float64.
        status: ``(m,)`` int8 states
            (:data:`~mmpar.compat.ops.suppression.soft_nms_take.UNDECIDED`, ...).
        level: ``(k,)`` the boxes at the top score: undecided, or taken in a round
            and not yet replayed (their weights are given already).
        find: ``(src, dst, weight)``, the pairs from some of the level's undecided
            boxes (a ``(b,)`` index tensor) to boxes undecided before the level.
        min_score: Below it a box is dropped.

    Returns:
        The level's boxes (``ids``), in the order taken.
    """
    state = _Level(replay, (ids, key, status), level, find, min_score)
    order = replay.take_in_slot_order(set(state.local_of), state.step)
    state.write_back()
    return order
