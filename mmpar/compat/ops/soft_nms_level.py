"""Soft-NMS where several boxes share the top score: the kernel's steps there, in slot order.

Not an mmcv module: :mod:`mmpar.compat.ops.soft_nms_rounds` calls :func:`take_level`
when equal scores block its rounds. mmcv's kernel takes the box of the top score
that comes first in its slots, which lowers the boxes it overlaps (those at the
top score leave it) and may drop some, then the next first in slot order, until no
box is left at that score. Which one comes first depends on the swaps and refills
of every step before (:class:`~mmpar.compat.ops.soft_nms_kernel.SlotReplay`), so
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

from mmpar.compat.ops.soft_nms_kernel import SlotReplay
from mmpar.compat.ops.soft_nms_take import DROPPED, NAN, TAKEN, UNDECIDED

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
        status: ``(m,)`` int8 states (:data:`~mmpar.compat.ops.soft_nms_take.UNDECIDED`, ...).
        level: ``(k,)`` the boxes at the top score: undecided, or taken in a round
            and not yet replayed (their weights are given already).
        find: ``(src, dst, weight)``, the pairs from some of the level's undecided
            boxes (a ``(b,)`` index tensor) to boxes undecided before the level.
        min_score: Below it a box is dropped.

    Returns:
        The level's boxes (``ids``), in the order taken.
    """
    keys: Dict[int, float] = {}
    state: Dict[int, int] = {}
    name: Dict[int, int] = {}

    def load(boxes: Tensor) -> None:
        new = [i for i in boxes.tolist() if i not in keys]
        at = torch.tensor(new, dtype=torch.long)
        keys.update(zip(new, key.index_select(0, at).tolist()))
        state.update(zip(new, status.index_select(0, at).tolist()))
        name.update(zip(new, ids.index_select(0, at).tolist()))

    load(level)
    local_of = {name[i]: i for i in level.tolist()}
    top = keys[int(level[0])]
    # The undecided ones, in slot order now: the order their pairs are found in.
    queue = [i for i in local_of.values() if state[i] == UNDECIDED]
    queue.sort(key=lambda i: replay.pos[name[i]])
    weights: Dict[int, List[Tuple[int, float]]] = {}
    batch = {"next": 0, "size": _BATCH, "last": set(), "taken": 0}

    def fetch(first: int) -> None:
        last, size = batch["last"], batch["size"]
        if last:  # how the last batch went
            size = size * 2 if 2 * batch["taken"] >= len(last) else size // 2
            size = min(max(size, _BATCH_MIN), _BATCH_MAX)
        boxes = [first]
        k = batch["next"]
        while k < len(queue) and len(boxes) < size:
            i = queue[k]
            if state[i] == UNDECIDED and keys[i] == top and i not in weights and i != first:
                boxes.append(i)
            k += 1
        batch.update(next=k, size=size, last=set(boxes), taken=0)
        src, dst, w = find(torch.tensor(boxes, dtype=torch.long))
        load(dst)
        for i in boxes:
            weights[i] = []
        for a, b, weight in zip(src.tolist(), dst.tolist(), w.tolist()):
            weights[a].append((b, weight))

    mul = _multiply(key.dtype)
    changed: Dict[int, None] = {}

    def step(box: int) -> List[int]:
        local = local_of[box]
        if state[local] != UNDECIDED:  # taken in a round
            return []
        if local not in weights:
            fetch(local)
        if local in batch["last"]:
            batch["taken"] += 1
        state[local] = TAKEN
        changed[local] = None
        out, dropped = [], []
        for j, weight in weights[local]:
            if state[j] != UNDECIDED:
                continue
            score = mul(keys[j], weight)
            keys[j] = score
            changed[j] = None
            if score < min_score:
                state[j] = DROPPED
                dropped.append(name[j])
            elif score != score:
                state[j] = NAN
            elif score == top:  # 0 * weight: still at the top
                continue
            out.append(name[j])
        if dropped:
            replay.drop(box, dropped)
        return out

    order = replay.take_in_slot_order(set(local_of), step)
    if changed:
        at = torch.tensor(list(changed), dtype=torch.long)
        key.index_copy_(0, at, torch.tensor([keys[i] for i in changed], dtype=key.dtype))
        status.index_copy_(0, at, torch.tensor([state[i] for i in changed], dtype=status.dtype))
    return order
