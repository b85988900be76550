"""mmdet 2.x's own tools/train.py and tools/test.py, unmodified, on mmpar and mmpar's mmcv.ops.

The scripts come from the installed mmdet wheel (``mmdet/.mim/tools``) and run
under ``python -m mmpar.compat.run``, which patches ``mmcv.parallel`` and, where
mmcv's compiled ops do not load (here: mmcv without ``mmcv._ext``), supplies
mmpar's ops as ``mmcv.ops``. The config is mmdet's own Faster R-CNN R-50-FPN
config (``_base_``, by absolute path) with a small ResNet-18 and small heads, on
a small COCO-format set of JPEG files that the test draws: coloured rectangles
(one colour per class) on grey noise.

1. One process on the CPU: 2 epochs, validation (``bbox``) after each, checkpoints.
2. ``tools/test.py CONFIG epoch_2.pth --eval bbox``: the COCO metrics are printed.
3. torchrun with 2 gloo processes: 2 epochs, distributed validation.

A hook from ``tests/compat/configs/mmdet_e2e_report.py`` (loaded through the
config's ``custom_imports``) reports which wrapper, batch container, collate
function and RoI layer the run used: mmpar's.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest

from tests._coco_files import write_coco_files
from tests._dist_helpers import free_port, run_launcher
from tests.compat._mmcv_env import (
    child_env,
    compiled_ops_installed,
    requires_mmdet,
    requires_torchvision,
)

pytestmark = [requires_mmdet, requires_torchvision, pytest.mark.slow]

TIMEOUT = 240
EPOCHS = 2
CLASSES = ("red", "green", "blue")
COLOURS = {"red": (215, 35, 35), "green": (35, 190, 60), "blue": (40, 60, 225)}
#: (landscape, portrait) images.
TRAIN_IMAGES, VAL_IMAGES = (8, 4), (4, 2)
SAMPLES_PER_GPU = 2
OPS_LINE = "mmpar: mmcv.ops are mmpar's"

CONFIG = """\
_base_ = {base!r}
custom_imports = dict(
    imports=['tests.compat.configs.mmdet_e2e_report'], allow_failed_imports=False)
classes = {classes!r}
model = dict(
    backbone=dict(depth=18, frozen_stages=-1, norm_eval=False, init_cfg=None),
    neck=dict(in_channels=[64, 128, 256, 512], out_channels=32),
    rpn_head=dict(in_channels=32, feat_channels=32),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=32),
        bbox_head=dict(in_channels=32, fc_out_channels=64, num_classes={num_classes})),
    train_cfg=dict(
        rpn=dict(sampler=dict(num=64)),
        rpn_proposal=dict(nms_pre=300, max_per_img=100),
        rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(rpn=dict(nms_pre=300, max_per_img=100)))
img_norm_cfg = dict(
    mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
img_scale = (128, 96)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', img_scale=img_scale, keep_ratio=True),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Normalize', **img_norm_cfg),
    dict(type='Pad', size_divisor=32),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels']),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='MultiScaleFlipAug',
        img_scale=img_scale,
        flip=False,
        transforms=[
            dict(type='Resize', keep_ratio=True),
            dict(type='RandomFlip'),
            dict(type='Normalize', **img_norm_cfg),
            dict(type='Pad', size_divisor=32),
            dict(type='ImageToTensor', keys=['img']),
            dict(type='Collect', keys=['img']),
        ])
]
data = dict(
    samples_per_gpu={samples_per_gpu},
    workers_per_gpu=2,
    train=dict(
        classes=classes, ann_file={train_ann!r}, img_prefix={train_img!r},
        pipeline=train_pipeline),
    val=dict(
        classes=classes, ann_file={val_ann!r}, img_prefix={val_img!r},
        pipeline=test_pipeline),
    test=dict(
        classes=classes, ann_file={val_ann!r}, img_prefix={val_img!r},
        pipeline=test_pipeline))
