"""tools/zoo.py --codebase mmdet3d on mmdet3d 0.17.1's zoo: a few configs build, train
one step and test one batch, on mmpar's stand-ins for its compiled ops.

mmdet3d 0.17.1 (mmcv 1.4.0, mmdet 2.14.0, mmseg 0.14.1) is installed into
``MMCV_140_DIR`` (``python -m mmpar.compat.install --target DIR mmdet3d==0.17.1``). Its
sdist holds no configs: ``$MMPAR_MMDET3D017_CONFIGS`` names a ``configs`` folder of
its v0.17.1 tag (``git archive v0.17.1 configs``). Without both, this skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.compat._mmcv_env import REPO_ROOT, child_env
from tests.compat.test_mmdet3d017_import import MMCV_140_DIR
from tests.compat.test_mmdet3d017_import import pytestmark as requires_0171

TOOL = REPO_ROOT / "tools" / "zoo.py"
CONFIGS = Path(os.environ.get("MMPAR_MMDET3D017_CONFIGS", "/nonexistent"))

pytestmark = [
    requires_0171,
    pytest.mark.skipif(
        not (CONFIGS / "votenet").is_dir(),
        reason="needs mmdet3d 0.17.1's configs folder in $MMPAR_MMDET3D017_CONFIGS",
    ),
]

#: The configs run, and which of the stand-ins each runs.
SUBSET: List[str] = [
    # voxel_layer.hard_voxelize, iou3d_cuda.nms_gpu, roiaware points_in_boxes
    "pointpillars/hv_pointpillars_secfpn_6x8_160e_kitti-3d-car.py",
    # furthest_point_sample_ext, ball_query_ext, group_points_ext, nms_normal_gpu
    "votenet/votenet_16x8_sunrgbd-3d-10class.py",
    # sparse_conv_ext, roiaware_pool3d_ext, BaseInstance3DBoxes.overlaps on the CPU
    "parta2/hv_PartA2_secfpn_2x8_cyclic_80e_kitti-3d-3class.py",
    # naiveSyncBN without a process group, mmdet 2.14's FPN with ReLU laterals
    "pointpillars/hv_pointpillars_fpn_sbn-all_2x8_2x_lyft-3d.py",
]


def test_a_subset_of_the_017_zoo_trains_and_tests(tmp_path: Path) -> None:
    out = tmp_path / "mmdet3d017.json"
    args = ["--codebase", "mmdet3d", "--jobs", "2", "--json", str(out)]
    args += ["--pythonpath", str(MMCV_140_DIR), "--configs-root", str(CONFIGS)]
    args += ["--configs", ",".join(SUBSET)]
    proc = subprocess.run(
        [sys.executable, str(TOOL), *args],
        cwd=REPO_ROOT,
        env=child_env(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    results = json.loads(out.read_text())["results"]
    assert sorted(r["config"] for r in results) == sorted(SUBSET)
    assert all(r["status"] == "PASS" for r in results), proc.stdout[-3000:]
