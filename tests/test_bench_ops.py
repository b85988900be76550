"""The ``ops`` benchmark section: its timing helper, its rows, and its quick run."""

from __future__ import annotations

import importlib.util
import math
import re
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
    "prroi_pool fwd+bwd",
    "border_align fwd+bwd",
    "batched_nms",
    "soft_nms",
    "box_iou_rotated",
    "nms_rotated",
    "multi_scale_deformable_attn",
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


def test_nms_rows_cover_soft_nms_cases_and_batched_nms_with_targets() -> None:
    """ops_nms.py is the one source of the nms rows; the section times them with compare."""
    section = _section()
    calls: List[int] = []

    def fake_compare(ours, reference, rounds):  # noqa: ANN001, ANN202
        calls.append(rounds)
        return 0.002, 0.001, 2.0

    rows = section.ops_nms.rows(True, fake_compare)
    *soft, ties = [r for r in rows if r[0] == "soft_nms"]
    assert [r[1] for r in soft] == [
        f"1k boxes, {kind}, {method}, iou_threshold 0.3"
        for method, kind in (
            ("linear", "sparse"),
            ("linear", "crowded"),
            ("linear", "clustered"),
            ("gaussian", "sparse"),
            ("gaussian", "clustered"),
        )
    ]
    assert ties[1] == "1k boxes, sparse, linear, iou_threshold 0.3, one score for all"
    assert ties[2] == "torchvision nms" and ties[6] == ""
    assert all(r[2] == "torchvision nms" and r[6] == "<= 3x" for r in soft)
    batched, per_image = [r for r in rows if r[0] == "batched_nms"]
    assert batched[2] == "torchvision batched_nms" and batched[6] == "<= 1.2x"
    assert per_image[1] == (
        "100 boxes, crowded, 80 classes, soft_nms linear (mmdet's test-time call)"
    )
    assert per_image[2] == "torchvision batched_nms" and per_image[6] == ""
    assert len(calls) == len(rows) == 8
    assert section._format(rows[0]) == (
        "| soft_nms | 1k boxes, sparse, linear, iou_threshold 0.3 | torchvision nms "
        "| 2.0 | 1.0 | 2.00x | <= 3x |"
    )


def test_attention_rows_time_the_same_attention_and_count_what_each_keeps() -> None:
    import torch

    from mmpar.compat.ops.multi_scale_deform_attn import multi_scale_deformable_attn_pytorch

    section = _section()
    attention = section.ops_attention
    gen = torch.Generator().manual_seed(0)
    shapes = [(4, 6), (2, 3)]
    value = torch.randn(2, 30, 2, 4, generator=gen)
    locs = torch.rand(2, 5, 2, 2, 3, 2, generator=gen)
    weights = torch.rand(2, 5, 2, 2, 3, generator=gen)
    torch.testing.assert_close(
        attention.reference(value, shapes, locs, weights),
        multi_scale_deformable_attn_pytorch(value, torch.tensor(shapes), locs, weights),
    )
    rounds: List[int] = []
    rows = attention.rows(True, lambda ours, ref, n: rounds.append(n) or (0.002, 0.001, 2.0))
    assert [r[1].split(",")[0] for r in rows] == ["forward", "forward + backward"]
    kept = re.search(r"kept for the backward: ([\d.]+) MiB \(reference ([\d.]+) MiB\)", rows[1][1])
    assert kept and float(kept[1]) < float(kept[2])
    assert rounds == [2, 2] and [r[6] for r in rows] == ["<= 1.2x", "<= 1.5x"]


def test_bench_helpers_are_not_sections() -> None:
    spec = importlib.util.spec_from_file_location(
        "mmpar_benchmark_test", ROOT / "tools" / "benchmark.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "ops" in module.sections() and "ops_nms" not in module.sections()


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
