"""Grouping of equal keys, groups numbered in the order of their first appearance.

A stable sort of the keys puts each group's items together in index order: an item's
slot in its group is its position after the group's start, and the group's first item
is its first appearance. Ranking the groups by their first items numbers them as a
sequential pass over the items would open them (mmcv's voxelization kernels).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["Groups", "group_first_seen"]


class Groups(NamedTuple):
    """Items grouped by key; the per-item fields are in ``order``, the sorted order.

    Attributes:
        order: ``(M,)`` long, the items sorted by key, equal keys in index order.
        group: ``(M,)`` long, the group of each sorted item, groups numbered by first
            appearance: group 0 holds item 0, group 1 the first item of another key, ...
        slot: ``(M,)`` long, each sorted item's rank in its group (0 for the first).
        first: ``(G,)`` long, each group's first item.
        count: ``(G,)`` long, each group's size.
    """

    order: Tensor
    group: Tensor
    slot: Tensor
    first: Tensor
    count: Tensor


def group_first_seen(keys: Tensor) -> Groups:
    """Group ``keys`` ``(M,)`` by value, the groups numbered in order of first appearance.

    Args:
        keys: ``(M,)`` integer keys.

    Returns:
        The groups (see :class:`Groups`).
    """
    m = keys.numel()
    if m == 0:
        empty = torch.zeros(0, dtype=torch.long, device=keys.device)
        return Groups(empty, empty, empty, empty, empty)
    sorted_keys, order = torch.sort(keys, stable=True)
    opens = torch.ones(m, dtype=torch.bool, device=keys.device)
    opens[1:] = sorted_keys[1:] != sorted_keys[:-1]
    starts = opens.nonzero().squeeze(1)  # where each group, in key order, begins
    by_key = opens.cumsum(0) - 1  # each sorted item's group in key order
    positions = torch.arange(m, device=keys.device)
    slot = positions - starts[by_key]
    ends = torch.cat([starts[1:], starts.new_tensor([m])])
    first_by_key = order[starts]
    seen = torch.argsort(first_by_key)  # key-order groups, by first appearance
    rank = torch.empty_like(seen)
    rank[seen] = torch.arange(seen.numel(), device=keys.device)
    return Groups(order, rank[by_key], slot, first_by_key[seen], (ends - starts)[seen])
