"""SLURM node lists: ``node[01-03,07],gpu2`` to host names, without calling ``scontrol``."""

from __future__ import annotations

import re
from itertools import product
from typing import Iterator, List, Tuple, Union

__all__ = ["expand_slurm_nodelist", "slurm_first_host"]

_HOST_CHARS = re.compile(r"[A-Za-z0-9._-]*")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def expand_slurm_nodelist(nodelist: str) -> List[str]:
    """Expand a slurm host list such as ``"node[01-03,07],gpu2"``.

    Ranges keep the zero padding of their first bound (``[08-10]`` gives
    ``08, 09, 10``); several bracket groups in one name give every
    combination (``r[1-2]n[1-2]`` gives ``r1n1, r1n2, r2n1, r2n2``).

    Args:
        nodelist: The value of ``SLURM_NODELIST`` / ``SLURM_JOB_NODELIST``.

    Returns:
        The host names, in the order slurm lists them.

    Raises:
        TypeError: ``nodelist`` is not a string.
        ValueError: empty list, unbalanced brackets, an empty or descending
            range, or characters that cannot be in a host name.
    """
    hosts: List[str] = []
    for pieces in _parse_nodelist(nodelist):
        options = [list(_piece_values(piece)) for piece in pieces]
        hosts.extend("".join(combo) for combo in product(*options))
    return hosts


def slurm_first_host(nodelist: str) -> str:
    """Return the first host of a slurm host list without expanding the rest.

    Args:
        nodelist: See :func:`expand_slurm_nodelist`.

    Returns:
        The first host name, e.g. ``"node01"`` for ``"node[01-03],gpu2"``.

    Raises:
        TypeError, ValueError: as :func:`expand_slurm_nodelist`.
    """
    first = _parse_nodelist(nodelist)[0]
    return "".join(next(_piece_values(piece)) for piece in first)


#: One piece of a host name: literal text, or bracketed ``(low, high, width)`` ranges.
_Piece = Union[str, List[Tuple[int, int, int]]]


def _parse_nodelist(nodelist: str) -> List[List[_Piece]]:
    """Check the whole list and split every host name into pieces."""
    if not isinstance(nodelist, str):
        raise TypeError(f"nodelist: expected a str, got {type(nodelist).__name__}")
    return [_parse_host(part, nodelist) for part in _split_top_level(nodelist)]


def _piece_values(piece: _Piece) -> Iterator[str]:
    """Yield the texts one piece stands for, in order."""
    if isinstance(piece, str):
        yield piece
        return
    for low, high, width in piece:
        for number in range(low, high + 1):
            yield str(number).zfill(width)


def _split_top_level(nodelist: str) -> List[str]:
    """Split at the commas that are outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(nodelist):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(nodelist[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise ValueError(f"nodelist: unbalanced or nested brackets in {nodelist!r}")
    if depth != 0:
        raise ValueError(f"nodelist: unbalanced brackets in {nodelist!r}")
    parts.append(nodelist[start:])
    if any(not part.strip() for part in parts):
        raise ValueError(f"nodelist: expected comma-separated host names, got {nodelist!r}")
    return [part.strip() for part in parts]


def _parse_host(host: str, nodelist: str) -> List[_Piece]:
    """Turn ``"r[1-2]n3"`` into ``["r", [(1, 2, 1)], "n3"]``."""
    pieces: List[_Piece] = []
    for i, chunk in enumerate(re.split(r"[\[\]]", host)):
        if i % 2 == 0:
            if not _HOST_CHARS.fullmatch(chunk):
                raise ValueError(f"nodelist: invalid host name {host!r} in {nodelist!r}")
            pieces.append(chunk)
        else:
            pieces.append(_parse_ranges(chunk, nodelist))
    return pieces


def _parse_ranges(spec: str, nodelist: str) -> List[Tuple[int, int, int]]:
    """Turn ``"01-03,7"`` into ``[(1, 3, 2), (7, 7, 1)]``."""
    ranges: List[Tuple[int, int, int]] = []
    for item in spec.split(","):
        match = _RANGE.fullmatch(item.strip())
        if match is None:
            raise ValueError(f"nodelist: invalid range {item!r} in {nodelist!r}")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if high < low:
            raise ValueError(f"nodelist: descending range {item!r} in {nodelist!r}")
        ranges.append((low, high, len(match.group(1))))
    return ranges
