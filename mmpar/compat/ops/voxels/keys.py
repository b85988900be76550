"""Integer keys for rows of voxel coordinates: one int64 per row, in the rows' order.

A row ``(c_0, ..., c_{D-1})`` of non-negative integers below ``extents`` gets its
row-major index ``((c_0 e_1 + c_1) e_2 + c_2) ...``: equal rows get equal keys, and keys
sort as the rows do lexicographically (``torch.unique(dim=0)``'s order). Where that index
could pass 2**63 - 1, the key built so far, and if need be the next column, is first
replaced by its rank among the values present (``torch.unique``'s inverse), which keeps
both properties.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

__all__ = ["row_keys"]

_INT64_MAX = (1 << 63) - 1


def row_keys(rows: Tensor, extents: Optional[Sequence[int]] = None) -> Tensor:
    """One int64 key per row of non-negative integers, ordered as the rows.

    Args:
        rows: ``(N, D)`` integer, every entry ``>= 0`` and below its column's extent.
        extents: ``D`` ints, each column's bound; None for the columns' max + 1
            (read from ``rows``).

    Returns:
        ``(N,)`` int64 keys.
    """
    n, d = rows.shape
    if n == 0 or d == 0:
        return torch.zeros(n, dtype=torch.long, device=rows.device)
    if extents is None:
        extents = [top + 1 for top in rows.amax(0).tolist()]
    columns = rows.long().unbind(1)
    key, bound = columns[0], int(extents[0])
    for column, extent in zip(columns[1:], extents[1:]):
        extent = int(extent)
        if bound * extent > _INT64_MAX:
            key, bound = _ranks(key)
        if bound * extent > _INT64_MAX:
            column, extent = _ranks(column)
        key = key * extent + column
        bound *= extent
    return key


def _ranks(values: Tensor) -> Tuple[Tensor, int]:
    """Each value's rank among the distinct values, and their count."""
    distinct, rank = torch.unique(values, return_inverse=True)
    return rank, distinct.numel()
