"""mmrotate 0.x's own tools/train.py and tools/test.py, unmodified, on mmpar and mmpar's mmcv.ops.

The scripts come from the installed mmrotate wheel (``mmrotate/.mim/tools``) and
run under ``python -m mmpar.compat.run``, which patches ``mmcv.parallel``,
supplies mmpar's ops as ``mmcv.ops`` (mmcv here has no compiled ops) and mends
what assumes a GPU (``mmpar.compat.cpu_dist``). The config is mmrotate's own
rotated RetinaNet (OBB, le90) config (``_base_``, by absolute path) with a
small ResNet-18 (16 base channels) and small heads, on a small DOTA-format set
that the test draws: PNG images of 128 px with two rotated rectangles each
(one colour per class) on grey noise, and one annotation file per image whose
lines are ``x1 y1 x2 y2 x3 y3 x4 y4 class difficulty``.

What runs of mmpar's rotated ops: the assigner's rotated IoU (``box_iou_rotated``
through ``RBboxOverlaps2D``), the rotated NMS of the test-time post-processing
(``nms_rotated``) and the mAP's rotated IoU (``box_iou_rotated`` in a ``spawn``
pool, which ``mmpar.compat.run`` patches too).

1. One process on the CPU: 2 epochs, checkpoints (``--no-validate``: step 2
   evaluates the same checkpoint on the same images).
2. ``tools/test.py CONFIG epoch_2.pth --eval mAP``: the mAP table and its value
   are printed; the boxes are easy (near the anchors' centres, sizes and angle)
   and the optimizer is AdamW, so 2 epochs of 4 iterations find some of them:
   mAP > 0.
3. torchrun with 2 gloo processes: 2 epochs, distributed validation (mAP) after
   the last.

Every process that imports mmrotate costs seconds (torch, torchvision, mmdet,
sklearn, e2cnn), the mAP's pool process too: hence no validation in step 1.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest

from tests._dist_helpers import free_port, run_launcher
from tests.compat._mmcv_env import (
    child_env,
    compiled_ops_installed,
    requires_mmdet,
    requires_torchvision,
)


def _mmrotate_missing() -> Optional[str]:
    """Why mmrotate 0.x cannot run here (looked up, not imported), or None."""
    try:
        version = metadata.version("mmrotate")
    except metadata.PackageNotFoundError:
        return "mmrotate is not installed"
    if not version.startswith("0."):
        return f"needs mmrotate 0.x (mmcv 1.x), found {version}"
    # mmrotate imports e2cnn (its ReDet backbone) whatever the model.
    if importlib.util.find_spec("e2cnn") is None:
        return "mmrotate needs e2cnn (pip install e2cnn), which is not installed"
    return None


pytestmark = [
    requires_mmdet,
    pytest.mark.skipif(_mmrotate_missing() is not None, reason=str(_mmrotate_missing())),
    requires_torchvision,
    pytest.mark.slow,
]

TIMEOUT = 240
EPOCHS = 2
CLASSES = ("red", "blue")
COLOURS = {"red": (215, 35, 35), "blue": (40, 60, 225)}
SIZE = 128
TRAIN_IMAGES, VAL_IMAGES = 8, 4
SAMPLES_PER_GPU = 2
OPS_LINE = "mmpar: mmcv.ops are mmpar's"

CONFIG = """\
_base_ = {base!r}
custom_imports = dict(
    imports=['tests.compat.configs.mmdet_e2e_report'], allow_failed_imports=False)
angle_version = 'le90'
classes = {classes!r}
model = dict(
    backbone=dict(
        depth=18, base_channels=16, frozen_stages=-1, norm_eval=False, init_cfg=None),
    neck=dict(in_channels=[16, 32, 64, 128], out_channels=32),
    bbox_head=dict(
        num_classes={num_classes},
        in_channels=32,
        feat_channels=32,
        stacked_convs=1,
        anchor_generator=dict(octave_base_scale=3, scales_per_octave=1)),
    test_cfg=dict(nms_pre=100, score_thr=0.02, max_per_img=20))
img_norm_cfg = dict(
    mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='RResize', img_scale=({size}, {size})),
    dict(
        type='RRandomFlip',
        flip_ratio=[0.25, 0.25, 0.25],
        direction=['horizontal', 'vertical', 'diagonal'],
        version=angle_version),
    dict(type='Normalize', **img_norm_cfg),
    dict(type='Pad', size_divisor=32),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels']),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='MultiScaleFlipAug',
        img_scale=({size}, {size}),
        flip=False,
        transforms=[
            dict(type='RResize'),
            dict(type='Normalize', **img_norm_cfg),
            dict(type='Pad', size_divisor=32),
            dict(type='DefaultFormatBundle'),
            dict(type='Collect', keys=['img']),
        ])
]
data = dict(
    samples_per_gpu={samples_per_gpu},
    workers_per_gpu=1,
    train=dict(
        classes=classes, ann_file={train_ann!r}, img_prefix={train_img!r},
        pipeline=train_pipeline, version=angle_version),
    val=dict(
        classes=classes, ann_file={val_ann!r}, img_prefix={val_img!r},
        pipeline=test_pipeline, version=angle_version),
    test=dict(
        classes=classes, ann_file={val_ann!r}, img_prefix={val_img!r},
        pipeline=test_pipeline, version=angle_version))
