"""Teach mmpar a type of your own, once, for collate, scatter, gather and pinning.

Example: a ``BoxList`` holding the boxes of a batch of images::

    import mmpar

    mmpar.register_type(
        BoxList,
        collate=BoxList.cat,                       # list of samples -> one batch
        split=lambda b, sizes: b.split(sizes),     # batch -> consecutive pieces
        to=lambda b, device: b.to(device),         # move one piece
        gather=lambda pieces, device: BoxList.cat([p.to(device) for p in pieces]),
        pin_memory=lambda b: b.pin_memory(),
        length=len,                                # samples in a batch
    )

From then on a ``BoxList`` field outside a DataContainer is batched over the whole
batch with ``collate``, cut by :func:`mmpar.scatter` into the same pieces as the
batch's other fields with ``split`` and moved with ``to``, brought back by
:func:`mmpar.gather` with ``gather``, and pinned by ``DataLoader(pin_memory=True)``.
Inside a DataContainer that is neither ``stack`` nor ``cpu_only`` each sample's
``BoxList`` is kept in the chunk's list and moved with ``to``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Type

import torch

__all__ = ["TypeHandler", "register_type", "unregister_type", "get_handler", "is_registered"]


def _no_pin(obj: Any) -> Any:
    return obj


@dataclass(frozen=True)
class TypeHandler:
    """How mmpar batches, splits, moves, gathers and pins one user type.

    Attributes:
        collate: ``f(samples: list[T]) -> T``, batch the samples of a whole batch.
        split: ``f(batch: T, sizes: list[int]) -> list[T]``, consecutive pieces of
            ``sizes[i]`` samples each.
        to: ``f(obj: T, device: torch.device) -> T``, the object on ``device``.
        gather: ``f(pieces: list[T], device: torch.device) -> T``, the pieces
            joined in order on ``device``.
        pin_memory: ``f(obj: T) -> T``, the object in pinned memory.
        length: ``f(batch: T) -> int``, the number of samples in a batch.
    """

    collate: Callable[[List[Any]], Any]
    split: Callable[[Any, List[int]], Sequence[Any]]
    to: Callable[[Any, torch.device], Any]
    gather: Callable[[List[Any], torch.device], Any]
    pin_memory: Callable[[Any], Any] = _no_pin
    length: Callable[[Any], int] = len


_HANDLERS: Dict[type, TypeHandler] = {}


def register_type(
    cls: Type[Any],
    *,
    collate: Callable[[List[Any]], Any],
    split: Callable[[Any, List[int]], Sequence[Any]],
    to: Callable[[Any, torch.device], Any],
    gather: Callable[[List[Any], torch.device], Any],
    pin_memory: Optional[Callable[[Any], Any]] = None,
    length: Callable[[Any], int] = len,
) -> TypeHandler:
    """Register how mmpar treats instances of ``cls`` (and of its subclasses).

    Args:
        cls: The type.
        collate, split, to, gather, pin_memory, length: See :class:`TypeHandler`;
            ``pin_memory=None`` leaves objects unpinned.

    Returns:
        The registered handler.

    Raises:
        TypeError: ``cls`` is not a class, or a hook is not callable.
        ValueError: ``cls`` is a type mmpar already handles itself.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_type: cls must be a class, got {type(cls).__name__}")
    if issubclass(cls, (torch.Tensor, list, tuple, dict, str)):
        raise ValueError(f"register_type: {cls.__name__} is a type mmpar already handles")
    hooks = dict(collate=collate, split=split, to=to, gather=gather, length=length)
    if pin_memory is not None:
        hooks["pin_memory"] = pin_memory
    for name, hook in hooks.items():
        if not callable(hook):
            raise TypeError(f"register_type: {name} must be callable, got {type(hook).__name__}")
    handler = TypeHandler(**hooks)
    _HANDLERS[cls] = handler
    return handler


def unregister_type(cls: Type[Any]) -> None:
    """Forget ``cls``; a no-op when it was not registered."""
    _HANDLERS.pop(cls, None)


def get_handler(obj: Any) -> Optional[TypeHandler]:
    """The handler registered for ``type(obj)`` or its nearest base class, if any."""
    if not _HANDLERS:
        return None
    for klass in type(obj).__mro__:
        handler = _HANDLERS.get(klass)
        if handler is not None:
            return handler
    return None


def is_registered(obj: Any) -> bool:
    """Whether ``obj``'s type (or a base class) has a handler."""
    return get_handler(obj) is not None
