"""tools/train.py and tools/test.py say what they do: resuming, overwriting, where results go."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.test_tools import CONFIG, TINY, run_tool, train

ONE_EPOCH = TINY + ["runner.max_epochs=1"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A work dir holding a finished one-epoch run."""
    work_dir = tmp_path_factory.mktemp("finished")
    train(work_dir, "--no-validate", options=ONE_EPOCH)
    return work_dir


def _copy_run(source: Path, target: Path) -> None:
    shutil.copy(source / "epoch_1.pth", target / "epoch_1.pth")
    (target / "latest.pth").symlink_to("epoch_1.pth")


def test_auto_resume_of_a_complete_run_says_so_and_trains_nothing(
    finished: Path, tmp_path: Path
) -> None:
    _copy_run(finished, tmp_path)
    before = (tmp_path / "epoch_1.pth").stat().st_mtime_ns
    proc = train(tmp_path, "--auto-resume", "--no-validate", options=ONE_EPOCH)
    assert "is at epoch 1 of runner.max_epochs=1: the run is already complete" in proc.stdout
    assert "start training" not in proc.stdout and "Epoch [" not in proc.stdout
    assert (tmp_path / "epoch_1.pth").stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.glob("*.pth")) == ["epoch_1.pth", "latest.pth"]


def test_auto_resume_says_what_it_resumed_from(finished: Path, tmp_path: Path) -> None:
    _copy_run(finished, tmp_path)
    options = TINY + ["runner.max_epochs=2"]
    proc = train(tmp_path, "--auto-resume", "--no-validate", options=options)
    assert (
        f"auto-resume: resuming from {tmp_path / 'latest.pth'} (epoch 1 of 2 done)" in proc.stdout
    )
    assert "start training: epochs 2..2" in proc.stdout
    assert torch.load(tmp_path / "latest.pth", weights_only=True)["meta"]["epoch"] == 2


def test_auto_resume_without_a_checkpoint_starts_from_scratch_and_says_so(tmp_path: Path) -> None:
    proc = train(tmp_path, "--auto-resume", "--no-validate", options=ONE_EPOCH)
    assert f"auto-resume: no checkpoint in {tmp_path}; starting from scratch" in proc.stdout
    assert "start training: epochs 1..1" in proc.stdout
    assert "already holds checkpoints" not in proc.stdout


def test_a_fresh_run_over_checkpoints_warns_that_it_overwrites_them(
    finished: Path, tmp_path: Path
) -> None:
    _copy_run(finished, tmp_path)
    proc = train(tmp_path, "--no-validate", options=ONE_EPOCH)
    assert (
        f"WARNING - work dir {tmp_path} already holds checkpoints (epoch_1.pth, latest.pth): "
        "this fresh run overwrites them" in proc.stdout
    )
    fresh = train(tmp_path / "new", "--no-validate", options=ONE_EPOCH)
    assert "already holds checkpoints" not in fresh.stdout


def test_test_tool_writes_metrics_next_to_the_checkpoint(finished: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _copy_run(finished, run_dir)
    proc = run_tool(
        ["tools/test.py", CONFIG, str(run_dir / "latest.pth"), "--eval", "--cfg-options", *TINY]
    )
    (metrics,) = run_dir.glob("eval_*.json")
    assert f"metrics written to {metrics}" in proc.stdout
    assert json.loads(metrics.read_text())["num_images"] == 8
    other = tmp_path / "elsewhere"
    run_tool(
        [
            "tools/test.py",
            CONFIG,
            str(run_dir / "latest.pth"),
            "--eval",
            "--work-dir",
            str(other),
            "--cfg-options",
            *TINY,
        ]
    )
    assert len(list(other.glob("eval_*.json"))) == 1 and len(list(run_dir.glob("eval_*"))) == 1
