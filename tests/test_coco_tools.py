"""``--eval bbox`` and ``evaluation = dict(metric="bbox")`` in the tools, as subprocesses."""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pytest

from mmpar.evaluation import BBOX_KEYS
from tests._coco_files import write_coco_files
from tests._dist_helpers import run_launcher
from tests.test_coco_eval import DATA

pytest.importorskip("PIL.Image")
COCO = pytest.importorskip("pycocotools.coco").COCO
COCOeval = pytest.importorskip("pycocotools.cocoeval").COCOeval

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = str(ROOT / "configs" / "tiny_det" / "tiny_det_synthetic.py")
TIMEOUT = 180

CONFIG = """
_base_ = [
    "{root}/configs/_base_/models/tiny_det.py",
    "{root}/configs/_base_/schedules/schedule_12e.py",
    "{root}/configs/_base_/default_runtime.py",
]
model = dict(num_classes=3, width=16, score_thr=0.0)
pipeline = [
    dict(type="LoadImageFromFile"),
    dict(type="LoadAnnotations"),
    dict(type="Resize", img_scale=(96, 80), keep_ratio=True),
    dict(type="Normalize", mean=[128, 128, 128], std=[64, 64, 64]),
    dict(type="DefaultFormatBundle", size_divisor=32),
    dict(type="Collect", keys=["img", "gt_bboxes", "gt_labels"]),
]
test_pipeline = pipeline[:1] + pipeline[2:-1] + [dict(type="Collect", keys=["img"])]
split = dict(type="CocoDetection", ann_file="{ann_file}", img_prefix="{img_prefix}")
data = dict(
    samples_per_gpu=3,
    workers_per_gpu=0,
    train=dict(split, pipeline=pipeline),
    val=dict(split, pipeline=test_pipeline),
    test=dict(split, pipeline=test_pipeline),
)
# 40 epochs of one batch: enough to find the boxes of the (training = test) set.
runner = dict(max_epochs=40)
lr_config = dict(step=[35])
checkpoint_config = dict(interval=40)
evaluation = dict(interval=20, metric="bbox")
"""


def run_tool(
    args: List[str], pythonpath: Optional[str] = None, timeout: float = TIMEOUT
) -> "subprocess.CompletedProcess":  # noqa: F821
    env = dict(os.environ, PYTHONPATH=pythonpath or str(ROOT), OMP_NUM_THREADS="1")
    return run_launcher([sys.executable, *args], timeout=timeout, cwd=ROOT, env=env)


def checked(proc) -> "subprocess.CompletedProcess":  # noqa: F821
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr}"
    return proc


def draw_boxes(folder: str) -> None:
    """Replace the noise images by the annotated boxes, filled with one colour per
    category on a dark background: a set the tiny model learns in seconds."""
    from PIL import Image, ImageDraw

    colours = {2: (255, 60, 60), 5: (60, 255, 60), 9: (60, 60, 255)}
    for info in DATA["images"]:
        image = Image.new("RGB", (info["width"], info["height"]), (20, 20, 20))
        draw = ImageDraw.Draw(image)
        for ann in DATA["annotations"]:
            if ann["image_id"] == info["id"] and not ann["iscrowd"]:
                x, y, w, h = ann["bbox"]
                draw.rectangle([x, y, x + w - 1, y + h - 1], fill=colours[ann["category_id"]])
        image.save(Path(folder) / info["file_name"])


