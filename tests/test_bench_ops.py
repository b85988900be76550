"""The ``ops`` benchmark section: its timing helper, its rows, and its quick run."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Dict, List

import pytest

pytest.importorskip("torchvision")

ROOT = Path(__file__).resolve().parents[1]
OPS = (
    "RoIPool",
    "RoIAlign max",
    "DeformRoIPool",
    "DeformRoIPool fwd+bwd",
    "batched_nms",
    "soft_nms",
    "box_iou_rotated",
    "nms_rotated",
)


def _section() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "mmpar_bench_ops_test", ROOT / "tools" / "bench" / "ops.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(out: str) -> Dict[str, List[List[str]]]:
    """The table's rows by op (an op may have several cases)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| op | case |"))
    rows: Dict[str, List[List[str]]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.setdefault(cells[0], []).append(cells[1:])
    return rows


def test_compare_warms_up_alternates_and_takes_the_median_ratio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: List[str] = []
    clock = iter(range(1000))
    section = _section()
    # Each call "takes" one tick of a fake clock.
    monkeypatch.setattr(section, "time", SimpleNamespace(perf_counter=lambda: float(next(clock))))
    ours = lambda: calls.append("ours")  # noqa: E731
    ref = lambda: calls.append("ref")  # noqa: E731
    ours_s, ref_s, ratio = section.compare(ours, ref, 4)
    assert calls[:2] == ["ours", "ref"]  # the warm-up
    assert calls[2:] == ["ref", "ours", "ours", "ref", "ref", "ours", "ours", "ref"]
    assert (ours_s, ref_s, ratio) == (1.0, 1.0, 1.0)


def test_rows_from_an_ops_nms_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where tools/bench/ops_nms.py exists, its rows(quick) replace the section's own."""
    section = _section()
    (tmp_path / "ops_nms.py").write_text(
        "def rows(quick):\n"
        "    return [('soft_nms', 'case', 'torchvision nms', 0.002, 0.001, 2.0, '<= 3x'),\n"
        "            '| batched_nms | pre-formatted |']\n"
    )
    monkeypatch.setattr(section, "BENCH_DIR", tmp_path)
    rows = section.nms_rows(quick=True)
    assert section._format(rows[0]) == (
        "| soft_nms | case | torchvision nms | 2.0 | 1.0 | 2.00x | <= 3x |"
    )
    assert section._format(rows[1]) == "| batched_nms | pre-formatted |"


def test_quick_run_prints_every_row() -> None:
    out = _section().run(quick=True)
    assert out.startswith("## Ops: mmcv.ops stand-ins against a kernel (issue 30)")
    assert "command: `python tools/benchmark.py ops --quick`" in out
    rows = _rows(out)
    assert set(rows) == set(OPS)
    assert len(rows["RoIAlign max"]) == len(rows["DeformRoIPool"]) == 2  # sampling 2 and 0
    for cases in rows.values():
        for cells in cases:
            for cell in cells[2:5]:  # ours, reference, ratio
                value = float(cell.rstrip("x").replace(",", ""))
                assert math.isfinite(value) and value > 0, cells
