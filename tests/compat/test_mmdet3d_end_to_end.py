"""mmdet3d 1.0.0rc6's own tools, unmodified, on mmpar and mmpar's mmcv.ops, on the CPU.

mmdet3d 1.0.0rc6 accepts mmcv <= 1.7.0: it is installed with mmcv 1.7.0 into
``MMCV_170_DIR`` (``tests/compat/_mmcv_env.py``), which the children get on
``PYTHONPATH``, with the wheel's ``mmdet3d/.mim`` folder after it (``create_data.py``
imports ``tools.data_converter``). Every script runs under ``python -m
mmpar.compat.run``. The data is a small KITTI-format set of real files that the
test writes (``tests/compat/_kitti_files.py``): LiDAR sweeps of a ground plane and
car-shaped point clusters, calibration files, ``Car`` labels, images, ImageSets.

1. ``tools/create_data.py kitti``: the info files, the reduced point clouds, the
   2D annotations and the ground-truth database (which the configs'
   ``ObjectSample`` pastes from).
2. PointPillars (mmpar's voxelization): ``tools/train.py``, 2 epochs with the
   KITTI evaluation after each, then ``tools/test.py --eval mAP``, which prints
   KITTI's AP table.
3. SECOND (mmpar's voxelization and sparse convolution): the same; its AP rises
   from the first evaluation to the last.
4. SECOND under torchrun with 2 gloo processes, 1 epoch: both ranks train and a
   checkpoint is written.

The configs are mmdet3d's own (``_base_`` by absolute path) shrunk to run in
seconds on 2 cores: a 25.6 m x 25.6 m range, small voxel grids, few channels,
no loader workers. mmdet3d would take spconv 2's sparse convolution where spconv
is installed; ``patch_mmcv`` keeps it on ``mmcv.ops``' (mmpar's) there
(:mod:`mmpar.compat.mmdet3d_fixes`), which the run's report checks.

Until mmpar supplies every ``mmcv.ops`` name that mmdet3d uses, mmdet3d stops on
import with a ``MissingOpError``; the test then skips, naming the op.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pytest

from tests._dist_helpers import free_port, run_launcher
from tests.compat._kitti_files import Car, write_kitti
from tests.compat._mmcv_env import (
    MMCV_170_DIR,
    compiled_ops_installed,
    mmcv170_env,
    requires_mmcv170,
    requires_torchvision,
)


def _mmdet3d_mim() -> Optional[Path]:
    """The installed mmdet3d 1.0.0rc6's ``.mim`` folder (tools and configs), or None."""
    found = [d for d in metadata.distributions(name="mmdet3d", path=[str(MMCV_170_DIR)])]
    if not any(d.version == "1.0.0rc6" for d in found):
        return None
    mim = MMCV_170_DIR / "mmdet3d" / ".mim"
    return mim if (mim / "tools" / "create_data.py").is_file() else None


pytestmark = [
    requires_mmcv170,
    requires_torchvision,
    pytest.mark.skipif(
        _mmdet3d_mim() is None,
        reason=f"needs mmdet3d 1.0.0rc6 with its tools in {MMCV_170_DIR}: python -m "
        "mmpar.compat.install --target DIR mmdet3d installs it (.ci/run does)",
    ),
    pytest.mark.slow,
]

TIMEOUT = 240
EPOCHS = 2
SAMPLES_PER_GPU = 2
OPS_LINE = "mmpar: mmcv.ops are mmpar's"
#: Where cars may stand (LiDAR x, y): a parking lot of rows 5 m apart, 3 m between cars.
SLOTS = tuple(
    (x, 3.0 * k)
    for x, half in ((8.0, 1), (13.0, 2), (18.0, 3), (23.0, 3))
    for k in range(-half, half + 1)
)
#: 4 training frames of 11 cars each (of the 22 slots), shifted by up to 0.3 m.
SCENES = tuple(
    tuple(
        Car(SLOTS[i][0] + dx, SLOTS[i][1] + dy, 0.0)
        for i, dx, dy in zip(
            sorted(rng.choice(len(SLOTS), 11, replace=False)), *rng.uniform(-0.3, 0.3, (2, 11))
        )
    )
    for rng in (np.random.default_rng(seed) for seed in range(4))
)
#: Validation repeats the training frames with fresh points: 44 cars, enough for
#: KITTI's AP (its recall reaches only #matched / 40, so fewer cars cap it).
VAL_SCENES = SCENES
#: Each epoch sees the training frames this many times (mmdet3d's RepeatDataset).
REPEAT = 10
#: The AP that must rise during SECOND's training (KITTI's 40-point AP, BEV, IoU 0.5).
RISING_AP = "KITTI/Car_BEV_AP40_moderate_loose"

