"""The ``mmdet_train`` benchmark section: mmdet's Faster R-CNN R-50-FPN trained on mmpar.

Its batch is checked against what mmdet's pipeline and collate give; the section itself
runs as a user runs it, ``tools/benchmark.py --quick mmdet_train`` (on the CPU here: it
trains a real step per precision and prints its table).
"""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SECTION = ROOT / "tools" / "bench" / "mmdet_train.py"
HAS_STACK = all(importlib.util.find_spec(n) is not None for n in ("mmcv", "mmdet", "torchvision"))


def _section() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mmpar_bench_mmdet_train_test", SECTION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_batch_is_what_mmdets_pipeline_and_collate_give() -> None:
    sizes = ((800, 1333), (800, 1199))
    batch = _section().make_batch(sizes, seed=3)
    assert sorted(batch) == ["gt_bboxes", "gt_labels", "img", "img_metas"]
    (img,) = batch["img"].data  # one GPU's share, padded to a multiple of 32
    assert img.shape == (2, 3, 800, 1344) and img.dtype == torch.float32
    assert torch.all(img[1, :, :, 1199:] == 0)
    assert batch["img_metas"].cpu_only
    (metas,), (boxes,), (labels,) = (batch[k].data for k in ("img_metas", "gt_bboxes", "gt_labels"))
    for (h, w), meta, b, lab in zip(sizes, metas, boxes, labels):
        assert meta["img_shape"] == (h, w, 3) and meta["pad_shape"] == (800, -(-w // 32) * 32, 3)
        assert b.dtype == torch.float32 and b.shape[1] == 4 and 1 <= len(b) <= 8
        assert torch.all(b[:, 2:] > b[:, :2]) and torch.all(b >= 0)
        assert torch.all(b[:, 2] <= w) and torch.all(b[:, 3] <= h)
        assert lab.dtype == torch.int64 and lab.shape == (len(b),)
        assert torch.all((lab >= 0) & (lab < 80))


def test_the_batch_is_the_same_for_a_seed() -> None:
    section = _section()
    a, b = (section.make_batch(((64, 96), (64, 80)), seed=7) for _ in range(2))
    assert torch.equal(a["img"].data[0], b["img"].data[0])
    assert all(torch.equal(x, y) for x, y in zip(a["gt_bboxes"].data[0], b["gt_bboxes"].data[0]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's skip line")
def test_without_cuda_the_full_section_says_it_is_skipped() -> None:
    out = _section().run(quick=False)
    assert "skipped: needs" in out and "|" not in out


@pytest.mark.slow
@pytest.mark.skipif(not HAS_STACK, reason="needs mmcv, mmdet and torchvision")
def test_quick_section_trains_faster_rcnn_in_each_precision() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "benchmark.py"), "--quick", "mmdet_train"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "mmcv.ops: mmpar" in out or "mmcv.ops: mmcv" in out, out
    names = ["float32", "float16 AMP", "bfloat16 AMP"]
    if not torch.cuda.is_available():
        names.remove("float16 AMP")  # float16 autocast is a GPU precision
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (\w+(?: AMP)?) \|(.*)\|$", out, re.M)}
    rows.pop("precision")  # the header
    assert sorted(rows) == sorted(names), out
    for name in names:
        step_ms, steps_s, images_s, ratio, loss = (c.strip() for c in rows[name].split("|"))
        assert float(step_ms) > 0 and float(steps_s) > 0 and float(images_s) > 0
        # images/s has one decimal, steps/s two.
        assert float(images_s) == pytest.approx(2 * float(steps_s), rel=0.02, abs=0.06)
        assert ratio.endswith("x") and float(ratio[:-1]) > 0
        # Faster R-CNN's four losses on random boxes start near 2 and must be finite.
        assert math.isfinite(float(loss)) and 0 < float(loss) < 10, out
    assert rows["float32"].split("|")[3].strip() == "1.00x"
