"""tools/zoo.py --codebase mmdet3d: mmdet3d 1.0's model zoo on mmpar's ops.

The fast tests read configs of mmdet3d's zoo (what each model takes: keys, box type,
point features, classes) and check the samples the tool makes from them. The slow
one runs a few configs, chosen to cover mmpar's 3D ops: each must build, train one
step and test one batch. mmdet3d asks for mmcv <= 1.7.0: the runs put
``MMCV_170_DIR`` (where ``.ci/run`` installs mmdet3d) first on the import path; without
mmdet3d there, everything here skips.
"""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.compat._mmcv_env import MMCV_170_DIR, REPO_ROOT, mmcv170_env

TOOL = REPO_ROOT / "tools" / "zoo.py"
CONFIGS = MMCV_170_DIR / "mmdet3d" / ".mim" / "configs"

pytestmark = pytest.mark.skipif(
    not CONFIGS.is_dir(),
    reason=f"needs mmdet3d in {MMCV_170_DIR}: python -m mmpar.compat.install --mmcv 1.7.0 "
    "--target DIR mmdet3d (.ci/run does)",
)

#: The configs run in CI (about 70 s of CPU in all), the longest first; the comment says
#: which of mmpar's ops each runs.
SUBSET: List[str] = [
    # roiaware_pool3d, sparse U-Net, nms_normal_bev
    "parta2/hv_PartA2_secfpn_2x8_cyclic_80e_kitti-3d-car.py",
    # sparse convolution (SubMConv3d, SparseConv3d), voxelization
    "second/hv_second_secfpn_6x8_80e_kitti-3d-car.py",
    # voxelization (hard), Anchor3DHead's nms_bev, points_in_boxes
    "pointpillars/hv_pointpillars_secfpn_6x8_160e_kitti-3d-car.py",
    # dynamic voxelization, dynamic_scatter
    "dynamic_voxelization/dv_pointpillars_secfpn_6x8_160e_kitti-3d-car.py",
    # assign_score_withk (PAConv's CUDA variant), ball_query, three_nn
    "paconv/paconv_cuda_ssg_8x8_cosine_200e_s3dis_seg-3d-13class.py",
    # furthest_point_sample, ball_query, grouping_operation, points_in_boxes
    "votenet/votenet_16x8_sunrgbd-3d-10class.py",
    # camera boxes and images: modulated_deform_conv (DCN), nms
    "fcos3d/fcos3d_r101_caffe_fpn_gn-head_dcn_2x8_1x_nus-mono3d.py",
    # three_nn, three_interpolate (feature propagation)
    "pointnet2/pointnet2_ssg_16x2_cosine_200e_scannet_seg-3d-20class.py",
]


CENTERPOINT = "centerpoint/centerpoint_02pillar_second_secfpn_4x8_cyclic_20e_nus.py"


@pytest.fixture(scope="module")
def zoo():
    """The tool's package (``mmpar_zoo``), as tools/zoo.py loads it."""
    return runpy.run_path(str(TOOL))["zoo"]


def scene(zoo, rel: str):
    """The Scene of one of mmdet3d's configs (read with the main mmcv: configs only)."""
    import importlib

    from mmcv import Config

    module = importlib.import_module("mmpar_zoo.codebases.det3d_scene")
    return module.Scene(Config.fromfile(str(CONFIGS / rel)))


@pytest.mark.parametrize(
    "rel, keys, box_type, dims, classes",
    [
        (
            "pointpillars/hv_pointpillars_secfpn_6x8_160e_kitti-3d-car.py",
            ["points", "gt_bboxes_3d", "gt_labels_3d"],
            "LiDAR",
            4,
            1,
        ),
        ("votenet/votenet_16x8_sunrgbd-3d-10class.py", None, "Depth", 4, 10),
        (
            "pointnet2/pointnet2_ssg_16x2_cosine_200e_scannet_seg-3d-20class.py",
            ["points", "pts_semantic_mask"],
            "Depth",
            6,
            20,
        ),
        (CENTERPOINT, None, "LiDAR", 5, 10),
        (
            "fcos3d/fcos3d_r101_caffe_fpn_gn-head_dcn_2x8_1x_nus-mono3d.py",
            [
                "img", "gt_bboxes", "gt_labels", "attr_labels", "gt_bboxes_3d", "gt_labels_3d",
                "centers2d", "depths",
            ],
            "Camera",
            None,
            10,
        ),
    ],
)  # fmt: skip
def test_what_a_config_takes_is_read_from_its_pipelines(zoo, rel, keys, box_type, dims, classes):
    found = scene(zoo, rel)
    if keys is not None:
        assert found.keys == keys
    assert found.box_type == box_type and found.classes == classes
    if dims is not None:
        assert found.point_dims == dims


def test_centerpoint_boxes_carry_velocities_and_scannet_boxes_no_yaw(zoo) -> None:
    centre = scene(zoo, CENTERPOINT)
    assert centre.box_dim == 9 and centre.yaw
    novelo = scene(
        zoo, "centerpoint/centerpoint_02pillar_second_secfpn_4x8_cyclic_20e_nus_novelo.py"
    )
    assert novelo.box_dim == 7
    assert not scene(zoo, "votenet/votenet_8x8_scannet-3d-18class.py").yaw


def test_a_subset_of_the_zoo_trains_and_tests(tmp_path: Path) -> None:
    out = tmp_path / "mmdet3d.json"
    args = ["--codebase", "mmdet3d", "--jobs", "2", "--json", str(out)]
    args += ["--pythonpath", str(MMCV_170_DIR), "--configs", ",".join(SUBSET)]
    proc = subprocess.run(
        [sys.executable, str(TOOL), *args],
        cwd=REPO_ROOT,
        env=mmcv170_env(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    results = json.loads(out.read_text())["results"]
    assert sorted(r["config"] for r in results) == sorted(SUBSET)
    assert all(r["status"] == "PASS" for r in results), proc.stdout[-3000:]
