"""Sites of a sparse tensor as integer keys, and the check of indices.

A site ``(b, x_0, ..., x_{D-1})`` of a grid of shape ``(s_0, ..., s_{D-1})`` has the
key ``((b * s_0 + x_0) * s_1 + x_1) ... * s_{D-1} + x_{D-1}``: keys sort as the
sites do in row-major order, batch first, and adding a constant to every key (a
shift of all sites by one offset) keeps their order.
"""

from __future__ import annotations

import operator
from typing import Any, List, Sequence

import torch
from torch import Tensor

__all__ = ["as_int_list", "check_indices", "keys_to_sites", "site_keys"]


def as_int_list(op: str, name: str, value: Any, ndim: int) -> List[int]:
    """``value`` (an int, or a sequence of ``ndim`` ints) as a list of ``ndim`` ints.

    Raises:
        TypeError: an element that is not an int.
        ValueError: a sequence whose length is not ``ndim``.
    """
    try:  # lists, tuples, arrays, tensors; a number (or 0-d array) is every element
        items = [value] * ndim if isinstance(value, (str, bytes)) else list(value)
    except TypeError:
        items = [value] * ndim
    if len(items) != ndim:
        raise ValueError(f"{op}: {name} must have {ndim} elements, found {value!r}")
    try:
        if any(isinstance(v, bool) for v in items):
            raise TypeError
        return [operator.index(v) for v in items]
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int or a sequence of ints, found {value!r}")


def check_indices(op: str, indices: Any, spatial_shape: Sequence[int], batch_size: int) -> Tensor:
    """``indices`` as ``(N, D + 1)`` int64, checked against the grid and the batch.

    Costs one reduction and one device-to-host copy of ``2 (D + 1)`` numbers.

    Raises:
        TypeError: not an integer tensor.
        ValueError: a shape other than ``(N, len(spatial_shape) + 1)``, or a batch
            index outside ``[0, batch_size)`` or a coordinate outside
            ``[0, spatial_shape[d])``, naming the column.
    """
    if not isinstance(indices, Tensor) or indices.is_floating_point() or indices.is_complex():
        found = indices.dtype if isinstance(indices, Tensor) else type(indices).__name__
        raise TypeError(f"{op}: indices must be an integer tensor, found {found}")
    ndim = len(spatial_shape)
    if indices.dim() != 2 or indices.shape[1] != ndim + 1:
        raise ValueError(
            f"{op}: indices must have shape (N, {ndim + 1}) for a {ndim}-D spatial_shape, "
            f"found {tuple(indices.shape)}"
        )
    indices = indices.long()
    if indices.shape[0] == 0:
        return indices
    bounds = torch.stack([indices.amin(0), indices.amax(0)]).tolist()
    limits = [batch_size] + list(spatial_shape)
    for col, (low, high, limit) in enumerate(zip(bounds[0], bounds[1], limits)):
        if low < 0 or high >= limit:
            what = "batch index" if col == 0 else f"coordinate in spatial_shape[{col - 1}]"
            limit_name = f"batch_size={limit}" if col == 0 else f"{limit}"
            bad = low if low < 0 else high
            raise ValueError(
                f"{op}: indices[:, {col}] ({what}) must be in [0, {limit_name}), found {bad}"
            )
    return indices


def site_keys(sites: Tensor, shape: Sequence[int]) -> Tensor:
    """``(...,)`` int64 keys of ``(..., D + 1)`` int64 sites ``(batch, *coords)``."""
    key = sites[..., 0]
    for d, size in enumerate(shape):
        key = key * size + sites[..., d + 1]
    return key


def keys_to_sites(keys: Tensor, shape: Sequence[int]) -> Tensor:
    """``(N, D + 1)`` int32 sites ``(batch, *coords)`` of ``(N,)`` int64 keys."""
    cols = []
    rest = keys
    for size in reversed(list(shape)):
        cols.append(rest % size)
        rest = torch.div(rest, size, rounding_mode="floor")
    cols.append(rest)
    return torch.stack(cols[::-1], 1).to(torch.int32)