# AdamW: from scratch it finds the boxes in 8 iterations (mAP 0.2-0.6 over seeds);
# the schedule's SGD (lr 0.01-0.05) hardly moves the focal loss in 32.
optimizer = dict(_delete_=True, type='AdamW', lr=0.002, weight_decay=0.0001)
lr_config = dict(warmup_iters=4, warmup_ratio=0.1, step=[{epochs}])
runner = dict(max_epochs={epochs})
# The mAP's pool of processes: one (mmrotate's default asks for 4).
evaluation = dict(interval={epochs}, metric='mAP', nproc=1)
checkpoint_config = dict(interval=1)
log_config = dict(interval=1)
custom_hooks = [dict(type='MmparReportHook')]
dist_params = dict(backend='gloo')
"""


# --------------------------------------------------------------------------- data


def _rectangle(cx: float, cy: float, w: float, h: float, angle: float) -> List[Tuple[float, float]]:
    """The corners of a ``w`` x ``h`` rectangle turned by ``angle`` (radians), clockwise."""
    c, s = math.cos(angle), math.sin(angle)
    local = ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))
    return [(cx + c * x - s * y, cy + s * x + c * y) for x, y in local]


def _draw_set(root: Path, n_images: int, seed: int) -> Tuple[str, str]:
    """DOTA's layout: ``root/images/*.png`` and ``root/annfiles/*.txt``, one file per image.

    Each image holds two rectangles, one per half, turned by 4-12 degrees
    either way, of about the size and shape of the 2:1 anchors of stride 16
    (68 x 34 px) and centred near those anchors' centres.
    """
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    images, annfiles = root / "images", root / "annfiles"
    images.mkdir(parents=True)
    annfiles.mkdir(parents=True)
    for i in range(n_images):
        arr = rng.integers(100, 156, (SIZE, SIZE, 3)).astype(np.uint8)
        image = Image.fromarray(arr)
        draw = ImageDraw.Draw(image)
        lines = []
        for cy in (SIZE // 4, 3 * SIZE // 4):
            name = CLASSES[int(rng.integers(len(CLASSES)))]
            angle = math.radians(float(rng.uniform(4, 12))) * float(rng.choice([-1, 1]))
            corners = _rectangle(
                cx=SIZE / 2 + float(rng.uniform(-3, 3)),
                cy=cy + float(rng.uniform(-3, 3)),
                w=float(rng.uniform(60, 76)),
                h=float(rng.uniform(30, 38)),
                angle=angle,
            )
            draw.polygon(corners, fill=COLOURS[name])
            lines.append(" ".join(f"{v:.1f}" for xy in corners for v in xy) + f" {name} 0")
        image.save(images / f"P{i:04d}.png")
        (annfiles / f"P{i:04d}.txt").write_text("\n".join(lines) + "\n")
    # mmrotate's DOTADataset globs ann_file + '/*.txt': folders as strings with no slash.
    return str(annfiles), str(images)


def mmrotate_mim() -> Path:
    spec = importlib.util.find_spec("mmrotate")
    assert spec is not None and spec.origin is not None
    mim = Path(spec.origin).parent / ".mim"
    if not (mim / "tools" / "train.py").is_file():
        pytest.skip(f"this mmrotate wheel ships no tools/train.py under {mim}")
    return mim


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if compiled_ops_installed():
        pytest.skip("mmcv-full's compiled ops are installed: by default mmcv.ops stay mmcv's")
    root = tmp_path_factory.mktemp("mmrotate_e2e")
    train_ann, train_img = _draw_set(root / "train", TRAIN_IMAGES, seed=0)
    val_ann, val_img = _draw_set(root / "val", VAL_IMAGES, seed=1)
    base = (
        mmrotate_mim()
        / "configs"
        / "rotated_retinanet"
        / "rotated_retinanet_obb_r50_fpn_1x_dota_le90.py"
    )
    path = root / "rotated_retinanet_obb_r18_tiny_le90.py"
    path.write_text(
        CONFIG.format(
            base=str(base),
            classes=CLASSES,
            num_classes=len(CLASSES),
            size=SIZE,
            samples_per_gpu=SAMPLES_PER_GPU,
            epochs=EPOCHS,
            train_ann=train_ann,
            train_img=train_img,
            val_ann=val_ann,
            val_img=val_img,
        )
    )
    return path


# --------------------------------------------------------------------------- runs


def run(cmd: List[str], cwd: Path) -> str:
    """Run ``cmd``; fail with its output unless it exits 0. Returns stdout + stderr."""
    # No GPU even where there is one: the runs are on the CPU everywhere.
    env = child_env(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = run_launcher(cmd, timeout=TIMEOUT, cwd=cwd, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-8000:]}"
    )
    assert output.count(OPS_LINE) == 1, output[-4000:]
    return output


def tool(name: str) -> str:
    return str(mmrotate_mim() / "tools" / name)


@pytest.fixture(scope="module")
def single_run(config: Path) -> Path:
    """``python -m mmpar.compat.run tools/train.py CONFIG``: 2 epochs in one process."""
    work_dir = config.parent / "work_single"
    cmd = [sys.executable, "-m", "mmpar.compat.run", tool("train.py"), str(config)]
    run([*cmd, "--work-dir", str(work_dir), "--seed", "0", "--no-validate"], cwd=config.parent)
    return work_dir


def log_records(work_dir: Path) -> List[Dict]:
    (log,) = work_dir.glob("*.log.json")
    return [json.loads(line) for line in log.read_text().splitlines()]


def check_training(work_dir: Path, world_size: int, wrapper: str, validated: bool) -> None:
    # DOTADataset puts every image in one group; the sampler pads it to whole batches.
    iters_per_epoch = math.ceil(TRAIN_IMAGES / (SAMPLES_PER_GPU * world_size))
    records = log_records(work_dir)
    train = [r for r in records if r.get("mode") == "train"]
    assert [(r["epoch"], r["iter"]) for r in train] == [
        (e, i) for e in range(1, EPOCHS + 1) for i in range(1, iters_per_epoch + 1)
    ]
    for r in train:
        losses = {k: v for k, v in r.items() if k.startswith("loss")}
        assert set(losses) == {"loss_cls", "loss_bbox", "loss"}, r
        assert all(math.isfinite(v) for v in losses.values()), r
    val = [r for r in records if r.get("mode") == "val"]
    assert [r["epoch"] for r in val] == ([EPOCHS] if validated else [])
    assert all(0.0 <= r["mAP"] <= 1.0 for r in val), val
    for epoch in range(1, EPOCHS + 1):
        assert (work_dir / f"epoch_{epoch}.pth").is_file()
    for rank in range(world_size):
        report = json.loads((work_dir / f"mmpar_report_rank{rank}.json").read_text())
        assert (report["rank"], report["world_size"]) == (rank, world_size), report
        assert report["model_wrapper"].startswith("mmpar."), report
        assert report["model_wrapper"].endswith(f".{wrapper}"), report
        assert report["batch_img"] == "mmpar.data_container.DataContainer", report
        assert report["collate"].startswith("mmpar."), report


def test_train_py_trains_two_epochs_in_one_process(single_run: Path) -> None:
    check_training(single_run, world_size=1, wrapper="MMDataParallel", validated=False)


#: The last line of mmrotate's mAP table: ``| mAP   |     |      |        | 0.123 |``.
MAP_ROW = re.compile(r"^\|\s*mAP\s*\|(?:\s*\|){3}\s*(\d+\.\d+)\s*\|$", re.MULTILINE)


def test_test_py_evaluates_the_checkpoint_with_map(config: Path, single_run: Path) -> None:
    checkpoint = single_run / f"epoch_{EPOCHS}.pth"
    work_dir = config.parent / "work_test"
    cmd = [sys.executable, "-m", "mmpar.compat.run", tool("test.py"), str(config)]
    output = run(
        [*cmd, str(checkpoint), "--eval", "mAP", "--work-dir", str(work_dir)], cwd=config.parent
    )
    rows = MAP_ROW.findall(output)
    assert len(rows) == 1, output[-4000:]
    (saved,) = work_dir.glob("eval_*.json")
    value = json.loads(saved.read_text())["metric"]["mAP"]
    assert value == pytest.approx(float(rows[0]), abs=5e-4)
    # test.py prints the metrics dict last: {'mAP': 0.12...}
    assert re.search(r"\{'mAP': \d+\.\d+(e-?\d+)?\}", output), output[-2000:]
    assert value > 0.0, output[-3000:]


def test_train_py_trains_under_torchrun_with_two_gloo_processes(config: Path) -> None:
    work_dir = config.parent / "work_dist"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2"]
    cmd += ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    cmd += ["-m", "mmpar.compat.run", tool("train.py"), str(config), "--launcher", "pytorch"]
    output = run([*cmd, "--work-dir", str(work_dir), "--seed", "0"], cwd=config.parent)
    assert "Distributed training: True" in output
    check_training(work_dir, world_size=2, wrapper="MMDistributedDataParallel", validated=True)