COMMON = """\
_base_ = {base!r}
custom_imports = dict(
    imports=['tests.compat.configs.mmdet3d_e2e_report'],
    allow_failed_imports=False)
data_root = {data_root!r}
class_names = ['Car']
point_cloud_range = [0, -12.8, -3, 25.6, 12.8, 1]
input_modality = dict(use_lidar=True, use_camera=False)
file_client_args = dict(backend='disk')
points_loader = dict(
    type='LoadPointsFromFile', coord_type='LIDAR', load_dim=4, use_dim=4,
    file_client_args=file_client_args)
db_sampler = dict(
    data_root=data_root,
    info_path=data_root + 'kitti_dbinfos_train.pkl',
    rate=1.0,
    prepare=dict(filter_by_difficulty=[-1], filter_by_min_points=dict(Car=5)),
    classes=class_names,
    sample_groups=dict(Car=4),
    points_loader=points_loader)
train_pipeline = [
    points_loader,
    dict(type='LoadAnnotations3D', with_bbox_3d=True, with_label_3d=True,
         file_client_args=file_client_args),
    dict(type='ObjectSample', db_sampler=db_sampler),
    dict(type='RandomFlip3D', flip_ratio_bev_horizontal=0.5),
    dict(type='GlobalRotScaleTrans', rot_range=[-0.1, 0.1], scale_ratio_range=[0.95, 1.05]),
    dict(type='PointsRangeFilter', point_cloud_range=point_cloud_range),
    dict(type='ObjectRangeFilter', point_cloud_range=point_cloud_range),
    dict(type='PointShuffle'),
    dict(type='DefaultFormatBundle3D', class_names=class_names),
    dict(type='Collect3D', keys=['points', 'gt_bboxes_3d', 'gt_labels_3d'])
]
test_pipeline = [
    points_loader,
    dict(
        type='MultiScaleFlipAug3D',
        img_scale=(1333, 800),
        pts_scale_ratio=1,
        flip=False,
        transforms=[
            dict(type='GlobalRotScaleTrans', rot_range=[0, 0], scale_ratio_range=[1., 1.],
                 translation_std=[0, 0, 0]),
            dict(type='RandomFlip3D'),
            dict(type='PointsRangeFilter', point_cloud_range=point_cloud_range),
            dict(type='DefaultFormatBundle3D', class_names=class_names, with_label=False),
            dict(type='Collect3D', keys=['points'])
        ])
]
eval_pipeline = [
    points_loader,
    dict(type='DefaultFormatBundle3D', class_names=class_names, with_label=False),
    dict(type='Collect3D', keys=['points'])
]
kitti = dict(
    type='KittiDataset', data_root=data_root, split='training', pts_prefix='velodyne_reduced',
    modality=input_modality, classes=class_names, box_type_3d='LiDAR')
data = dict(
    samples_per_gpu={samples_per_gpu},
    workers_per_gpu=0,
    train=dict(
        type='RepeatDataset',
        times={repeat},
        dataset=dict(
            **kitti, ann_file=data_root + 'kitti_infos_train.pkl', pipeline=train_pipeline,
            test_mode=False)),
    val=dict(
        **kitti, ann_file=data_root + 'kitti_infos_val.pkl', pipeline=test_pipeline,
        test_mode=True),
    test=dict(
        **kitti, ann_file=data_root + 'kitti_infos_val.pkl', pipeline=test_pipeline,
        test_mode=True))
anchor_range = [0, -12.8, -1.78, 25.6, 12.8, -1.78]
# mmdet3d's momentum of 0.01 leaves the running statistics near their start after 40
# iterations, and the evaluations far from training: 0.1 settles them.
bn1d = dict(type='BN1d', eps=1e-3, momentum=0.1)
bn2d = dict(type='BN', eps=1e-3, momentum=0.1)
evaluation = dict(interval=1, pipeline=eval_pipeline)
runner = dict(max_epochs={epochs})
checkpoint_config = dict(interval=1)
log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])
custom_hooks = [dict(type='Mmdet3dReportHook')]
dist_params = dict(backend='gloo')
"""

