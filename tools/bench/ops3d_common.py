"""What the ``ops3d_<group>.py`` row modules share: ``ops.py``'s timing, and mmcv-full's
CPU kernels as a reference where ``$MMPAR_MMCV_FULL_EXT`` names a build of them.

A helper, not a section (it has no ``run``). The row modules import it by name:
``tools/bench`` is put on ``sys.path`` by whoever loads them first.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Optional

BENCH_DIR = Path(__file__).resolve().parent
#: The path of a build of mmcv-full's compiled ``_ext`` (a file, or a folder holding one).
ENV = "MMPAR_MMCV_FULL_EXT"


def sibling(name: str) -> ModuleType:
    """``tools/bench/<name>.py``, loaded once and registered as ``mmpar_bench_<name>``."""
    key = f"mmpar_bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, BENCH_DIR / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def ops() -> ModuleType:
    """``tools/bench/ops.py``: its ``compare`` times every row."""
    return sibling("ops")


def mmcv_full_ext() -> Optional[ModuleType]:
    """mmcv-full's compiled ``_ext`` from ``$MMPAR_MMCV_FULL_EXT``; None when it is unset.

    Raises:
        FileNotFoundError: the variable names a folder without an ``_ext*.so``.
    """
    where = os.environ.get(ENV)
    if not where:
        return None
    path = Path(where)
    if path.is_dir():
        found = sorted(path.glob("_ext*.so"))
        if not found:
            raise FileNotFoundError(f"{ENV}={where}: no _ext*.so in that folder")
        path = found[0]
    loader = importlib.machinery.ExtensionFileLoader("_ext", str(path))
    spec = importlib.util.spec_from_loader("_ext", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
