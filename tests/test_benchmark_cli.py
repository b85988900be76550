"""tools/benchmark.py as a user runs it: sections found, run in quick mode, Markdown out."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    """``tools/benchmark.py`` of ``root`` with ``args``; mmpar always comes from ROOT."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(root / "tools" / "benchmark.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env=dict(os.environ, PYTHONPATH=path),
    )


def _why_not_a_git_checkout() -> Optional[str]:
    """Why ``--baseline`` cannot work on ROOT (no git, or not a checkout), or None."""
    if shutil.which("git") is None:
        return "git is not available: --baseline needs it"
    proc = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True
    )
    if proc.returncode != 0 or Path(proc.stdout.strip()).resolve() != ROOT:
        return f"{ROOT} is not a git checkout (a source tarball?): --baseline needs one"
    return None


NOT_A_GIT_CHECKOUT = _why_not_a_git_checkout()
needs_git_checkout = pytest.mark.skipif(
    NOT_A_GIT_CHECKOUT is not None, reason=NOT_A_GIT_CHECKOUT or ""
)


def _table(out: str, header_start: str) -> List[Dict[str, str]]:
    """The rows of the Markdown table whose header line starts with ``header_start``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def _number(cell: str) -> float:
    value = float(cell.rstrip("x").replace(",", ""))
    assert math.isfinite(value) and value > 0, cell
    return value


@pytest.mark.slow
def test_quick_collate_and_loader_sections_print_their_tables() -> None:
    proc = _run("--quick", "collate", "loader")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "## Collate: padded stacking" in out and "## Detection loader throughput" in out
    for row in ("| float32 |", "| uint8 |", "| random batching |", "| size-aware grouping |"):
        assert row in out
    assert out.count("target >=") == 2 and "images/s" in out


def test_quick_pad_once_section_compares_the_two_pipelines_on_one_batch_shape() -> None:
    proc = _run("--quick", "pad_once")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "## Pad once: padding in the workers against padding in collate" in out
    assert "| float32 |" in out and "| uint8 |" in out and "2 workers" in out
    # Both pipelines batch the same (scaled) images to one shape, a multiple of 32.
    shape = out.split("Batch shape (both pipelines): (")[1].split(")")[0]
    n, c, h, w = (int(s) for s in shape.split(", "))
    assert (n, c) == (16, 3) and h % 32 == 0 and w % 32 == 0 and h >= 150 and w >= 225


def test_unknown_section_is_a_usage_error_listing_the_sections() -> None:
    proc = _run("nonsense")
    assert proc.returncode == 2
    assert "unknown section(s) ['nonsense']" in proc.stderr and "'collate'" in proc.stderr


@pytest.mark.slow
@needs_git_checkout
def test_quick_hotpath_section_compares_this_tree_with_a_baseline_revision() -> None:
    proc = _run("--quick", "hotpath", "--baseline", "HEAD")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "## Hot path: collate and scatter per batch" in out and "| baseline HEAD (us) |" in out
    for row in ("| collate, detection fields |", "| scatter to 2 targets |"):
        assert row in out
    assert "Target: this tree at most 5% slower than `HEAD`" in out


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="on a GPU the section runs for minutes; run it by hand"
)
def test_gpu_section_skips_without_cuda() -> None:
    proc = _run("gpu")
    assert "## GPU" in proc.stdout and "Skipped: CUDA is not available" in proc.stdout


TRANSPORT = "## Transport: a collated batch from a DataLoader worker to the main process"
CROSSING_HEADER = "| batch | tree | tensors | storages |"
CROSSING_MS = re.compile(
    r"- Target: pickle \+ unpickle of one B=64 batch <= 5 ms: this tree ([0-9.]+) ms.*, "
    r"\*\*(met|not met)\*\*"
)


def _check_crossing_rows(rows: List[Dict[str, str]], trees: List[str]) -> None:
    """One row per batch size and tree, with a plausible count of tensors and positive times."""
    measured = [r for r in rows if r["tree"] in trees]
    assert [(r["batch"], r["tree"]) for r in measured] == [
        (b, t) for b in ("B=16", "B=64") for t in trees
    ]
    for row in measured:
        tensors, storages = _number(row["tensors"]), _number(row["storages"])
        assert storages <= tensors
        for key in ("payload (KiB)", "samples", "collate", "pickle", "unpickle", "total"):
            _number(row[key])


def test_quick_transport_section_measures_the_loader_and_the_crossing() -> None:
    proc = _run("--quick", "transport")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert TRANSPORT in out and "pin_memory=False" in out
    loader = _table(out, "| batch | this tree (batches/s) |")
    assert [r["batch"] for r in loader] == ["B=16", "B=64"]
    for row in loader:
        _number(row["this tree (batches/s)"])
    _check_crossing_rows(_table(out, CROSSING_HEADER), ["this tree"])
    # Without a baseline the throughput target is not judged; the absolute one is.
    assert "B=64 >= 5x the baseline: not judged without `--baseline REV`" in out
    ms, verdict = CROSSING_MS.search(out).groups()
    assert verdict == ("met" if float(ms) <= 5 else "not met")


@pytest.mark.slow
@needs_git_checkout
def test_quick_transport_section_compares_this_tree_with_a_baseline_revision() -> None:
    proc = _run("--quick", "transport", "--baseline", "HEAD")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert TRANSPORT in out and "this tree and `HEAD` taking turns" in out
    loader = _table(out, "| batch | this tree (batches/s) | baseline HEAD (batches/s) |")
    assert [r["batch"] for r in loader] == ["B=16", "B=64"]
    # --quick times one epoch per tree: the median of the paired ratios is their ratio.
    for row in loader:
        this, base = (
            _number(row["this tree (batches/s)"]),
            _number(row["baseline HEAD (batches/s)"]),
        )
        ratio = _number(row["this tree / baseline"])
        assert ratio == pytest.approx(this / base, rel=0.02, abs=0.01)
    rows = _table(out, CROSSING_HEADER)
    _check_crossing_rows(rows, ["this tree", "baseline HEAD"])
    assert [r["batch"] for r in rows if r["tree"] == "this tree / baseline"] == ["B=16", "B=64"]
    speedup = re.search(r"B=64 >= 5x `HEAD`: ([0-9.]+)x, \*\*(met|not met)\*\*", out)
    assert speedup.group(2) == ("met" if float(speedup.group(1)) >= 5 else "not met")
    assert loader[1]["this tree / baseline"] == f"{speedup.group(1)}x"
    ms, verdict = CROSSING_MS.search(out).groups()
    assert verdict == ("met" if float(ms) <= 5 else "not met")


def test_baseline_outside_a_git_checkout_is_one_error_line(tmp_path: Path) -> None:
    # What a source tarball holds of the tool, without .git; mmpar comes from ROOT.
    shutil.copytree(
        ROOT / "tools", tmp_path / "tools", ignore=shutil.ignore_patterns("__pycache__")
    )
    proc = _run("hotpath", "--baseline", "HEAD", root=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stdout == ""  # nothing measured
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    if shutil.which("git") is None:
        assert lines[0] == "error: --baseline needs git, and git is not on PATH"
    else:
        assert lines[0].startswith(
            f"error: --baseline needs a git checkout, and {tmp_path.resolve()} is not one"
        )
        assert lines[0].endswith("run it from a clone of the repository, not a source tarball")


@needs_git_checkout
def test_baseline_that_names_no_revision_is_one_error_line() -> None:
    proc = _run("hotpath", "--baseline", "no-such-revision-17")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"error: --baseline no-such-revision-17: no such revision in {ROOT}"
    ]