POINTPILLARS = """\
voxel_size = [0.32, 0.32, 4]
model = dict(
    voxel_layer=dict(
        max_num_points=16, point_cloud_range=point_cloud_range, voxel_size=voxel_size,
        max_voxels=(3000, 3000)),
    voxel_encoder=dict(
        feat_channels=[16], voxel_size=voxel_size, point_cloud_range=point_cloud_range,
        norm_cfg=bn1d),
    middle_encoder=dict(in_channels=16, output_shape=[80, 80]),
    backbone=dict(
        in_channels=16, layer_nums=[1, 1, 1], out_channels=[16, 32, 64], norm_cfg=bn2d),
    neck=dict(in_channels=[16, 32, 64], out_channels=[32, 32, 32], norm_cfg=bn2d),
    bbox_head=dict(
        in_channels=96, feat_channels=96, anchor_generator=dict(ranges=[anchor_range])),
    test_cfg=dict(nms_pre=100, score_thr=0.01, max_num=20))
"""

SECOND = """\
voxel_size = [0.1, 0.1, 0.1]
model = dict(
    voxel_layer=dict(
        max_num_points=5, point_cloud_range=point_cloud_range, voxel_size=voxel_size,
        max_voxels=(6000, 6000)),
    middle_encoder=dict(
        sparse_shape=[41, 256, 256],
        base_channels=8,
        output_channels=32,
        encoder_channels=((8,), (16,), (16,), (32,)),
        encoder_paddings=((1,), (1,), (1,), ((0, 1, 1),)),
        norm_cfg=bn1d),
    backbone=dict(in_channels=64, layer_nums=[1, 1], out_channels=[32, 64], norm_cfg=bn2d),
    neck=dict(in_channels=[32, 64], out_channels=[32, 32], norm_cfg=bn2d),
    bbox_head=dict(
        in_channels=64, feat_channels=64, anchor_generator=dict(ranges=[anchor_range])),
    test_cfg=dict(nms_pre=100, score_thr=0.01, max_num=20))
"""

MODELS = {
    "pointpillars": (
        "pointpillars/hv_pointpillars_secfpn_6x8_160e_kitti-3d-car.py",
        POINTPILLARS,
    ),
    "second": ("second/hv_second_secfpn_6x8_80e_kitti-3d-car.py", SECOND),
}


# --------------------------------------------------------------------------- runs


def mim() -> Path:
    found = _mmdet3d_mim()
    assert found is not None
    return found


def tool(name: str) -> str:
    return str(mim() / "tools" / name)


def _missing_op(output: str) -> Optional[str]:
    """The name in the ``MissingOpError`` that stopped a run, or None."""
    found = re.search(r"MissingOpError: (\S+) is not one of mmpar's ops", output)
    return found.group(1) if found else None


def run(cmd: List[str], cwd: Path) -> str:
    """Run ``cmd`` on the CPU; skip on a MissingOpError, fail unless it exits 0.

    Returns stdout + stderr.
    """
    # One thread each, and for numba too: its OpenMP layer, once a parallel kernel of
    # the KITTI evaluation has run, sets OpenMP's thread count, which torch then uses.
    env = mmcv170_env(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    # The wheel's .mim last: create_data.py imports its `tools` package (a namespace
    # package, like this checkout's tools/, so the two merge).
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(mim())])
    proc = run_launcher(cmd, timeout=TIMEOUT, cwd=cwd, env=env)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 and _missing_op(output):
        pytest.skip(f"mmpar does not supply {_missing_op(output)} yet, which mmdet3d imports")
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-8000:]}"
    )
    assert output.count(OPS_LINE) == 1, output[-4000:]
    return output


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if compiled_ops_installed():
        pytest.skip("mmcv-full's compiled ops are installed: by default mmcv.ops stay mmcv's")
    return tmp_path_factory.mktemp("mmdet3d_e2e")


