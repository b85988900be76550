"""Small helpers to take containers apart and rebuild them with the same type."""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Optional, Tuple

__all__ = [
    "child_path",
    "dataclass_fields",
    "is_dataclass_instance",
    "is_namedtuple",
    "map_structure",
    "rebuild_mapping",
]


def is_namedtuple(obj: Any) -> bool:
    """True for instances of ``collections.namedtuple`` and ``typing.NamedTuple`` classes."""
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def is_dataclass_instance(obj: Any) -> bool:
    return _is_dataclass_type(type(obj))


@functools.lru_cache(maxsize=None)
def _is_dataclass_type(cls: type) -> bool:
    # Cached per type: scatter asks this of every leaf of every batch.
    return dataclasses.is_dataclass(cls) and not issubclass(cls, type)


def dataclass_fields(obj: Any) -> Tuple[str, ...]:
    """Names of the fields that ``__init__`` takes (the ones a rebuild passes on)."""
    return tuple(f.name for f in dataclasses.fields(obj) if f.init)


def rebuild_mapping(template: Mapping, items: Iterable[Tuple[Any, Any]]) -> Mapping:
    """A mapping of ``template``'s type holding ``items`` (a ``defaultdict`` keeps its
    factory); a plain dict if that type cannot be built from a dict."""
    items = dict(items)
    if isinstance(template, collections.defaultdict):
        return type(template)(template.default_factory, items)
    try:
        return type(template)(items)
    except TypeError:
        return items


def child_path(path: str, key: Any) -> str:
    """``'img_metas'``, ``'data.img'``, ``'inputs[1]'``: how errors name a field."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def map_structure(
    obj: Any, leaf: Callable[[Any], Any], is_leaf: Optional[Callable[[Any], bool]] = None
) -> Any:
    """``obj`` rebuilt with ``leaf(x)`` in place of every leaf ``x``.

    Mappings, lists, tuples, namedtuples and dataclasses are walked and rebuilt
    with their types; strings, bytes and everything else are leaves, as is any
    object for which ``is_leaf`` says so (a registered type that happens to be a
    sequence). A part in which no leaf changed is returned as it is, not copied.
    """
    if (is_leaf is not None and is_leaf(obj)) or isinstance(obj, (str, bytes)):
        return leaf(obj)
    if isinstance(obj, Mapping):
        items = [(k, map_structure(v, leaf, is_leaf)) for k, v in obj.items()]
        return obj if all(new is obj[k] for k, new in items) else rebuild_mapping(obj, items)
    if isinstance(obj, (list, tuple)):
        items = [map_structure(v, leaf, is_leaf) for v in obj]
        if all(new is old for new, old in zip(items, obj)):
            return obj
        if is_namedtuple(obj):
            return type(obj)(*items)
        return tuple(items) if isinstance(obj, tuple) else items
    if is_dataclass_instance(obj):
        changed = {}
        for name in dataclass_fields(obj):
            old = getattr(obj, name)
            new = map_structure(old, leaf, is_leaf)
            if new is not old:
                changed[name] = new
        return dataclasses.replace(obj, **changed) if changed else obj
    return leaf(obj)
