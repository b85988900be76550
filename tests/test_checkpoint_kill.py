"""A training run killed with SIGKILL at any moment leaves a loadable latest checkpoint,
and ``--auto-resume`` from it ends with the parameters of an uninterrupted run.

Runs ``tools/train.py`` on the tiny config as subprocesses; one kill lands while
a checkpoint is being written (right after its temporary file appears), the
others at fixed delays after training started writing checkpoints.
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

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "tiny_det" / "tiny_det_synthetic.py")
EPOCHS = 8
OPTIONS = [f"runner.max_epochs={EPOCHS}", "data.train.num_samples=16", "data.samples_per_gpu=4",
           "log_config.interval=1", "checkpoint_config.interval=1"]
RUN_TIMEOUT = 120


def _command(work_dir: Path, *extra: str) -> List[str]:
    return [sys.executable, "tools/train.py", CONFIG, "--work-dir", str(work_dir), "--seed", "3", "--no-validate",
            *extra, "--cfg-options", *OPTIONS]


def _env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def train(work_dir: Path, *extra: str) -> None:
    proc = subprocess.run(_command(work_dir, *extra), cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _temp_files(work_dir: Path, pattern: str = ".*.tmp") -> List[Path]:
    return list(work_dir.glob(pattern)) if work_dir.is_dir() else []


def train_and_kill(work_dir: Path, save_epoch: Optional[int], delay: float) -> Optional[str]:
    """Start a run and SIGKILL it: as soon as the temporary file of checkpoint
    ``epoch_<save_epoch>.pth`` appears, or (``save_epoch=None``) ``delay`` s after
    the first checkpoint exists.

    Returns:
        Where the kill landed (``"during save"``, ``"between saves"``), or None when
        the run finished first.
    """
    proc = subprocess.Popen(_command(work_dir), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + RUN_TIMEOUT
    first_ckpt: Optional[float] = None
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if save_epoch is not None and _temp_files(work_dir, f".epoch_{save_epoch}.pth.*.tmp"):
                proc.send_signal(signal.SIGKILL)
                return "during save"
            if first_ckpt is None and (work_dir / "epoch_1.pth").exists():
                first_ckpt = time.monotonic()
            if save_epoch is None and first_ckpt is not None and time.monotonic() - first_ckpt >= delay:
                proc.send_signal(signal.SIGKILL)
                return "during save" if _temp_files(work_dir) else "between saves"
            time.sleep(0.0005)
        assert proc.poll() is not None, "training did not finish in time"
        return None
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
def test_sigkill_at_any_moment_leaves_a_loadable_checkpoint_and_resume_matches(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    train(reference)
    expected = final_weights(reference)
    landed = []
    for trial, (save_epoch, delay) in enumerate([(2, 0.0), (5, 0.0), (None, 0.1), (None, 0.3)]):
        work_dir = tmp_path / f"killed{trial}"
        landed.append(train_and_kill(work_dir, save_epoch, delay))
        latest = find_latest_checkpoint(work_dir)
        for path in sorted(work_dir.glob("epoch_*.pth")) + ([latest] if latest else []):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)  # never truncated
            assert set(checkpoint) >= {"meta", "state_dict", "optimizer"}, path
        print(f"trial {trial}: killed {landed[-1]}, latest checkpoint {latest and latest.resolve().name}, "
              f"temporary files left {[p.name for p in _temp_files(work_dir)]}")
        train(work_dir, "--auto-resume")
        got = final_weights(work_dir)
        assert got.keys() == expected.keys()
        for key in expected:
            assert torch.equal(got[key], expected[key]), f"trial {trial} ({landed[-1]}): {key} differs"
    assert landed.count("during save") >= 2 and "between saves" in landed, landed
