"""A training run killed with SIGKILL at any moment leaves a loadable latest checkpoint,
and ``--auto-resume`` from it ends with the parameters of an uninterrupted run.

Runs ``tools/train.py`` on the tiny config as subprocesses. Three kills land at
chosen points, deterministically: halfway through writing checkpoint 2 and
checkpoint 5, and right after checkpoint 3 (the run kills itself there, through
``tests/scripts/train_killed_at_save.py``); a fourth lands wherever the run is
0.2 s after its first checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import torch

from mmpar.runner.checkpoint import find_latest_checkpoint
from tests.test_tools import train_args

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = 8
OPTIONS = [
    f"runner.max_epochs={EPOCHS}",
    "data.train.num_samples=16",
    "data.samples_per_gpu=4",
    "log_config.interval=1",
    "checkpoint_config.interval=1",
]
RUN_TIMEOUT = 120


def _command(work_dir: Path, *extra: str) -> List[str]:
    return [sys.executable, *train_args(work_dir, "--no-validate", *extra, options=OPTIONS)]


def _env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def train(work_dir: Path, *extra: str) -> None:
    proc = subprocess.run(
        _command(work_dir, *extra),
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _temp_files(work_dir: Path, pattern: str = ".*.tmp") -> List[Path]:
    return list(work_dir.glob(pattern)) if work_dir.is_dir() else []


def train_and_kill(work_dir: Path, mode: str, nth_save: int) -> None:
    """Run training and SIGKILL it inside (``mode="during"``) or right after
    (``"after"``) its ``nth_save``-th checkpoint save, deterministically: the run
    goes through ``tests/scripts/train_killed_at_save.py``, which kills its own
    process at that point."""
    script = ROOT / "tests" / "scripts" / "train_killed_at_save.py"
    cmd = [sys.executable, str(script), mode, str(nth_save), *_command(work_dir)[2:]]
    proc = subprocess.run(
        cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    assert proc.returncode == -signal.SIGKILL, (
        f"expected death by SIGKILL, got {proc.returncode}: {proc.stderr[-2000:]}"
    )


def train_and_kill_after(work_dir: Path, delay: float) -> None:
    """Run training and SIGKILL it ``delay`` seconds after its first checkpoint
    exists, wherever it then is (a save, a step, data loading)."""
    proc = subprocess.Popen(
        _command(work_dir),
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + RUN_TIMEOUT
    first_ckpt: Optional[float] = None
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if first_ckpt is None and (work_dir / "epoch_1.pth").exists():
                first_ckpt = time.monotonic()
            if first_ckpt is not None and time.monotonic() - first_ckpt >= delay:
                proc.send_signal(signal.SIGKILL)
                return
            time.sleep(0.005)
        assert proc.poll() is not None, "training did not finish in time"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def final_weights(work_dir: Path) -> Dict[str, torch.Tensor]:
    latest = find_latest_checkpoint(work_dir)
    assert latest is not None
    checkpoint = torch.load(latest, map_location="cpu", weights_only=True)
    assert checkpoint["meta"]["epoch"] == EPOCHS
    return checkpoint["state_dict"]


@pytest.mark.slow
def test_sigkill_at_any_moment_leaves_a_loadable_checkpoint_and_resume_matches(
    tmp_path: Path,
) -> None:
    reference = tmp_path / "reference"
    train(reference)
    expected = final_weights(reference)
    kills = [  # where the kill lands, how, and the latest checkpoint it must leave (None: any)
        ("inside save 2", lambda d: train_and_kill(d, "during", 2), "epoch_1.pth"),
        ("inside save 5", lambda d: train_and_kill(d, "during", 5), "epoch_4.pth"),
        # epoch_3.pth is whole, but latest.pth has not moved to it yet
        ("right after save 3", lambda d: train_and_kill(d, "after", 3), "epoch_2.pth"),
        ("0.2 s after the first save", lambda d: train_and_kill_after(d, 0.2), None),
    ]
    for trial, (where, kill, expected_latest) in enumerate(kills):
        work_dir = tmp_path / f"killed{trial}"
        kill(work_dir)
        latest = find_latest_checkpoint(work_dir)
        for path in sorted(work_dir.glob("epoch_*.pth")) + ([latest] if latest else []):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)  # never truncated
            assert set(checkpoint) >= {"meta", "state_dict", "optimizer"}, path
        if expected_latest is not None:
            assert latest is not None and latest.resolve().name == expected_latest, (where, latest)
        if where.startswith("inside"):
            assert _temp_files(work_dir), (
                "the kill should have left the half-written temporary file"
            )
        train(work_dir, "--auto-resume")
        assert not _temp_files(work_dir), "the resumed run should remove what a killed save left"
        got = final_weights(work_dir)
        assert got.keys() == expected.keys()
        for key in expected:
            assert torch.equal(got[key], expected[key]), f"trial {trial} ({where}): {key} differs"
