"""Which ``--cfg-options`` keys mean something: the config's own, or ones its readers know.

A typo such as ``runner.max_epoch=2`` would otherwise add a key nothing reads,
and the run would go on with the old value. :func:`check_option_keys` refuses
such a key, naming the closest known ones. A key written with a leading ``+``
(``+my_key=1``) is added as it is, unchecked: the explicit way to add a key.

Known keys are given as dotted patterns in which ``*`` stands for one part
(``compile.*``) or, as the last part, ``**`` for any depth below (``compile.options.**``).
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from mmpar.config.config_dict import DELETE_KEY

__all__ = [
    "ADD_PREFIX",
    "check_option_keys",
    "config_paths",
    "matches_pattern",
    "option_paths",
    "split_added",
]

#: A ``--cfg-options`` key starting with this is added without being checked.
ADD_PREFIX = "+"

#: ``accepts(node, name)``: whether the dict ``node`` of the merged config takes a key ``name``
#: that neither the config nor the patterns know (e.g. a parameter of the class ``node`` builds).
Accepts = Callable[[Mapping[str, Any], str], bool]


def split_added(options: Mapping[str, Any]) -> Tuple[Dict[str, Any], Set[str]]:
    """Strip the ``+`` of added keys.

    Returns:
        The options with every key as it is to be set, and the set of those keys
        that were written with ``+`` (not to be checked).

    Raises:
        ValueError: a key is ``+`` alone.
    """
    plain: Dict[str, Any] = {}
    added: Set[str] = set()
    for key, value in options.items():
        if isinstance(key, str) and key.startswith(ADD_PREFIX):
            key = key[len(ADD_PREFIX) :]
            if not key:
                raise ValueError(f"{ADD_PREFIX!r}: expected {ADD_PREFIX}KEY=VALUE, got no key")
            added.add(key)
        plain[key] = value
    return plain, added


def config_paths(node: Any, prefix: str = "") -> List[str]:
    """Every dotted path of a config: dict keys and list indexes, at every depth."""
    paths: List[str] = []
    if isinstance(node, Mapping):
        children: Iterable[Tuple[Any, Any]] = node.items()
    elif type(node) in (list, tuple):
        children = enumerate(node)
    else:
        return paths
    for key, value in children:
        path = f"{prefix}.{key}" if prefix else str(key)
        paths.append(path)
        paths.extend(config_paths(value, path))
    return paths


def option_paths(key: str, value: Any) -> List[str]:
    """``key`` and, for a dict value, the dotted keys of everything inside it."""
    paths = [key]
    if isinstance(value, Mapping):
        for sub, inner in value.items():
            if sub != DELETE_KEY:
                paths.extend(option_paths(f"{key}.{sub}", inner))
    return paths


def matches_pattern(key: str, pattern: str) -> bool:
    """Whether dotted ``key`` matches ``pattern`` (``*``: one part; a last ``**``: any depth)."""
    parts, wanted = key.split("."), pattern.split(".")
    if wanted[-1] == "**":
        wanted = wanted[:-1]
        if len(parts) <= len(wanted):
            return False
        parts = parts[: len(wanted)]
    return len(parts) == len(wanted) and all(w in ("*", p) for p, w in zip(parts, wanted))


def _node(root: Any, parts: Sequence[str]) -> Any:
    """The value at ``parts`` inside ``root``, or None where the path does not exist."""
    node = root
    for part in parts:
        if isinstance(node, Mapping):
            node = node.get(part)
        elif type(node) in (list, tuple) and part.lstrip("-").isdigit():
            index = int(part)
            node = node[index] if -len(node) <= index < len(node) else None
        else:
            return None
    return node


def _is_known(
    key: str,
    existing: Set[str],
    patterns: Sequence[str],
    merged: Mapping[str, Any],
    accepts: Optional[Accepts],
) -> bool:
    if key in existing or any(matches_pattern(key, p) for p in patterns):
        return True
    parts = key.split(".")
    parent = _node(merged, parts[:-1])
    return accepts is not None and isinstance(parent, Mapping) and accepts(parent, parts[-1])


def check_option_keys(
    original: Mapping[str, Any],
    merged: Mapping[str, Any],
    options: Mapping[str, Any],
    patterns: Sequence[str],
    added: Iterable[str] = (),
    accepts: Optional[Accepts] = None,
) -> None:
    """Refuse an option key that nothing would read.

    A key is known when it is in ``original`` (the config as loaded), matches one of
    ``patterns``, or is accepted by ``accepts`` for its parent dict in ``merged``
    (the config with the options applied: ``optimizer.type=SGD optimizer.momentum=0.9``
    is judged against SGD). The keys inside a dict value are checked the same way.
    Keys in ``added``, and everything below them, are not checked.

    Args:
        original: The loaded config, before the options.
        merged: The config after the options.
        options: Dotted key -> value, ``+`` already stripped (see :func:`split_added`).
        patterns: Known optional keys (see the module docstring).
        added: Keys the user added explicitly with ``+``.
        accepts: Extra test for keys of dicts that build objects (see :data:`Accepts`).

    Raises:
        ValueError: an unknown key; the message names it and the closest known keys.
    """
    existing = set(config_paths(original))
    added = tuple(added)
    for key, value in options.items():
        for path in option_paths(key, value):
            if any(path == a or path.startswith(a + ".") for a in added):
                continue
            if not _is_known(path, existing, patterns, merged, accepts):
                raise ValueError(_unknown_message(path, existing, patterns))


def _unknown_message(key: str, existing: Set[str], patterns: Sequence[str]) -> str:
    concrete = {p.replace(".**", "") for p in patterns if "*" not in p.replace(".**", "")}
    candidates = sorted(existing | concrete)
    close = difflib.get_close_matches(key, candidates, n=3, cutoff=0.6)
    if not close:  # a typo in the last part only: compare with its siblings
        parent = key.rpartition(".")[0]
        siblings = [c for c in candidates if c.rpartition(".")[0] == parent]
        close = difflib.get_close_matches(key, siblings, n=3, cutoff=0.4)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return (
        f"unknown key {key!r}: not in the config and not read by the tools; {hint}"
        f"to add it anyway, write {ADD_PREFIX}{key}=..."
    )
