"""DictAction: ``--cfg-options key=value ...`` on the command line, parsed without eval."""

from __future__ import annotations

import argparse
import ast
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

__all__ = ["DictAction", "parse_option_value"]

_OPEN = {"[": "]", "(": ")", "{": "}"}
_CLOSE = set(_OPEN.values())
_LITERAL_ERRORS = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)


def _outside_quotes(text: str) -> Iterator[Tuple[int, str]]:
    """Yield ``(index, char)`` for every character outside quoted strings."""
    quote, escaped = "", False
    for i, ch in enumerate(text):
        if not quote:
            if ch in "'\"":
                quote = ch
            else:
                yield i, ch
        elif escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == quote:
            quote = ""


def _split_top_level(text: str) -> List[str]:
    """Split at commas that are outside brackets and quotes."""
    parts: List[str] = []
    depth, start = 0, 0
    for i, ch in _outside_quotes(text):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _closing_index(text: str) -> int:
    """Index of the bracket closing ``text[0]``, or -1 when it is never closed."""
    depth = 0
    for i, ch in _outside_quotes(text):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except _LITERAL_ERRORS:
        return _NOT_LITERAL


_NOT_LITERAL = object()


def parse_option_value(text: str) -> Any:
    """Parse the value of one ``key=value`` option.

    Python literals (numbers, strings, lists, tuples, dicts, None, True, False) are
    read with ``ast.literal_eval``, which never runs code. ``a,b,c`` becomes the list
    ``['a', 'b', 'c']``, ``[a,b]`` and ``(a,b)`` a list and a tuple, with each element
    parsed the same way. Anything else, ``RetinaNet`` or ``__import__('os')`` alike, is
    kept as the string it is.

    Args:
        text: The value, as typed.

    Returns:
        The parsed value.
    """
    text = text.strip()
    value = _literal(text)
    # literal_eval reads "1,2" as a tuple; a bare comma list is a list here.
    if value is not _NOT_LITERAL and not (isinstance(value, tuple) and not text.startswith("(")):
        return value
    if text[:1] in ("[", "(") and _closing_index(text) == len(text) - 1:
        parts = _split_top_level(text[1:-1])
        if text[0] == "(" and len(parts) == 1 and parts[0].strip():
            return parse_option_value(parts[0])  # "(a)" is a, as in Python; "(a,)" is a tuple
        items = [parse_option_value(p) for p in _drop_trailing(parts)]
        return items if text[0] == "[" else tuple(items)
    parts = _split_top_level(text)
    if len(parts) > 1:
        return [parse_option_value(p) for p in _drop_trailing(parts)]
    return text


def _drop_trailing(parts: List[str]) -> List[str]:
    """Drop the empty part a trailing comma leaves ("a," and "(a,)" hold one item)."""
    return parts[:-1] if parts and not parts[-1].strip() else parts


class DictAction(argparse.Action):
    """argparse action that collects ``key=value`` tokens into a dict.

    Use with ``nargs="+"``; giving the option again adds to the same dict. Values are
    parsed by :func:`parse_option_value`; keys are kept as typed (dotted keys suit
    :meth:`mmpar.config.Config.merge_from_dict`).

    Example::

        parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={})
        # --cfg-options model.depth=101 data.scale=[800,600] type=RetinaNet
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        name = option_string or self.dest
        tokens = [values] if isinstance(values, str) else list(values or [])
        options: Dict[str, Any] = dict(getattr(namespace, self.dest, None) or {})
        for token in tokens:
            key, sep, text = str(token).partition("=")
            if not sep or not key.strip():
                parser.error(f"{name}: expected KEY=VALUE, got {token!r}")
            options[key.strip()] = parse_option_value(text)
        setattr(namespace, self.dest, options)
