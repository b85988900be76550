"""The example config, trained whole as a user runs it, reaches mAP@0.5 >= 0.9 in each mode,
and the float32 run's mAP curve (epochs 0, 4, 8, 12) ends at its best.

These are the full runs of ``tools/train.py configs/tiny_det/tiny_det_synthetic.py --seed 0``
(12 epochs of 256 images), one per precision / accumulation / compilation mode, on
whatever device the machine has. float16 runs only on CUDA here: the CPU can run it, but
its float16 convolutions are emulated (the full run took 6 times the CPU time of float32's;
docs/tools.md, "Measured on the example").

The runs are single-threaded processes (``OMP_NUM_THREADS=1``, no loader workers), so
they run side by side, as many at once as the machine has cores: on 2 cores the five
CPU modes take about the time of three.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from tests.test_tools import CONFIG, run_tool

TARGET = 0.9
MODES = {
    "float32": [],
    "amp": ["--amp"],
    "accumulate": ["--cfg-options", "optimizer_config.cumulative_iters=2"],
    "accumulate_amp": ["--amp", "--cfg-options", "optimizer_config.cumulative_iters=2"],
    "compile": ["--compile"],
    "fp16_config": ["--cfg-options", "+fp16={'loss_scale': 512.0}"],
}


def _val_maps(work_dir: Path) -> List[float]:
    """mAP@0.5 of each evaluation of the run, in order, from its JSON log."""
    records = [
        json.loads(line)
        for log in work_dir.glob("*.log.json")
        for line in log.read_text().splitlines()
    ]
    return [r["mAP"] for r in records if r.get("mode") == "val"]


def _final_map(work_dir: Path, stdout: str) -> float:
    found = re.search(r"mAP@0\.5 before training: [0-9.]+, after: ([0-9.]+)", stdout)
    assert found, f"no final mAP line in:\n{stdout[-2000:]}"
    # The same figure is in the JSON log, to the full precision.
    vals = _val_maps(work_dir)
    assert vals and abs(vals[-1] - float(found.group(1))) < 1e-4
    return vals[-1]


def _runnable(mode: str) -> bool:
    return mode != "fp16_config" or torch.cuda.is_available()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, tuple]:
    """Every runnable mode's ``(work_dir, completed process)``, run side by side."""

    def one(mode: str) -> tuple:
        work_dir = tmp_path_factory.mktemp(mode)
        args: List[str] = ["tools/train.py", CONFIG, "--seed", "0", "--work-dir", str(work_dir)]
        return work_dir, run_tool(args + MODES[mode], timeout=900)

    modes = [mode for mode in MODES if _runnable(mode)]
    with ThreadPoolExecutor(max_workers=max(1, min(len(modes), os.cpu_count() or 1))) as pool:
        return dict(zip(modes, pool.map(one, modes)))


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_example_trains_to_target_map(mode: str, runs: Dict[str, tuple]) -> None:
    if not _runnable(mode):
        pytest.skip("float16 convolutions are emulated on the CPU (6x float32's CPU time)")
    work_dir, proc = runs[mode]
    assert isinstance(proc, subprocess.CompletedProcess)
    mean_ap = _final_map(work_dir, proc.stdout)
    assert mean_ap >= TARGET, f"{mode}: mAP@0.5 {mean_ap:.4f} < {TARGET}"
    if mode == "float32":  # the quick start's run: its curve ends at its best
        curve = _val_maps(work_dir)
        assert len(curve) == 4 and curve[-1] == max(curve), f"mAP@0.5 by evaluation: {curve}"
    if mode.startswith("accumulate"):
        assert "gradients accumulated over 2 batches per step" in proc.stdout
