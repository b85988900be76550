"""Which configs run: the model directories under ``--configs-root``, as the options select."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Dict, List, Optional

from mmpar_zoo.cli import fail
from mmpar_zoo.codebase import Codebase


def default_configs_root(codebase: Codebase) -> Path:
    """The installed codebase's ``.mim/configs``, found without importing it.

    Args:
        codebase: The codebase (its ``package`` and ``distribution``).

    Returns:
        The folder of model directories that the codebase's wheel ships.

    Raises:
        SystemExit: A user error (``fail``) where the codebase is not installed.
    """
    spec = importlib.util.find_spec(codebase.package)
    if spec is None or not spec.submodule_search_locations:
        fail(
            f"{codebase.distribution} is not installed; install it ({codebase.install}), "
            "or give --configs-root"
        )
    return Path(list(spec.submodule_search_locations)[0]) / ".mim" / "configs"


def find_configs(root: Path) -> Dict[str, List[str]]:
    """Model directory -> its config paths relative to ``root``, sorted.

    A model directory is a folder that holds configs, at any depth
    (``faster_rcnn``, ``textdet/dbnet``); folders whose name starts with ``_`` or
    ``.`` (``_base_``), and what they hold, are left out.

    Args:
        root: The folder of model directories.
    """
    found: Dict[str, List[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if len(rel.parts) < 2 or any(p.startswith(("_", ".")) for p in rel.parts[:-1]):
            continue
        found.setdefault(rel.parent.as_posix(), []).append(rel.as_posix())
    return {d: sorted(found[d]) for d in sorted(found)}


def select_configs(args: argparse.Namespace, root: Path) -> List[str]:
    """The configs to run, in sorted order; a bad selection is a user error.

    Args:
        args: The options (``dirs``, ``configs``, ``filter``, ``one_per_dir``).
        root: The folder of model directories.

    Returns:
        Config paths relative to ``root``.

    Raises:
        SystemExit: A user error (``fail``): ``root`` is no folder of model
            directories, or the options select nothing.
    """
    if not root.is_dir():
        fail(f"--configs-root: {root} is not a directory")
    found = find_configs(root)
    if not found:
        fail(f"--configs-root: {root} holds no model directory with configs (<dir>/<name>.py)")
    dirs = list(found)
    if args.dirs is not None:
        asked = [d.strip().strip("/") for d in args.dirs.split(",") if d.strip()]
        chosen_dirs = {d: [k for k in found if k == d or k.startswith(d + "/")] for d in asked}
        unknown = [d for d, ks in chosen_dirs.items() if not ks]
        if unknown or not asked:
            fail(
                f"--dirs: no model directory {', '.join(map(repr, unknown)) or repr(args.dirs)} "
                f"under {root} (there are {len(found)}: {', '.join(dirs[:8])}, ...)"
            )
        dirs = sorted({k for ks in chosen_dirs.values() for k in ks})
    named = _named_configs(args.configs, found, root)
    chosen: List[str] = []
    for directory in dirs:
        paths = [p for p in found[directory] if args.filter is None or args.filter in p]
        paths = [p for p in paths if named is None or p in named]
        chosen += paths[:1] if args.one_per_dir else paths
    if not chosen and args.filter is not None:
        fail(f"--filter: no config path contains {args.filter!r} in the chosen directories")
    if not chosen:
        fail("--configs: none of the named configs is in the chosen directories (--dirs)")
    return chosen


def _named_configs(text: Optional[str], found: Dict[str, List[str]], root: Path) -> Optional[set]:
    """The configs ``--configs`` names (None: all); one it names that is not there is an error."""
    if text is None:
        return None
    named = {c.strip().strip("/") for c in text.split(",") if c.strip()}
    known = {c for paths in found.values() for c in paths}
    unknown = sorted(named - known)
    if unknown or not named:
        fail(f"--configs: no config {', '.join(map(repr, unknown)) or repr(text)} under {root}")
    return named
