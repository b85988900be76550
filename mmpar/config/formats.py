"""Write configs as readable Python text and check that they can be dumped."""

from __future__ import annotations

import keyword
import math
import unicodedata
from typing import Any, Mapping

__all__ = ["check_dumpable", "format_python"]

_LINE_WIDTH = 88
_INDENT = 4
_SCALARS = (type(None), bool, int, float, str)


def _is_name(key: Any) -> bool:
    # Python reads identifiers in NFKC form: ``dict(µ=1)`` has the key "μ" (Greek mu),
    # not "µ" (micro sign). Only names that read back as themselves are written as names.
    return (
        isinstance(key, str)
        and key.isidentifier()
        and not keyword.iskeyword(key)
        and unicodedata.normalize("NFKC", key) == key
    )


def _scalar(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def _inline(value: Any) -> str:
    """``value`` as one line of Python."""
    if isinstance(value, dict):
        if value and all(_is_name(k) for k in value):
            return "dict(" + ", ".join(f"{k}={_inline(v)}" for k, v in value.items()) + ")"
        return "{" + ", ".join(f"{_inline(k)}: {_inline(v)}" for k, v in value.items()) + "}"
    if type(value) is list:
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    if type(value) is tuple:
        inner = ", ".join(_inline(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return _scalar(value)


def _block(value: Any, indent: int) -> str:
    """``value`` as Python text whose inner lines are indented by ``indent + 4``."""
    one_line = _inline(value)
    if (
        indent + len(one_line) <= _LINE_WIDTH
        or not isinstance(value, (dict, list, tuple))
        or not value
    ):
        return one_line
    pad, inner = " " * indent, " " * (indent + _INDENT)
    if isinstance(value, dict):
        named = all(_is_name(k) for k in value)
        lines = [
            f"{inner}{k}={_block(v, indent + _INDENT)},"
            if named
            else f"{inner}{_inline(k)}: {_block(v, indent + _INDENT)},"
            for k, v in value.items()
        ]
        opening, closing = ("dict(", ")") if named else ("{", "}")
    else:
        lines = [f"{inner}{_block(v, indent + _INDENT)}," for v in value]
        opening, closing = ("[", "]") if type(value) is list else ("(", ")")
    return opening + "\n" + "\n".join(lines) + "\n" + pad + closing


def format_python(cfg: Mapping[str, Any]) -> str:
    """A config as Python assignments, one per top-level key, nested values indented.

    Values that are not literals (checked by :func:`check_dumpable`) are written with
    ``repr``, so such text is for reading only.

    Args:
        cfg: The config; keys are expected to be identifiers.

    Returns:
        The text, ending with a newline (empty for an empty config).
    """
    return "".join(f"{key} = {_block(value, 0)}\n" for key, value in cfg.items())


def check_dumpable(cfg: Mapping[str, Any], for_json: bool) -> None:
    """Check that a config can be written as a Python or JSON file and read back.

    Python files take None, bools, numbers, strings and bytes in nested dicts, lists
    and tuples; their top-level keys must be identifiers that do not start with ``_``
    (such names are not read back). No dict may hold a ``_delete_`` key (it would be
    read back as a merge directive). JSON files take the same minus bytes, with string
    dict keys only; tuples come back as lists.

    Args:
        cfg: The config.
        for_json: Check for a JSON file instead of a Python file.

    Raises:
        ValueError: a key cannot be written; the message names it.
        TypeError: a value of another type; the message names its key.
    """
    for key, value in cfg.items():
        if key in ("_base_", "_delete_"):
            raise ValueError(f"config key {key}: would be read back as a merge directive")
        if not for_json and not (_is_name(key) and not key.startswith("_")):
            raise ValueError(
                f"config key {key!r}: a Python config needs top-level keys that are identifiers "
                f"not starting with '_'; dump to .json instead"
            )
        _check_value(value, str(key), for_json)


def _check_value(value: Any, path: str, for_json: bool) -> None:
    # Exact types: a subclass (an IntEnum, a numpy float) would not read back as itself.
    if type(value) in _SCALARS or (type(value) is bytes and not for_json):
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if for_json and not isinstance(k, str):
                raise ValueError(
                    f"config key {path}.{k!r}: JSON needs str keys, got {type(k).__name__}"
                )
            if not isinstance(k, _SCALARS):
                raise ValueError(
                    f"config key {path}.{k!r}: keys must be str, numbers, bools or None"
                )
            if k == "_delete_":
                raise ValueError(
                    f"config key {path}._delete_: would be read back as a merge directive"
                )
            _check_value(v, f"{path}.{k}", for_json)
        return
    if type(value) in (list, tuple):
        for i, v in enumerate(value):
            _check_value(v, f"{path}.{i}", for_json)
        return
    kind = "JSON" if for_json else "Python"
    raise TypeError(
        f"config key {path}: cannot dump a {type(value).__name__} ({value!r}) to a {kind} config; "
        f"expected None, bool, int, float, str{'' if for_json else ', bytes'}, dict, list or tuple"
    )
