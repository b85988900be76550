"""tools/benchmark.py as a user runs it: sections found, run in quick mode, Markdown out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

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
