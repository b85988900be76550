"""Which points a neighbourhood search keeps, in the order mmcv's kernels give them.

Two rules, over rows of a ``(R, N)`` block (one row per query point, one column per
point of its cloud):

* :func:`first_true`: the first ``k`` points that pass a test, in index order (a radius
  search that scans the cloud and stops when it has ``k``: ``ball_query``).
* :func:`k_smallest`: the ``k`` smallest values below a limit, ascending, equal values by
  ascending index (a running top-k that takes a point only when strictly nearer than the
  worst kept: ``three_nn``; ``knn``'s rule among unequal values).
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

__all__ = ["first_true", "k_smallest"]


def first_true(mask: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """The positions of the first ``k`` True entries of each row, in index order.

    Args:
        mask: ``(R, N)`` bool.
        k: How many to take per row (>= 0).

    Returns:
        ``(index, count)``: ``index`` ``(R, k)`` int64, a row's first ``min(k, count)``
        slots its first True positions ascending, the others 0; ``count`` ``(R,)`` int64,
        the True entries of the row (all of them, not capped at ``k``).
    """
    rows = mask.shape[0]
    index = torch.zeros((rows, k), dtype=torch.long, device=mask.device)
    hits = mask.nonzero()  # row-major: each row's hits ascending
    row, col = hits[:, 0], hits[:, 1]
    count = torch.bincount(row, minlength=rows)
    # A hit's rank within its row: its place in `hits` less that of the row's first hit.
    row_start = torch.cumsum(count, 0) - count
    rank = torch.arange(row.shape[0], device=mask.device) - row_start[row]
    keep = rank < k
    index[row[keep], rank[keep]] = col[keep]
    return index, count


def _sort_pairs(values: Tensor, index: Tensor) -> Tuple[Tensor, Tensor]:
    """Rows of ``(value, index)`` pairs sorted by value, equal values by index."""
    index, order = index.sort(-1)
    values = values.gather(-1, order)
    values, order = values.sort(dim=-1, stable=True)
    return values, index.gather(-1, order)


def _first_of_ties(values: Tensor, kth: Tensor, k: int) -> Tensor:
    """``(R, k)`` int64: the set of a row's ``k`` smallest with the ``k``-th value ``kth``
    ``(R, 1)`` shared by more than one entry, those of equal value first by index; in
    index order."""
    below = values < kth
    tied = values == kth
    room = k - below.sum(-1, keepdim=True)
    chosen = below | (tied & (torch.cumsum(tied, -1) <= room))
    return chosen.nonzero()[:, 1].view(values.shape[0], k)


def k_smallest(values: Tensor, k: int, limit: float) -> Tuple[Tensor, Tensor]:
    """The ``k`` smallest values of each row below ``limit``, ascending, ties by index.

    A value that is not below ``limit`` (NaN included) is never taken: like a kernel whose
    running best values start at ``limit`` with index 0 and take a point only when it is
    strictly below the worst kept.

    Args:
        values: ``(R, N)`` float.
        k: How many per row (>= 0).
        limit: A number of ``values``' dtype (see :func:`.distance.at_least`).

    Returns:
        ``(kept, index)``, both ``(R, k)``: the values (``limit`` in slots no value fills)
        and their positions, int64 (0 in those slots).
    """
    rows, n = values.shape
    take = min(k, n)
    kept = values.new_full((rows, k), limit)
    index = torch.zeros((rows, k), dtype=torch.long, device=values.device)
    if take == 0 or rows == 0:
        return kept, index
    # One more than needed: a (k+1)-th value equal to the k-th means ties at the boundary.
    top, top_index = values.topk(min(take + 1, n), -1, largest=False, sorted=True)
    top_index = top_index[:, :take]
    if n > take:
        kth = top[:, take - 1 : take]
        tied = (top[:, take : take + 1] == kth).squeeze(1) & (kth < limit).squeeze(1)
        rows_tied = tied.nonzero().squeeze(1)
        if rows_tied.numel():
            top_index[rows_tied] = _first_of_ties(values[rows_tied], kth[rows_tied], take)
    top, top_index = _sort_pairs(values.gather(-1, top_index), top_index)
    valid = top < limit
    kept[:, :take] = torch.where(valid, top, kept[:, :take])
    index[:, :take] = torch.where(valid, top_index, 0)
    return kept, index
