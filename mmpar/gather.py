"""gather: per-target outputs merged onto one device, the inverse of :func:`~mmpar.scatter`.

Tensors are concatenated along ``dim``, per-image lists concatenated whole and in
target order, dicts, tuples, namedtuples and dataclasses rebuilt with their types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, List

import torch

from mmpar._structures import (
    child_path,
    dataclass_fields,
    is_dataclass_instance,
    is_namedtuple,
    rebuild_mapping,
)
from mmpar.devices import Target, resolve_device
from mmpar.transfer import map_tensors
from mmpar.type_handlers import get_handler

__all__ = ["gather"]


def gather(outputs: Sequence[Any], target_device: Target, dim: int = 0) -> Any:
    """Bring per-target outputs back to one device; the inverse of
    :func:`~mmpar.scatter_gather.scatter` for what models return.

    Tensors are moved and concatenated along ``dim`` (0-dim tensors stacked into a
    vector); mappings gathered key by key; tuples, namedtuples and dataclasses field
    by field; lists concatenated in target order (per-image results come back as
    one list, in sample order) with their tensors moved; ``None`` stays ``None``;
    registered types use their ``gather`` hook; other values come back as the list
    of per-target values. Padding added by collate is not undone.

    Args:
        outputs: One output per target.
        target_device: Where the result goes (``-1`` or ``"cpu"`` for the CPU).
        dim: Dimension along which tensors are concatenated.

    Raises:
        TypeError: ``outputs`` is not a non-empty list or tuple, or targets returned
            different kinds of values for one field.
        ValueError: Mappings with different keys (the message names them), tuples
            of different lengths, tensors whose shapes cannot be joined along
            ``dim``, or an unknown ``target_device``.
    """
    device = resolve_device(target_device, "gather: target_device")
    if not isinstance(outputs, (list, tuple)):
        raise TypeError(
            "gather: outputs must be a list with one entry per target, got "
            f"{type(outputs).__name__}"
        )
    if len(outputs) == 0:
        raise ValueError("gather: outputs is empty, expected one entry per target")
    return _gather(list(outputs), device, dim, "")


def _gather(items: List[Any], device: torch.device, dim: int, path: str) -> Any:
    first = items[0]
    name = f"gather: field {path!r}" if path else "gather: outputs"
    for i, item in enumerate(items):
        if type(item) is not type(first) and not (
            isinstance(first, Mapping) and isinstance(item, Mapping)
        ):
            raise TypeError(
                f"{name}: target 0 returned {type(first).__name__}, target {i} "
                f"{type(item).__name__}"
            )
    if first is None:
        return None
    if isinstance(first, torch.Tensor):
        return _join_tensors(items, device, dim, name)
    handler = get_handler(first)
    if handler is not None:
        return handler.gather(items, device)
    if isinstance(first, Mapping):
        keys = list(first)
        for i, item in enumerate(items):
            if set(item) != set(keys):
                raise ValueError(
                    f"{name}: targets returned different keys; target {i} lacks "
                    f"{sorted(map(str, set(keys) - set(item)))} and adds "
                    f"{sorted(map(str, set(item) - set(keys)))}"
                )
        return rebuild_mapping(
            first,
            ((k, _gather([it[k] for it in items], device, dim, child_path(path, k))) for k in keys),
        )
    if isinstance(first, list):
        return [map_tensors(x, lambda t: t.to(device), device) for item in items for x in item]
    if isinstance(first, tuple):
        if any(len(item) != len(first) for item in items):
            raise ValueError(
                f"{name}: targets returned tuples of lengths {[len(it) for it in items]}"
            )
        columns = [
            _gather(list(col), device, dim, child_path(path, j))
            for j, col in enumerate(zip(*items))
        ]
        return type(first)(*columns) if is_namedtuple(first) else tuple(columns)
    if is_dataclass_instance(first):
        return dataclasses.replace(
            first,
            **{
                n: _gather([getattr(it, n) for it in items], device, dim, child_path(path, n))
                for n in dataclass_fields(first)
            },
        )
    return items


def _join_tensors(
    items: List[torch.Tensor], device: torch.device, dim: int, name: str
) -> torch.Tensor:
    """Concatenate along ``dim`` (0-dim tensors: stack); shapes that do not fit are a ValueError."""
    moved = [t.to(device) for t in items]
    try:
        return torch.stack(moved) if moved[0].dim() == 0 else torch.cat(moved, dim)
    except (RuntimeError, IndexError) as err:
        shapes = [tuple(t.shape) for t in items]
        raise ValueError(
            f"{name}: cannot join the targets' tensors along dim={dim}, their shapes are {shapes} "
            f"({err})"
        ) from None
