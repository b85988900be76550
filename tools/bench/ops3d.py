"""3D ops section: mmpar's 3D and sparse ``mmcv.ops`` stand-ins against a reference kernel.

The rows come from the helper modules ``tools/bench/ops3d_<group>.py`` (points, sampling,
boxes, voxels, sparse), each a ``rows(quick) -> List[Row]`` timed with
:func:`ops.compare` on one CPU thread. The reference of a row is the best that runs on
the machine: mmcv-full 1.7.2's own CPU kernel where it has one (loaded from the path in
``$MMPAR_MMCV_FULL_EXT``, the row skipped when unset), spconv's CPU forward for sparse
convolution (skipped when spconv is not installed), a plain-torch formulation of the
same work otherwise. Target: within 3x of the reference, and no slower than mmcv-full's
kernel for voxelization and spconv's forward for SECOND's sparse encoder.

``--quick``: small clouds and two rounds (a smoke run). One group alone, as a table:
``python tools/bench/ops3d.py voxels [--quick]``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import List, Sequence

import torch

BENCH_DIR = Path(__file__).resolve().parent
GROUPS = ("points", "sampling", "boxes", "voxels", "sparse")


if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))  # the row modules import ops3d_common by name

import ops3d_common as common  # noqa: E402


def run(quick: bool = False, groups: Sequence[str] = GROUPS) -> str:
    title = "## 3D ops: mmcv.ops stand-ins against a kernel"
    if importlib.util.find_spec("torchvision") is None:
        return f"{title}\n\nSkipped: torchvision is not installed (the mmcv-ops extra).\n"
    ops = common.ops()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows: List[tuple] = []
    try:
        for group in groups:
            rows += common.sibling(f"ops3d_{group}").rows(quick)
    finally:
        torch.set_num_threads(threads)
    return ops.render(title, rows, quick, "ops3d")


if __name__ == "__main__":
    chosen = [a for a in sys.argv[1:] if a != "--quick"] or GROUPS
    print(run(quick="--quick" in sys.argv, groups=chosen))