@pytest.fixture(scope="module")
def kitti(workspace: Path) -> Path:
    """The KITTI folder after ``tools/create_data.py kitti``."""
    data = write_kitti(workspace / "kitti", train=SCENES, val=VAL_SCENES, test=SCENES[:1])
    cmd = [sys.executable, "-m", "mmpar.compat.run", tool("create_data.py"), "kitti"]
    cmd += ["--root-path", str(data), "--out-dir", str(data), "--extra-tag", "kitti"]
    run(cmd, cwd=workspace)
    return data


def config(workspace: Path, data: Path, model: str) -> Path:
    base, body = MODELS[model]
    path = workspace / f"{model}_tiny_kitti-3d-car.py"
    common = COMMON.format(
        base=str(mim() / "configs" / base),
        data_root=f"{data}/",
        samples_per_gpu=SAMPLES_PER_GPU,
        repeat=REPEAT,
        epochs=EPOCHS,
    )
    path.write_text(common + body)
    return path


def train(workspace: Path, data: Path, model: str) -> Path:
    work_dir = workspace / f"work_{model}"
    cmd = [sys.executable, "-m", "mmpar.compat.run", tool("train.py")]
    cmd += [str(config(workspace, data, model)), "--work-dir", str(work_dir), "--seed", "0"]
    run(cmd, cwd=workspace)
    return work_dir


METRIC = re.compile(r"'(KITTI/[\w/]+)': (?:np\.float64\()?([-+.\deE]+|nan)")


def evaluate(workspace: Path, data: Path, model: str, work_dir: Path) -> Dict[str, float]:
    """``tools/test.py CONFIG epoch_2.pth --eval mAP``: the metrics it prints last."""
    cmd = [sys.executable, "-m", "mmpar.compat.run", tool("test.py")]
    cmd += [str(config(workspace, data, model)), str(work_dir / f"epoch_{EPOCHS}.pth")]
    output = run([*cmd, "--eval", "mAP"], cwd=workspace)
    assert re.search(r"Car AP11@0\.70, 0\.70, 0\.70:\nbbox AP11:", output), output[-3000:]
    assert re.search(r"Car AP40@0\.70, 0\.50, 0\.50:\nbbox AP40:", output), output[-3000:]
    printed = [ln for ln in output.splitlines() if ln.startswith("{'KITTI/")]
    assert printed, output[-3000:]
    # {'KITTI/Car_3D_AP11_easy_strict': np.float64(95.45), ...} (numpy 2's repr) or 95.45
    metrics = {k: float(v) for k, v in METRIC.findall(printed[-1])}
    assert len(metrics) == printed[-1].count("'KITTI/"), printed[-1]
    return metrics


@pytest.fixture(scope="module")
def pointpillars(workspace: Path, kitti: Path) -> Path:
    return train(workspace, kitti, "pointpillars")


@pytest.fixture(scope="module")
def second(workspace: Path, kitti: Path) -> Path:
    return train(workspace, kitti, "second")


# --------------------------------------------------------------------------- checks


def log_records(work_dir: Path) -> List[Dict]:
    (log,) = work_dir.glob("*.log.json")
    return [json.loads(line) for line in log.read_text().splitlines()]


def check_training(work_dir: Path, world_size: int, epochs: int, validated: bool) -> List[Dict]:
    """Iterations, losses, evaluations, checkpoints, and each rank's report; the val records."""
    iters = math.ceil(len(SCENES) * REPEAT / (SAMPLES_PER_GPU * world_size))
    records = log_records(work_dir)
    train_records = [r for r in records if r.get("mode") == "train"]
    assert [(r["epoch"], r["iter"]) for r in train_records] == [
        (e, i) for e in range(1, epochs + 1) for i in range(1, iters + 1)
    ]
    for r in train_records:
        losses = {k: v for k, v in r.items() if k.startswith("loss")}
        assert set(losses) == {"loss_cls", "loss_bbox", "loss_dir", "loss"}, r
        assert all(math.isfinite(v) for v in losses.values()), r
    val = [r for r in records if r.get("mode") == "val"]
    assert [r["epoch"] for r in val] == (list(range(1, epochs + 1)) if validated else [])
    assert all(0.0 <= r[RISING_AP] <= 100.0 for r in val), val
    for epoch in range(1, epochs + 1):
        assert (work_dir / f"epoch_{epoch}.pth").is_file()
    for rank in range(world_size):
        report = json.loads((work_dir / f"mmpar_report_rank{rank}.json").read_text())
        assert (report["rank"], report["world_size"]) == (rank, world_size), report
        assert report["model_wrapper"].startswith("mmpar."), report
        assert report["collate"].startswith("mmpar."), report
        assert report["batch_points"] == "mmpar.data_container.DataContainer", report
        assert report["ops"]["voxel_layer"].startswith("mmpar.compat.ops."), report
    return val


