"""The example config, trained whole as a user runs it, reaches mAP@0.5 >= 0.9 in each mode.

These are the full runs of ``tools/train.py configs/tiny_det/tiny_det_synthetic.py --seed 0``
(12 epochs of 256 images), one per precision / accumulation / compilation mode, on
whatever device the machine has. float16 runs only on CUDA here: the CPU can run it, but
its float16 convolutions are emulated (the full run took 12 minutes on 2 cores).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List

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


def _final_map(work_dir: Path, stdout: str) -> float:
    found = re.search(r"mAP@0\.5 before training: [0-9.]+, after: ([0-9.]+)", stdout)
    assert found, f"no final mAP line in:\n{stdout[-2000:]}"
    # The same figure is in the JSON log, to the full precision.
    records = [
        json.loads(line)
        for log in work_dir.glob("*.log.json")
        for line in log.read_text().splitlines()
    ]
    vals = [r["mAP"] for r in records if r.get("mode") == "val"]
    assert vals and abs(vals[-1] - float(found.group(1))) < 1e-4
    return vals[-1]


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_example_trains_to_target_map(mode: str, tmp_path: Path) -> None:
    if mode == "fp16_config" and not torch.cuda.is_available():
        pytest.skip("float16 convolutions are emulated on the CPU (minutes per epoch)")
    args: List[str] = ["tools/train.py", CONFIG, "--seed", "0", "--work-dir", str(tmp_path)]
    proc = run_tool(args + MODES[mode], timeout=900)
    mean_ap = _final_map(tmp_path, proc.stdout)
    assert mean_ap >= TARGET, f"{mode}: mAP@0.5 {mean_ap:.4f} < {TARGET}"
    if mode.startswith("accumulate"):
        assert "gradients accumulated over 2 batches per step" in proc.stdout