@pytest.fixture(scope="module")
def coco_run(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """A COCO-format set with image files, its config, and a short training run on it."""
    root = tmp_path_factory.mktemp("coco")
    ann_file, img_prefix = write_coco_files(root / "data", DATA)
    draw_boxes(img_prefix)
    config = root / "tiny_det_coco.py"
    config.write_text(CONFIG.format(root=ROOT, ann_file=ann_file, img_prefix=img_prefix))
    work_dir = root / "work"
    proc = checked(
        run_tool(["tools/train.py", str(config), "--work-dir", str(work_dir), "--seed", "0"])
    )
    return dict(root=root, config=config, ann_file=Path(ann_file), work_dir=work_dir, proc=proc)


def pycocotools_stats_of(results: list, ann_file: Path) -> List[float]:
    """pycocotools' own figures for ``results`` (mmpar's per-image, per-label arrays),
    converted here by hand: image ids and category ids in file order (as the dataset has
    them), boxes to ``[x, y, w, h]``."""
    img_ids = [image["id"] for image in DATA["images"]]
    cat_ids = sorted(c["id"] for c in DATA["categories"])
    dets = []
    for img_id, per_image in zip(img_ids, results):
        for label, boxes in enumerate(per_image):
            for x1, y1, x2, y2, score in np.asarray(boxes, np.float64).tolist():
                dets.append(
                    dict(
                        image_id=img_id,
                        category_id=cat_ids[label],
                        bbox=[x1, y1, x2 - x1, y2 - y1],
                        score=score,
                    )
                )
    gt = COCO(str(ann_file))
    evaluator = COCOeval(gt, gt.loadRes(dets), "bbox")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    return [float(s) for s in evaluator.stats[:6]]


def test_training_evaluates_coco_ap_into_the_logs(coco_run: Dict[str, Path]) -> None:
    work_dir = coco_run["work_dir"]
    (log,) = work_dir.glob("*.log.json")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    vals = [r for r in records if r["mode"] == "val"]
    assert [(r["tag"], r["epoch"]) for r in vals] == [
        ("before training", 0),
        ("val", 20),
        ("val", 40),
    ]
    for record in vals:
        assert set(BBOX_KEYS) <= set(record) and "mAP" not in record
        assert all(-1 <= record[key] <= 1 for key in BBOX_KEYS)
    # The model learns the boxes: the figures are not those of an untrained model.
    assert vals[0]["bbox_mAP"] < 0.05 and vals[-1]["bbox_mAP_50"] > 0.5
    (text_log,) = work_dir.glob("*[0-9].log")
    text = text_log.read_text()
    assert "Epoch(val) [40]\tbbox_mAP: " in text and "bbox_mAP_copypaste: " in text
    assert "Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ]" in text
    assert "bbox_mAP before training: " in text
    # pycocotools' own chatter stays out; so does the progress line (stderr is a pipe).
    proc = coco_run["proc"]
    assert "creating index" not in proc.stdout + proc.stderr
    assert "img/s" not in proc.stdout + proc.stderr + text


def test_test_tool_eval_bbox_equals_pycocotools(coco_run: Dict[str, Path]) -> None:
    out = coco_run["root"] / "results.pkl"
    proc = checked(
        run_tool(
            [
                "tools/test.py",
                str(coco_run["config"]),
                str(coco_run["work_dir"] / "latest.pth"),
                "--eval",
                "bbox",
                "mAP",
                "--out",
                str(out),
            ]
        )
    )
    with open(out, "rb") as f:
        results = pickle.load(f)
    assert len(results) == 3 and sum(len(b) for r in results for b in r) > 0
    expected = pycocotools_stats_of(results, coco_run["ann_file"])
    assert expected[0] > 0.1 and expected[1] > 0.5  # detections that find the boxes
    metrics = json.loads(out.with_suffix(".metrics.json").read_text())
    assert [metrics[key] for key in BBOX_KEYS] == expected
    assert 0 <= metrics["mAP"] <= 1  # both metrics when both are asked for
    lines = proc.stdout.splitlines()
    figures = ", ".join(f"{key}: {value:.4f}" for key, value in zip(BBOX_KEYS, expected))
    assert figures in lines
    copypaste = " ".join(f"{s:.3f}" for s in expected)
    assert f"bbox_mAP_copypaste: {copypaste}" in lines
    assert sum(line.startswith(" Average Precision  (AP) @[") for line in lines) == 6
    assert any(line.startswith("mAP@0.5: ") for line in lines)


def test_eval_bbox_on_data_without_coco_annotations_is_one_line(coco_run: Dict[str, Path]) -> None:
    # The dataset is checked after the checkpoint is read, before the model is built.
    checkpoint = str(coco_run["work_dir"] / "latest.pth")
    proc = run_tool(["tools/test.py", SYNTHETIC, checkpoint, "--eval", "bbox"])
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --eval bbox: metric 'bbox' (COCO AP) needs a COCO-format")
    assert "SyntheticShapes has no coco_ground_truth" in line and "'mAP'" in line


@pytest.fixture
def without_pycocotools(tmp_path: Path) -> str:
    """A PYTHONPATH on which ``import pycocotools`` fails, as where it is not installed."""
    shadow = tmp_path / "shadow" / "pycocotools"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pycocotools'\", name='pycocotools')\n"
    )
    return f"{shadow.parent}{os.pathsep}{ROOT}"


def test_eval_bbox_without_pycocotools_says_how_to_install(
    tmp_path: Path, without_pycocotools: str
) -> None:
    args = ["tools/test.py", SYNTHETIC, str(tmp_path / "none.pth"), "--eval", "bbox"]
    proc = run_tool(args, pythonpath=without_pycocotools)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --eval bbox: COCO box AP needs pycocotools")
    assert 'pip install -e ".[coco]"' in line
    # mAP@0.5 needs no pycocotools: the run gets past the metric check (to the checkpoint).
    proc = run_tool(args[:-1] + ["mAP"], pythonpath=without_pycocotools)
    assert proc.returncode == 2 and "error: checkpoint" in proc.stderr


def test_training_with_metric_bbox_without_pycocotools_fails_before_training(
    coco_run: Dict[str, Path], tmp_path: Path, without_pycocotools: str
) -> None:
    args = ["tools/train.py", str(coco_run["config"]), "--work-dir", str(tmp_path)]
    proc = run_tool(args, pythonpath=without_pycocotools)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: evaluation.metric: COCO box AP needs pycocotools")
    assert not list(tmp_path.glob("*.pth"))


def test_training_with_metric_bbox_on_synthetic_data_is_one_line(tmp_path: Path) -> None:
    args = ["tools/train.py", SYNTHETIC, "--work-dir", str(tmp_path), "--cfg-options"]
    proc = run_tool(args + ["evaluation.metric=bbox"])
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: evaluation.metric: metric 'bbox' (COCO AP) needs a COCO")
    proc = run_tool(args + ["evaluation.metric=mAPP"])
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: evaluation.metric: unsupported ['mAPP']; expected among ['mAP', 'bbox']"
    )
