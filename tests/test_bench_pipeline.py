"""The ``pipeline`` benchmark section: its helpers, and its quick run with and without mmdet."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, List

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
HAS_MMDET = all(importlib.util.find_spec(n) is not None for n in ("mmdet", "mmcv"))
VARIANTS = ("mmpar float", "mmpar uint8")
STEPS = (
    "LoadImageFromFile",
    "LoadAnnotations",
    "Resize",
    "RandomFlip",
    "Normalize",
    "Pad",
    "DefaultFormatBundle",
    "Collect",
    "collate (per image)",
    "total (sum of the rows)",
)


def _section() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "mmpar_bench_pipeline_test", ROOT / "tools" / "bench" / "pipeline.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table(out: str, header_start: str) -> Dict[str, List[str]]:
    """The Markdown table whose header starts with ``header_start``: first cell -> the others."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def _positive(cell: str) -> float:
    value = float(cell.rstrip("x").replace(",", ""))
    assert math.isfinite(value) and value > 0, cell
    return value


def _check_tables(out: str, variants: tuple) -> None:
    assert "## Worker pipeline: per-image cost" in out
    summary = _table(out, "| variant |")
    assert list(summary) == list(variants)
    for cells in summary.values():
        _positive(cells[0])  # pipeline ms/image
        _positive(cells[2])  # pipeline+collate ms/image
    steps = _table(out, "| step |")
    assert list(steps) == list(STEPS)
    assert all(len(cells) == len(variants) for cells in steps.values())
    for cell in steps["total (sum of the rows)"] + steps["LoadImageFromFile"]:
        _positive(cell)
    loaders = _table(out, "| loader |")
    assert list(loaders) == list(variants)
    for cells in loaders.values():
        _positive(cells[0])


def test_median_ratio_is_the_median_of_the_paired_ratios() -> None:
    section = _section()
    # Paired ratios 2, 3 and 4: the median is 3, not 15 / 5 (the ratio of the medians).
    assert section.median_ratio([2.0, 9.0, 40.0], [1.0, 3.0, 10.0]) == 3.0
    assert section.median_ratio([1.0, 3.0], [2.0, 2.0]) == 1.0
    with pytest.raises(ValueError, match="equal, non-empty"):
        section.median_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="equal, non-empty"):
        section.median_ratio([], [])


def test_rotated_starts_each_round_at_the_next_variant() -> None:
    rotated = _section().rotated
    names = ["a", "b", "c"]
    assert [rotated(names, r) for r in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]


def test_generated_files_are_jpegs_of_both_orientations_with_boxes_inside(tmp_path: Path) -> None:
    from PIL import Image

    section = _section()
    files = section.data.write_images(str(tmp_path), 4)
    assert [f.name for f in files] == sorted(p.name for p in tmp_path.iterdir())
    for i, f in enumerate(files):
        with Image.open(tmp_path / f.name) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            assert img.size == (f.width, f.height) == ((640, 480), (427, 640))[i % 2]
        assert 1 <= len(f.bboxes) <= 8 and f.bboxes.dtype == np.float32
        assert f.labels.dtype == np.int64 and f.labels.shape == (len(f.bboxes),)
        assert (f.bboxes[:, :2] >= 0).all() and (f.bboxes[:, 2:] > f.bboxes[:, :2]).all()
        assert (f.bboxes[:, 2] <= f.width).all() and (f.bboxes[:, 3] <= f.height).all()
    (tmp_path / "again").mkdir()
    again = section.data.write_images(str(tmp_path / "again"), 1, seed=0)[0]
    np.testing.assert_array_equal(again.bboxes, files[0].bboxes)


def test_input_dicts_fix_the_flip_for_both_sides(tmp_path: Path) -> None:
    data = _section().data
    f = data.ImageFile("x.jpg", 640, 480, np.zeros((1, 4), np.float32), np.zeros(1, np.int64))
    ours, theirs = data.mmpar_input(f, str(tmp_path), True), data.mmdet_input(f, "d", False)
    assert (ours["flip"], ours["flip_direction"]) == (True, "horizontal")
    assert (theirs["flip"], theirs["flip_direction"]) == (False, None)
    assert theirs["bbox_fields"] == [] and theirs["img_prefix"] == "d"


@pytest.mark.slow
def test_quick_pipeline_section_prints_its_three_tables() -> None:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "benchmark.py"), "pipeline", "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    if not HAS_MMDET:
        _check_tables(out, VARIANTS)
        assert "mmdet not installed: no comparison" in out
        return
    _check_tables(out, ("mmdet",) + VARIANTS)
    summary = _table(out, "| variant |")
    assert summary["mmdet"][1] == summary["mmdet"][3] == "1.00x"
    for name in VARIANTS:
        _positive(summary[name][1])
        _positive(summary[name][3])
    assert out.count("- target: ") == 3
    targets = [line for line in out.splitlines() if line.startswith("- target: ")]
    assert all(line.endswith(("x, met", "x, not met")) for line in targets), targets


@pytest.mark.slow
def test_without_mmdet_the_section_measures_mmpar_only(monkeypatch: pytest.MonkeyPatch) -> None:
    section = _section()
    monkeypatch.setattr(section.data, "import_mmdet", lambda: "mmdet not installed")
    out = section.run(quick=True)
    _check_tables(out, VARIANTS)
    assert "mmdet not installed: no comparison" in out and "target:" not in out
    assert "| mmdet |" not in out
