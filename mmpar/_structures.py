"""Small helpers to take containers apart and rebuild them with the same type."""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable, Mapping, Tuple

__all__ = ["is_namedtuple", "is_dataclass_instance", "rebuild_mapping", "dataclass_fields", "child_path"]


def is_namedtuple(obj: Any) -> bool:
    """True for instances of ``collections.namedtuple`` and ``typing.NamedTuple`` classes."""
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def is_dataclass_instance(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


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
