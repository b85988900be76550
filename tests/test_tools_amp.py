"""tools/train.py and tools/test.py with --amp, accumulation and --compile."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
import torch

from mmpar.models import build_model
from tests.test_tools import CONFIG, TINY, run_tool, train

# Small and quick: width 8 (bf16 and fp16 convolutions are slow on CPUs without native support).
SMALL = TINY + ["model.width=8"]
# 24 images in batches of 8: 4 iterations per epoch (aspect-ratio groups are padded to whole
# batches). With N=3 the windows of the 8-iteration run are [0-2], [3-5] and the remainder
# [6-7]: the checkpoint after epoch 1 (iter 4) falls inside a window.
ACCUMULATE = ["optimizer_config.cumulative_iters=3"]
# A dynamic scale that changes at every step, so that only a restored scaler resumes exactly.
FLOAT16 = ["amp.dtype='float16'", "amp.loss_scale.init_scale=256.0"]
FLOAT16 += ["amp.loss_scale.growth_interval=1"]


def _epochs(options: List[str], epochs: int) -> List[str]:
    return [o if o != "runner.max_epochs=2" else f"runner.max_epochs={epochs}" for o in options]


def _assert_resume_is_exact(tmp_path: Path, options: List[str]) -> dict:
    """Train 2 epochs; resume another run from its epoch-1 checkpoint: the same end, bit for bit."""
    train(tmp_path / "straight", "--amp", "--no-validate", options=options)
    first_path = tmp_path / "straight" / "epoch_1.pth"
    proc = train(
        tmp_path / "split",
        "--amp",
        "--no-validate",
        "--resume-from",
        str(first_path),
        options=options,
    )
    assert "resumed from" in proc.stdout
    straight = torch.load(tmp_path / "straight" / "epoch_2.pth", weights_only=True)
    resumed = torch.load(tmp_path / "split" / "epoch_2.pth", weights_only=True)
    assert resumed["meta"]["iter"] == straight["meta"]["iter"] == 8
    for key, value in straight["state_dict"].items():
        assert torch.equal(resumed["state_dict"][key], value), key
    first = torch.load(first_path, weights_only=True)
    return dict(straight=straight, resumed=resumed, first=first, stdout=proc.stdout)


@pytest.fixture(scope="module")
def bf16_accumulated(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp_path = tmp_path_factory.mktemp("bf16")
    result = _assert_resume_is_exact(tmp_path, SMALL + ACCUMULATE)
    result["dir"] = tmp_path / "straight"
    return result


def test_bf16_with_accumulation_resumes_exactly(bf16_accumulated: dict) -> None:
    stdout = bf16_accumulated["stdout"]
    assert "mixed precision: bfloat16 autocast" in stdout
    assert "gradients accumulated over 3 batches per step" in stdout
    assert "amp" not in bf16_accumulated["straight"]  # bf16 needs no loss scaler
    assert bf16_accumulated["straight"]["meta"]["config_dict"]["amp"] is True
    # Epoch 1 ended one batch into the window [3-5]: its gradient travelled in the checkpoint.
    grads = bf16_accumulated["first"]["accumulated_grads"]
    assert grads and all(v.dtype == torch.float32 for v in grads.values())
    assert set(grads) <= set(bf16_accumulated["first"]["state_dict"])
    assert "resumed inside an accumulation window: gradients of 1 batch(es)" in stdout
    assert "accumulated_grads" not in bf16_accumulated["straight"]  # the run ends on a step


def test_float16_resume_restores_the_loss_scaler(tmp_path: Path) -> None:
    result = _assert_resume_is_exact(tmp_path, SMALL + FLOAT16)
    scaler = result["straight"]["amp"]["scaler"]
    assert scaler == result["resumed"]["amp"]["scaler"] and scaler["growth_interval"] == 1
    assert "loss scaler restored: scale" in result["stdout"]
    assert "mixed precision: float16 autocast, dynamic loss scale" in result["stdout"]


def test_test_tool_autocasts_inference(bf16_accumulated: dict, tmp_path: Path) -> None:
    checkpoint = str(bf16_accumulated["dir"] / "epoch_2.pth")
    args = ["tools/test.py", CONFIG, checkpoint, "--eval", "--work-dir", str(tmp_path)]
    proc = run_tool([*args, "--amp", "--cfg-options", *SMALL])
    assert "autocast inference in bfloat16" in proc.stdout and "mAP@0.5: " in proc.stdout
    plain = run_tool([*args, "--cfg-options", *SMALL])
    assert "autocast inference" not in plain.stdout and "mAP@0.5: " in plain.stdout


def test_contradicting_precision_options_fail_clearly(tmp_path: Path) -> None:
    options = SMALL + ["amp.dtype='bfloat16'", "fp16.loss_scale=512.0"]
    proc = train(tmp_path, options=options, check=False)
    assert proc.returncode != 0 and "amp.dtype: 'bfloat16' contradicts fp16" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_compiled_run_checkpoint_loads_eagerly_and_in_the_test_tool(tmp_path: Path) -> None:
    proc = train(tmp_path, "--compile", "--no-validate", options=_epochs(SMALL, 1))
    assert "torch.compile: TinyDet.extract" in proc.stdout
    assert "torch.compile over the run: {'recompile': " in proc.stdout
    checkpoint = torch.load(tmp_path / "epoch_1.pth", weights_only=True)
    assert checkpoint["meta"]["config_dict"]["compile"] is True
    eager = build_model(dict(type="TinyDet", num_classes=3, width=8))
    assert list(checkpoint["state_dict"]) == list(eager.state_dict())  # no _orig_mod.
    eager.load_state_dict(checkpoint["state_dict"])
    args = ["tools/test.py", CONFIG, str(tmp_path / "epoch_1.pth"), "--eval"]
    proc = run_tool([*args, "--work-dir", str(tmp_path), "--cfg-options", *SMALL])
    assert "mAP@0.5: " in proc.stdout