def sparse_convs(work_dir: Path) -> Dict[str, str]:
    report = json.loads((work_dir / "mmpar_report_rank0.json").read_text())
    return {k: v for k, v in report["ops"].items() if k.startswith("middle_encoder")}


def test_create_data_writes_kitti_infos_and_the_gt_database(kitti: Path) -> None:
    import pickle

    for split in ("train", "val", "trainval", "test"):
        assert (kitti / f"kitti_infos_{split}.pkl").is_file()
        assert (kitti / f"kitti_infos_{split}_mono3d.coco.json").is_file()
    with open(kitti / "kitti_infos_train.pkl", "rb") as f:
        infos = pickle.load(f)
    assert [info["image"]["image_idx"] for info in infos] == list(range(len(SCENES)))
    for info, scene in zip(infos, SCENES):
        assert list(info["annos"]["name"]) == ["Car"] * len(scene)
        assert (info["annos"]["num_points_in_gt"] > 100).all(), info["annos"]
        assert (info["annos"]["difficulty"] == 0).all(), info["annos"]  # easy
    reduced = sorted(p.name for p in (kitti / "training" / "velodyne_reduced").iterdir())
    assert reduced == [f"{i:06d}.bin" for i in range(len(SCENES) + len(VAL_SCENES))]
    with open(kitti / "kitti_dbinfos_train.pkl", "rb") as f:
        db = pickle.load(f)
    assert len(db["Car"]) == sum(len(scene) for scene in SCENES)
    assert all((kitti / item["path"]).is_file() for item in db["Car"])


def test_pointpillars_trains_two_epochs_with_evaluation(pointpillars: Path) -> None:
    check_training(pointpillars, world_size=1, epochs=EPOCHS, validated=True)


def test_pointpillars_test_py_prints_kitti_ap(
    workspace: Path, kitti: Path, pointpillars: Path
) -> None:
    metrics = evaluate(workspace, kitti, "pointpillars", pointpillars)
    assert all(0.0 <= v <= 100.0 for v in metrics.values()), metrics
    # The checkpoint of the last epoch, on the same frames: the last evaluation's AP.
    last = [r for r in log_records(pointpillars) if r.get("mode") == "val"][-1]
    assert metrics[RISING_AP] == pytest.approx(last[RISING_AP], abs=1e-3)
    assert metrics[RISING_AP] > 0.0, metrics


def test_second_trains_two_epochs_and_its_ap_rises(second: Path) -> None:
    val = check_training(second, world_size=1, epochs=EPOCHS, validated=True)
    assert val[-1][RISING_AP] > val[0][RISING_AP], val
    assert sparse_convs(second), "SECOND's middle encoder ran no mmcv.ops sparse convolution"
    assert all(v.startswith("mmpar.compat.ops.") for v in sparse_convs(second).values())


def test_second_test_py_prints_kitti_ap(workspace: Path, kitti: Path, second: Path) -> None:
    metrics = evaluate(workspace, kitti, "second", second)
    assert all(0.0 <= v <= 100.0 for v in metrics.values()), metrics
    last = [r for r in log_records(second) if r.get("mode") == "val"][-1]
    assert metrics[RISING_AP] == pytest.approx(last[RISING_AP], abs=1e-3)
    assert metrics[RISING_AP] > 0.0, metrics


def test_second_trains_under_torchrun_with_two_gloo_processes(workspace: Path, kitti: Path) -> None:
    work_dir = workspace / "work_second_dist"
    cfg = config(workspace, kitti, "second")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2"]
    cmd += ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    cmd += ["-m", "mmpar.compat.run", tool("train.py"), str(cfg), "--launcher", "pytorch"]
    cmd += ["--work-dir", str(work_dir), "--seed", "0", "--no-validate"]
    cmd += ["--cfg-options", "runner.max_epochs=1"]
    output = run(cmd, cwd=workspace)
    assert "Distributed training: True" in output
    check_training(work_dir, world_size=2, epochs=1, validated=False)
