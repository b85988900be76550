"""Bring every rank's per-sample results together, in dataset order."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

from mmpar.dist.utils import is_distributed
from mmpar.utils.checks import is_int

__all__ = ["all_gather_object_list", "collect_results"]


def all_gather_object_list(obj: Any) -> List[Any]:
    """Gather one picklable object from every rank, on every rank.

    Args:
        obj: Any picklable object.

    Returns:
        ``[obj of rank 0, obj of rank 1, ...]``; ``[obj]`` without a group.
    """
    if not is_distributed():
        return [obj]
    gathered: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def collect_results(
    results: Sequence[Any], size: int, indices: Optional[Sequence[int]] = None
) -> List[Any]:
    """Bring every rank's per-sample results together in dataset order.

    A collective: every rank must call it, and every rank gets the full list
    (results travel through ``all_gather_object``, so they must be picklable).

    Without ``indices``, rank ``r`` must hold the results of dataset indices
    ``r, r + W, r + 2W, ...`` (``W`` = world size), the layout of
    ``DistributedSampler(shuffle=False)``; the results are interleaved and the
    samples the sampler repeated to even out the ranks are cut off at ``size``.
    With ``indices`` (the dataset index of each of this rank's results, in any
    order, from any sampler), each result is put at its index; repeated
    indices keep the first result (lowest rank, then earliest position).

    Args:
        results: This rank's results, one per processed sample.
        size: Dataset length, i.e. the length of the returned list.
        indices: Optional dataset index of each entry of ``results``; all
            ranks pass indices or none does.

    Returns:
        ``size`` results, entry ``i`` for dataset index ``i``.

    Raises:
        TypeError: ``results``/``indices`` are not sequences, ``size`` or an
            index is not an int.
        ValueError: ``size < 0``; ``len(indices) != len(results)``; an index
            outside ``range(size)``; ranks disagree on passing indices; fewer
            results than ``size`` over all ranks; without indices, per-rank
            lengths that cannot come from an interleaved split; with indices,
            a dataset index no rank covered.
    """
    results, own_indices = _check_collect_args(results, size, indices)
    parts = all_gather_object_list((results, own_indices))
    with_indices = [part[1] is not None for part in parts]
    if any(with_indices) and not all(with_indices):
        ranks = [r for r, flag in enumerate(with_indices) if not flag]
        raise ValueError(f"indices: ranks {ranks} passed none while other ranks passed indices")
    total = sum(len(part[0]) for part in parts)
    if total < size:
        raise ValueError(
            f"results: {total} results over {len(parts)} ranks, fewer than size={size}"
        )
    if all(with_indices):
        return _place_by_index(parts, size)
    return _interleave([part[0] for part in parts], size)


def _check_collect_args(
    results: Sequence[Any], size: int, indices: Optional[Sequence[int]]
) -> Tuple[List[Any], Optional[List[int]]]:
    """Validate :func:`collect_results` arguments; return them as lists."""
    if isinstance(results, (str, bytes)) or not isinstance(results, Sequence):
        raise TypeError(
            f"results: expected a list of per-sample results, got {type(results).__name__}"
        )
    if not is_int(size):
        raise TypeError(f"size: expected an int, got {type(size).__name__}")
    if size < 0:
        raise ValueError(f"size: expected a dataset length >= 0, got {size}")
    if indices is None:
        return list(results), None
    if isinstance(indices, torch.Tensor):
        indices = indices.tolist()
    if isinstance(indices, (str, bytes)) or not isinstance(indices, (Sequence, np.ndarray)):
        raise TypeError(f"indices: expected a sequence of ints, got {type(indices).__name__}")
    if len(indices) != len(results):
        raise ValueError(
            f"indices: expected one index per result ({len(results)}), got {len(indices)}"
        )
    checked: List[int] = []
    for index in indices:
        if not is_int(index):
            raise TypeError(f"indices: expected ints, found {type(index).__name__} {index!r}")
        if not 0 <= index < size:
            raise ValueError(f"indices: index {int(index)} is outside range(size={size})")
        checked.append(int(index))
    return list(results), checked


def _interleave(per_rank: List[List[Any]], size: int) -> List[Any]:
    """Merge ``DistributedSampler(shuffle=False)``-style parts into dataset order."""
    lengths = [len(part) for part in per_rank]
    # Rank r holds r, r+W, ...: lengths never grow with the rank and differ by at most one.
    if any(a < b for a, b in zip(lengths, lengths[1:])) or max(lengths) - min(lengths) > 1:
        raise ValueError(
            f"results: per-rank lengths {lengths} do not match an interleaved split "
            "(rank r holding indices r, r+W, ...); pass indices="
        )
    ordered = [part[i] for i in range(max(lengths)) for part in per_rank if i < len(part)]
    return ordered[:size]


_MISSING = object()


def _place_by_index(parts: List[Tuple[List[Any], Optional[List[int]]]], size: int) -> List[Any]:
    """Put each result at its dataset index; raise if one is not covered."""
    out: List[Any] = [_MISSING] * size
    for results, indices in parts:
        for index, result in zip(indices or [], results):
            if out[index] is _MISSING:
                out[index] = result
    missing = [i for i, value in enumerate(out) if value is _MISSING]
    if missing:
        shown = missing[:10]
        more = f" and {len(missing) - len(shown)} more" if len(missing) > len(shown) else ""
        raise ValueError(
            f"indices: {len(missing)} of {size} dataset indices have no result: {shown}{more}"
        )
    return out