optimizer = dict(lr=0.01)
optimizer_config = dict(_delete_=True, grad_clip=dict(max_norm=10, norm_type=2))
lr_config = dict(warmup_iters=4, warmup_ratio=0.1, step=[{epochs}])
runner = dict(max_epochs={epochs})
evaluation = dict(interval=1, metric='bbox')
checkpoint_config = dict(interval=1)
log_config = dict(interval=1)
custom_hooks = [dict(type='NumClassCheckHook'), dict(type='MmparReportHook')]
dist_params = dict(backend='gloo')
load_from = None
"""


# --------------------------------------------------------------------------- data


def _draw_set(root: Path, n_landscape: int, n_portrait: int, seed: int) -> Tuple[str, str]:
    """JPEG files of 96-160 px with 1-3 rectangles each, and their COCO file.

    mmdet's samplers batch landscape and portrait images apart (each group
    padded to whole batches), so the counts of each fix the iterations.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    categories = [dict(id=i + 1, name=name) for i, name in enumerate(CLASSES)]
    images, annotations, pixels = [], [], {}
    for image_id in range(1, n_landscape + n_portrait + 1):
        long, short = (int(v) for v in np.sort(rng.choice(np.arange(96, 161), 2, replace=False)))
        width, height = (long, short) if image_id <= n_landscape else (short, long)
        arr = rng.integers(100, 156, (height, width, 3)).astype(np.uint8)
        n_boxes = int(rng.integers(1, 4))
        # One box per vertical band of the image, so that the boxes never overlap.
        band = width // n_boxes
        for k in range(n_boxes):
            label = int(rng.integers(len(CLASSES)))
            w = int(rng.integers(max(14, band // 3), band - 4 + 1))
            h = int(rng.integers(20, height * 3 // 4 + 1))
            x = k * band + int(rng.integers(0, band - w + 1))
            y = int(rng.integers(0, height - h + 1))
            arr[y : y + h, x : x + w] = COLOURS[CLASSES[label]]
            annotations.append(
                dict(
                    id=len(annotations) + 1,
                    image_id=image_id,
                    category_id=label + 1,
                    bbox=[x, y, w, h],
                    area=w * h,
                    iscrowd=0,
                )
            )
        file_name = f"img_{image_id:02d}.jpg"
        images.append(dict(id=image_id, file_name=file_name, width=width, height=height))
        pixels[file_name] = arr
    coco = dict(images=images, annotations=annotations, categories=categories)
    ann_file, img_prefix = write_coco_files(root, coco, images=())
    for file_name, arr in pixels.items():
        Image.fromarray(arr).save(Path(img_prefix) / file_name, quality=95)
    return ann_file, img_prefix


def mmdet_mim() -> Path:
    spec = importlib.util.find_spec("mmdet")
    if spec is None or spec.origin is None:
        pytest.skip("mmdet is not installed")
    mim = Path(spec.origin).parent / ".mim"
    if not (mim / "tools" / "train.py").is_file():
        pytest.skip(f"this mmdet wheel ships no tools/train.py under {mim}")
    return mim


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if compiled_ops_installed():
        pytest.skip("mmcv-full's compiled ops are installed: by default mmcv.ops stay mmcv's")
    root = tmp_path_factory.mktemp("mmdet_e2e")
    train_ann, train_img = _draw_set(root / "train", *TRAIN_IMAGES, seed=0)
    val_ann, val_img = _draw_set(root / "val", *VAL_IMAGES, seed=1)
    base = mmdet_mim() / "configs" / "faster_rcnn" / "faster_rcnn_r50_fpn_1x_coco.py"
    path = root / "faster_rcnn_r18_tiny.py"
    path.write_text(
        CONFIG.format(
            base=str(base),
            classes=CLASSES,
            num_classes=len(CLASSES),
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
    # No GPU even where there is one: the runs are on the CPU everywhere (mmdet's
    # build_ddp would also put both processes of run 3 on cuda:LOCAL_RANK).
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
    return str(mmdet_mim() / "tools" / name)


@pytest.fixture(scope="module")
def single_run(config: Path) -> Path:
    """``python -m mmpar.compat.run tools/train.py CONFIG``: 2 epochs in one process."""
    work_dir = config.parent / "work_single"
    cmd = [sys.executable, "-m", "mmpar.compat.run", tool("train.py"), str(config)]
    run([*cmd, "--work-dir", str(work_dir), "--seed", "0"], cwd=config.parent)
    return work_dir


def log_records(work_dir: Path) -> List[Dict]:
    (log,) = work_dir.glob("*.log.json")
    return [json.loads(line) for line in log.read_text().splitlines()]


def check_training(work_dir: Path, world_size: int, wrapper: str) -> None:
    # mmdet's (Distributed)GroupSampler: each orientation group padded to whole batches.
    iters_per_epoch = sum(math.ceil(n / (SAMPLES_PER_GPU * world_size)) for n in TRAIN_IMAGES)
    records = log_records(work_dir)
    train = [r for r in records if r.get("mode") == "train"]
    assert [(r["epoch"], r["iter"]) for r in train] == [
        (e, i) for e in range(1, EPOCHS + 1) for i in range(1, iters_per_epoch + 1)
    ]
    for r in train:
        losses = {k: v for k, v in r.items() if k.startswith("loss")}
        assert {"loss_rpn_cls", "loss_rpn_bbox", "loss_cls", "loss_bbox", "loss"} <= set(losses)
        assert all(math.isfinite(v) for v in losses.values()), r
    val = [r for r in records if r.get("mode") == "val"]
    assert [r["epoch"] for r in val] == list(range(1, EPOCHS + 1))
    assert all(0.0 <= r["bbox_mAP"] <= 1.0 for r in val), val
    for epoch in range(1, EPOCHS + 1):
        assert (work_dir / f"epoch_{epoch}.pth").is_file()
    for rank in range(world_size):
        report = json.loads((work_dir / f"mmpar_report_rank{rank}.json").read_text())
        assert report["world_size"] == world_size
        assert report["model_wrapper"].startswith("mmpar."), report
        assert report["model_wrapper"].endswith(f".{wrapper}"), report
        assert report["batch_img"] == "mmpar.data_container.DataContainer", report
        assert report["collate"].startswith("mmpar."), report
        assert report["num_workers"] == 2
        # The RoI extractor's RoIAlign is mmpar's op, mounted as mmcv.ops.roi_align.
        assert report["ops"], report
        assert all(v.startswith("mmpar.compat.ops.") for v in report["ops"].values()), report


def test_train_py_trains_two_epochs_in_one_process(single_run: Path) -> None:
    check_training(single_run, world_size=1, wrapper="MMDataParallel")


def test_test_py_evaluates_the_checkpoint(config: Path, single_run: Path) -> None:
    checkpoint = single_run / f"epoch_{EPOCHS}.pth"
    work_dir = config.parent / "work_test"
    cmd = [sys.executable, "-m", "mmpar.compat.run", tool("test.py"), str(config)]
    output = run(
        [*cmd, str(checkpoint), "--eval", "bbox", "--work-dir", str(work_dir)], cwd=config.parent
    )
    metric = printed_metric(output)
    assert metric is not None, output[-4000:]
    assert 0.0 <= metric["bbox_mAP"] <= 1.0
    (saved,) = work_dir.glob("eval_*.json")
    assert json.loads(saved.read_text())["metric"]["bbox_mAP"] == metric["bbox_mAP"]


def printed_metric(output: str) -> Optional[Dict[str, float]]:
    """The metrics that test.py prints: ``OrderedDict([('bbox_mAP', 0.0), ...])``.

    (``OrderedDict({'bbox_mAP': 0.0, ...})`` from Python 3.12 on.)
    """
    for line in reversed(output.splitlines()):
        text = line.strip()
        if not text.startswith("OrderedDict(") or "'bbox_mAP'" not in text:
            continue
        return dict(ast.literal_eval(text[len("OrderedDict(") : -1]))
    return None


def test_train_py_trains_under_torchrun_with_two_gloo_processes(config: Path) -> None:
    work_dir = config.parent / "work_dist"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2"]
    cmd += ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    cmd += ["-m", "mmpar.compat.run", tool("train.py"), str(config), "--launcher", "pytorch"]
    run([*cmd, "--work-dir", str(work_dir), "--seed", "0"], cwd=config.parent)
    check_training(work_dir, world_size=2, wrapper="MMDistributedDataParallel")
