"""3D ops section: mmpar's 3D and sparse ``mmcv.ops`` stand-ins against a reference kernel.

The rows come from the helper modules ``tools/bench/ops3d_<group>.py`` (points, sampling,
boxes, voxels, sparse), each a ``rows(quick) -> List[Row]`` timed with
:func:`ops.compare` on one CPU thread. The reference of a row is the best that runs on
the machine: mmcv-full 1.7.2's own CPU kernel where it has one (loaded from the path in
``$MMPAR_MMCV_FULL_EXT``, the row skipped when unset), spconv's CPU forward for sparse
convolution (skipped when spconv is not installed), a plain-torch formulation of the
same work otherwise. Target: within 3x of the reference, and no slower than mmcv-full's
kernel for voxelization and spconv's forward for SECOND's sparse encoder.

``--quick``: small clouds and two rounds (a smoke run).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import List

import torch

BENCH_DIR = Path(__file__).resolve().parent
GROUPS = ("points", "sampling", "boxes", "voxels", "sparse")


def _load(name: str) -> ModuleType:
    """``tools/bench/<name>.py``, registered in sys.modules under ``mmpar_bench_<name>``."""
    key = f"mmpar_bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, BENCH_DIR / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def run(quick: bool = False) -> str:
    title = "## 3D ops: mmcv.ops stand-ins against a kernel"
    if importlib.util.find_spec("torchvision") is None:
        return f"{title}\n\nSkipped: torchvision is not installed (the mmcv-ops extra).\n"
    ops = _load("ops")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows: List[tuple] = []
    try:
        for group in GROUPS:
            if (BENCH_DIR / f"ops3d_{group}.py").is_file():
                rows += _load(f"ops3d_{group}").rows(quick)
    finally:
        torch.set_num_threads(threads)
    return ops.render(title, rows, quick, "ops3d")


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
