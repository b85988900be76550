"""ConfigDict, a dict with attribute access, and the merge rules of configs."""

from __future__ import annotations

from typing import Any, List, Mapping, Sequence

import numpy as np

__all__ = ["ConfigDict", "DELETE_KEY", "merge_dicts", "set_by_path", "to_plain"]

#: A dict holding ``_delete_=True`` replaces the dict it is merged onto instead of merging.
DELETE_KEY = "_delete_"


def _convert(value: Any) -> Any:
    """``value`` with every nested dict turned into a ConfigDict and numpy scalars
    into Python ones (so a config dumps, reloads and pickles as plain data)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict) and not isinstance(value, ConfigDict):
        return ConfigDict(value)
    if type(value) in (list, tuple):
        return type(value)(_convert(v) for v in value)
    return value


class ConfigDict(dict):
    """A dict whose keys can also be read and written as attributes.

    ``cfg.model.backbone.depth`` is ``cfg["model"]["backbone"]["depth"]``. Nested
    dicts, also inside lists and tuples, become ConfigDicts when stored. Keys that
    are dict methods (``items``, ``get``, ``copy`` ...) or not identifiers can only be
    read with item access.

    Raises:
        AttributeError: reading or deleting an attribute whose key does not exist
            (so ``hasattr`` and ``getattr(cfg, key, default)`` work).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.update(*args, **kwargs)

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, _convert(value))

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def copy(self) -> "ConfigDict":
        """A shallow copy, still a ConfigDict."""
        return ConfigDict(self)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"ConfigDict has no key {name!r}; keys: {sorted(map(str, self))}"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(f"ConfigDict has no key {name!r}") from None

    def __reduce__(self) -> Any:
        return (ConfigDict, (dict(self),))

    def __deepcopy__(self, memo: dict) -> "ConfigDict":
        import copy

        result = ConfigDict()
        memo[id(self)] = result
        for key, value in self.items():
            dict.__setitem__(result, copy.deepcopy(key, memo), copy.deepcopy(value, memo))
        return result

    def __dir__(self) -> List[str]:
        return sorted(
            set(super().__dir__()) | {k for k in self if isinstance(k, str) and k.isidentifier()}
        )

    def to_dict(self) -> dict:
        """Plain nested dicts, lists and tuples, sharing no containers with this one."""
        return to_plain(self)


def to_plain(value: Any) -> Any:
    """``value`` with every dict turned into a plain ``dict`` (containers copied)."""
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(to_plain(v) for v in value)
    return value


def _strip_delete(value: Any, path: str) -> Any:
    """``value`` as a ConfigDict tree with every ``_delete_`` key checked and removed."""
    if isinstance(value, dict):
        _check_delete_flag(value, path)
        return ConfigDict(
            {k: _strip_delete(v, _join(path, k)) for k, v in value.items() if k != DELETE_KEY}
        )
    if type(value) in (list, tuple):
        return type(value)(_strip_delete(v, _join(path, i)) for i, v in enumerate(value))
    return value


def _check_delete_flag(value: Mapping, path: str) -> None:
    if DELETE_KEY in value and not isinstance(value[DELETE_KEY], bool):
        raise TypeError(
            f"{_join(path, DELETE_KEY)}: expected True or False, got "
            f"{type(value[DELETE_KEY]).__name__} {value[DELETE_KEY]!r}"
        )


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def merge_dicts(base: Mapping, new: Mapping, path: str = "") -> ConfigDict:
    """Merge ``new`` onto ``base`` recursively; neither is modified.

    Dicts are merged key by key; any other value of ``new`` (lists included)
    replaces the value of ``base``. A dict of ``new`` with ``_delete_=True``
    replaces the dict of ``base`` wholesale. ``_delete_`` keys never reach the result.

    Args:
        base: The config being overridden.
        new: The overriding config.
        path: Dotted key of ``new`` within the whole config, for error messages.

    Returns:
        The merged config.

    Raises:
        TypeError: a ``_delete_`` value is not a bool; the message names its key.
    """
    _check_delete_flag(new, path)
    if new.get(DELETE_KEY, False):
        return _strip_delete(new, path)
    out = ConfigDict(base)
    for key, value in new.items():
        if key == DELETE_KEY:
            continue
        old = out.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            out[key] = merge_dicts(old, value, _join(path, key))
        else:
            out[key] = _strip_delete(value, _join(path, key))
    return out


def set_by_path(root: dict, key: str, value: Any, allow_list_keys: bool = True) -> None:
    """Set the value at a dotted key, creating missing dicts on the way.

    ``"data.pipeline.1.scale"`` sets ``root["data"]["pipeline"][1]["scale"]``. A dict
    value stored onto an existing dict is merged with :func:`merge_dicts`.

    Args:
        root: The config to modify in place.
        key: Dotted key; parts that walk into a list or tuple are integer indexes.
        value: The value to store.
        allow_list_keys: Allow indexes into lists and tuples (tuples are rebuilt).

    Raises:
        ValueError: ``key`` has an empty part, walks through a value that is not a
            dict, list or tuple, or indexes a list with a part that is not an
            in-range integer (or at all, without ``allow_list_keys``).
    """
    parts = key.split(".")
    if not all(parts):
        raise ValueError(f"{key!r}: a dotted key must not have empty parts")
    _set(root, parts, 0, value, key, allow_list_keys)


def _set(
    node: Any, parts: Sequence[str], depth: int, value: Any, key: str, allow_lists: bool
) -> Any:
    """Set ``parts[depth:]`` inside ``node``; returns ``node`` or, for a tuple, its copy."""
    head, last = parts[depth], depth == len(parts) - 1
    where = ".".join(parts[:depth]) or "the config root"
    if isinstance(node, dict):
        old = node.get(head)
        if last:
            node[head] = _merged(old, value, key)
        elif head not in node:
            node[head] = _set(ConfigDict(), parts, depth + 1, value, key, allow_lists)
        else:
            node[head] = _set(old, parts, depth + 1, value, key, allow_lists)
        return node
    if isinstance(node, (list, tuple)):
        index = _list_index(node, head, where, key, allow_lists)
        items = node if isinstance(node, list) else list(node)
        items[index] = (
            _merged(items[index], value, key)
            if last
            else _set(items[index], parts, depth + 1, value, key, allow_lists)
        )
        return items if isinstance(node, list) else tuple(items)
    raise ValueError(
        f"{key!r}: cannot set a key inside {where!r}, which holds a {type(node).__name__} "
        f"({node!r}), not a dict or list"
    )


def _merged(old: Any, value: Any, key: str) -> Any:
    if isinstance(old, dict) and isinstance(value, dict):
        return merge_dicts(old, value, key)
    return _strip_delete(value, key)


def _list_index(node: Sequence, head: str, where: str, key: str, allow_lists: bool) -> int:
    kind = type(node).__name__
    if not allow_lists:
        raise ValueError(
            f"{key!r}: {where!r} is a {kind}; indexing into it needs allow_list_keys=True"
        )
    try:
        index = int(head)
    except ValueError:
        raise ValueError(
            f"{key!r}: {where!r} is a {kind}; expected an integer index, got {head!r}"
        ) from None
    if not -len(node) <= index < len(node):
        raise ValueError(
            f"{key!r}: index {index} is out of range for {where!r}, a {kind} of length {len(node)}"
        )
    return index
