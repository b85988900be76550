"""Which configs run: the model directories under ``--configs-root``, as the options select."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Dict, List

from mmpar_zoo.cli import fail


def default_configs_root() -> Path:
    """The installed mmdet's ``.mim/configs``, found without importing mmdet.

    Returns:
        The folder of model directories that mmdet's wheel ships.

    Raises:
        SystemExit: A user error (``fail``) where mmdet is not installed.
    """
    spec = importlib.util.find_spec("mmdet")
    if spec is None or not spec.submodule_search_locations:
        fail(
            "mmdet is not installed; install mmdet 2.x (pip install 'mmdet<3'), or give "
            "--configs-root"
        )
    return Path(list(spec.submodule_search_locations)[0]) / ".mim" / "configs"


def find_configs(root: Path) -> Dict[str, List[str]]:
    """Model directory -> its config paths relative to ``root``, sorted.

    Args:
        root: The folder of model directories (``<dir>/<name>.py``); directories whose
            name starts with ``_`` or ``.`` (``_base_``) are left out.
    """
    found: Dict[str, List[str]] = {}
    for path in sorted(root.glob("*/*.py")):
        directory = path.parent.name
        if directory.startswith(("_", ".")):
            continue
        found.setdefault(directory, []).append(path.relative_to(root).as_posix())
    return found


def select_configs(args: argparse.Namespace, root: Path) -> List[str]:
    """The configs to run, in sorted order; a bad selection is a user error.

    Args:
        args: The options (``dirs``, ``filter``, ``one_per_dir``).
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
    dirs = sorted(found)
    if args.dirs is not None:
        asked = [d.strip().strip("/") for d in args.dirs.split(",") if d.strip()]
        unknown = [d for d in asked if d not in found]
        if unknown or not asked:
            fail(
                f"--dirs: no model directory {', '.join(map(repr, unknown)) or repr(args.dirs)} "
                f"under {root} (there are {len(found)}: {', '.join(dirs[:8])}, ...)"
            )
        dirs = sorted(set(asked))
    chosen: List[str] = []
    for directory in dirs:
        paths = [p for p in found[directory] if args.filter is None or args.filter in p]
        chosen += paths[:1] if args.one_per_dir else paths
    if not chosen:
        fail(f"--filter: no config path contains {args.filter!r} in the chosen directories")
    return chosen
