"""tools/zoo.py --codebase mmdet3d on mmdet3d 0.17.1's zoo: a few configs build, train
one step and test one batch, on mmpar's stand-ins for its compiled ops.

mmdet3d 0.17.1 (mmcv 1.4.0, mmdet 2.14.0, mmseg 0.14.1) is installed into
``MMCV_140_DIR`` (``python -m mmpar.compat.install --mmcv 1.4.0 --target DIR
mmdet3d==0.17.1``, as ``.ci/run`` does). Its package holds its configs
(``mmdet3d/.mim/configs``, the v0.17.1 tag's ``configs`` folder without the READMEs);
``$MMPAR_MMDET3D017_CONFIGS`` names another such folder. Without them, this skips.

The fast tests read configs whose 0.17 form differs from 1.0's (what the tool makes of
them, and the ``rpn-old-keys`` fix); the slow one runs :data:`SUBSET`.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any, List

import pytest

from tests.compat._mmcv_env import REPO_ROOT, child_env
from tests.compat.test_mmdet3d017_import import MMCV_140_DIR
from tests.compat.test_mmdet3d017_import import pytestmark as requires_0171

TOOL = REPO_ROOT / "tools" / "zoo.py"
CONFIGS = Path(
    os.environ.get("MMPAR_MMDET3D017_CONFIGS") or MMCV_140_DIR / "mmdet3d" / ".mim" / "configs"
)

pytestmark = [
    requires_0171,
    pytest.mark.skipif(
        not (CONFIGS / "votenet").is_dir(),
        reason=f"needs mmdet3d 0.17.1's configs in {CONFIGS} ($MMPAR_MMDET3D017_CONFIGS)",
    ),
]

FCOS3D = "fcos3d/fcos3d_r101_caffe_fpn_gn-head_dcn_2x8_1x_nus-mono3d.py"
HTC = "nuimages/htc_r50_fpn_1x_nuim.py"

#: The configs run in CI (80 s of CPU in the configs, 100 s with the tool's imports; the
#: Lyft PointPillars and PartA2 two thirds of it), and which stand-ins and mends each runs.
SUBSET: List[str] = [
    # naiveSyncBN without a process group, mmdet 2.14's FPN with ReLU laterals
    "pointpillars/hv_pointpillars_fpn_sbn-all_2x8_2x_lyft-3d.py",
    # sparse_conv_ext, roiaware_pool3d_ext, BaseInstance3DBoxes.overlaps on the CPU
    "parta2/hv_PartA2_secfpn_2x8_cyclic_80e_kitti-3d-3class.py",
    # nuImages on mmdet 2.14: the rpn-old-keys fix, HTC's in-place semantic head
    HTC,
    # voxel_layer.hard_voxelize, iou3d_cuda.nms_gpu, roiaware points_in_boxes
    "pointpillars/hv_pointpillars_secfpn_6x8_160e_kitti-3d-car.py",
    # furthest_point_sample_ext, ball_query_ext, group_points_ext, nms_normal_gpu
    "votenet/votenet_16x8_sunrgbd-3d-10class.py",
    # camera boxes of 9 values (the head's default code size), DCN
    FCOS3D,
]


@pytest.fixture(scope="module")
def zoo() -> Any:
    """The tool's package (``mmpar_zoo``), as tools/zoo.py loads it."""
    return runpy.run_path(str(TOOL))["zoo"]


def config(rel: str) -> Any:
    """One of mmdet3d 0.17.1's configs, read with the main mmcv (configs only)."""
    from mmcv import Config

    return Config.fromfile(str(CONFIGS / rel))


def test_fcos3d_boxes_carry_velocities_by_the_heads_default(zoo) -> None:
    import importlib

    scene = importlib.import_module("mmpar_zoo.codebases.det3d_scene")
    cfg = config(FCOS3D)
    assert "bbox_code_size" not in cfg.model.bbox_head  # 0.17 leaves it to the head
    found = scene.Scene(cfg)
    assert found.box_type == "Camera" and found.box_dim == 9 and found.classes == 10


def test_htc_semantic_maps_are_padded_with_its_ignore_label(zoo) -> None:
    import importlib

    needs = importlib.import_module("mmpar_zoo.needs")
    cfg = config(HTC)
    found = needs.Needs(cfg)
    assert "gt_semantic_seg" in found.keys and found.seg_pad == 0
    assert needs.Needs(config("nuimages/mask_rcnn_r50_fpn_1x_nuim.py")).seg_pad == 255


def test_rpn_configs_in_the_old_keys_are_read_in_the_new(zoo) -> None:
    import importlib

    from mmcv import ConfigDict

    fixes = importlib.import_module("mmpar_zoo.fixes")
    rpn = config(HTC).model.test_cfg.rpn
    assert "nms" not in rpn and rpn.nms_thr == 0.7 and rpn.max_num == 1000
    new = fixes._new_rpn_keys(rpn)
    assert isinstance(new, ConfigDict) and new.nms == dict(type="nms", iou_threshold=0.7)
    assert new.max_per_img == 1000 and "nms_thr" not in new and "max_num" not in new
    assert "nms" not in rpn  # the config itself is left as it was
    current = ConfigDict(nms_pre=10, max_per_img=5, nms=dict(type="nms", iou_threshold=0.5))
    assert fixes._new_rpn_keys(current) is current


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
