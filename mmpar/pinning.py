"""Pinning: page-locked host memory for tensors and the structures that hold them.

A leaf of the parallel core (it knows no DataContainer), so that both
:class:`~mmpar.data_container.DataContainer` and :mod:`mmpar.transfer` can use it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from mmpar._structures import map_structure
from mmpar.type_handlers import get_handler, is_registered

__all__ = ["pin_structure", "pin_tensor"]

#: Bytes of the pinned block that empty tensors become views of.
_EMPTY_BLOCK = 64


def pin_tensor(t: torch.Tensor) -> torch.Tensor:
    """``t`` in pinned memory, empty tensors included.

    ``Tensor.pin_memory()`` leaves a tensor of 0 elements unpinned (it has no
    bytes, so no page-locked allocation is made and ``is_pinned()`` stays False).
    Here it becomes a 0-element view of a small pinned block, so that every tensor
    of a pinned batch reports ``is_pinned()`` and takes the same copy paths.
    """
    if t.numel() == 0:
        if t.is_pinned():
            return t
        block = torch.empty(_EMPTY_BLOCK, dtype=torch.uint8, pin_memory=True)
        empty = block[:0].view(t.dtype).view(t.shape)
        return empty.requires_grad_() if t.requires_grad else empty
    return t.pin_memory()


def pin_structure(data: Any, adopt: Optional[Callable[[Any], Any]] = None) -> Any:
    """``data`` with every tensor (and registered type) in pinned memory.

    Args:
        data: Tensors, registered types, and lists, tuples, dicts, namedtuples
            and dataclasses of them.
        adopt: Turns a leaf into an object with a ``pin_memory()`` method, or
            returns None (e.g. :func:`~mmpar.data_container.as_container`, which
            adopts mmcv's containers). Leaves that already have ``pin_memory()``
            (mmpar's DataContainer) need no adopting.

    Returns:
        ``data`` rebuilt with its types; objects that cannot be pinned are kept.
    """

    def leaf(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return pin_tensor(obj)
        handler = get_handler(obj)
        if handler is not None:
            return handler.pin_memory(obj)
        adopted = adopt(obj) if adopt is not None else None
        if adopted is not None:
            return adopted.pin_memory()
        if hasattr(obj, "pin_memory") and not isinstance(obj, type):
            return obj.pin_memory()
        return obj

    return map_structure(data, leaf, is_leaf=is_registered)
