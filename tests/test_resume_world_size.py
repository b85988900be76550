"""Resuming a checkpoint with another number of processes: the next epoch deals every
sample over the new ranks, or the run refuses in one line saying what differs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest
import torch

from mmpar.runner.resume import ResumeMismatch, resume_world_size
from tests.test_tools import BITWISE, CONFIG, GLOO, TINY, run_tool, torchrun_launcher

# 24 images in batches of 4 per process (the group samplers pad each orientation group).
OPTIONS = TINY + ["data.samples_per_gpu=4", "data.workers_per_gpu=0"] + GLOO


def _train(work_dir: Path, nproc: int, *extra: str, options: List[str] = OPTIONS, check=True):
    launch = [*torchrun_launcher(nproc), "tools/train.py"] if nproc > 1 else ["tools/train.py"]
    args = [
        *launch,
        CONFIG,
        "--work-dir",
        str(work_dir),
        "--seed",
        "5",
        "--no-validate",
        *(["--launcher", "pytorch"] if nproc > 1 else []),
        *BITWISE,
        *extra,
        "--cfg-options",
        *options,
    ]
    return run_tool(args, check=check)


def _records(work_dir: Path, mode: str) -> List[dict]:
    records = []
    for log in sorted(work_dir.glob("*.log.json")):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if record.get("mode") == mode:
                records.append(record)
    return records


def test_the_rule_continues_from_the_epoch_or_refuses_an_open_window() -> None:
    meta = dict(epoch=1, iter=3, world_size=2)
    assert resume_world_size(meta, 2, 3, accumulated=False) is None
    assert resume_world_size(dict(epoch=1, iter=3), 1, 6, accumulated=False) is None
    new_iter, message = resume_world_size(meta, 1, 6, accumulated=False)
    assert new_iter == 6
    assert "2 process(es) with 1" in message and "iter 3 -> 6" in message
    with pytest.raises(ResumeMismatch, match="written by 2 process.*this run has 1"):
        resume_world_size(meta, 1, 6, accumulated=True)


@pytest.mark.slow
def test_a_two_process_checkpoint_resumes_with_one_process(tmp_path: Path) -> None:
    work_dir = tmp_path / "run"
    _train(work_dir, 2, options=OPTIONS + ["runner.max_epochs=1"])
    first = torch.load(work_dir / "latest.pth", weights_only=True)
    two_ranks = first["meta"]["iter"]
    assert first["meta"]["world_size"] == 2 and first["meta"]["epoch"] == 1
    proc = _train(work_dir, 1, "--auto-resume")
    out = proc.stdout + proc.stderr
    one_rank = _records(work_dir, "meta")[-1]["iters_per_epoch"]
    assert one_rank >= 2 * two_ranks - 1  # one process takes about twice the steps
    assert "resumed a checkpoint of 2 process(es) with 1: epoch 2" in out
    assert f"iter {two_ranks} -> {one_rank}" in out
    last = torch.load(work_dir / "latest.pth", weights_only=True)
    assert last["meta"]["epoch"] == 2 and last["meta"]["world_size"] == 1
    # Epoch 2 ran one process's whole epoch, counted on from epoch 1's end.
    assert last["meta"]["iter"] == 2 * one_rank
    second = [r["iter"] for r in _records(work_dir, "train") if r["epoch"] == 2]
    assert second == list(range(one_rank + 1, 2 * one_rank + 1))


@pytest.mark.slow
def test_an_open_accumulation_window_refuses_another_world_size_in_one_line(
    tmp_path: Path,
) -> None:
    work_dir = tmp_path / "run"
    # Windows of 3 over the whole run: at the end of epoch 1 one is open.
    window = ["optimizer_config.cumulative_iters=3"]
    _train(work_dir, 2, options=OPTIONS + window)
    epoch_1 = work_dir / "epoch_1.pth"
    assert "accumulated_grads" in torch.load(epoch_1, weights_only=True)
    proc = _train(
        tmp_path / "resumed",
        1,
        "--resume-from",
        str(epoch_1),
        options=OPTIONS + window,
        check=False,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: resume_from: the checkpoint of epoch 1 was written by 2")
    assert "this run has 1" in lines[-1] and "Traceback" not in proc.stderr
