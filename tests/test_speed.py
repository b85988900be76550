"""cudnn_benchmark and channels_last: config checks, precedence, layouts and equal results."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import List

import pytest
import torch
from torch.utils.data import DataLoader

from mmpar.collate import collate
from mmpar.data import build_dataset
from mmpar.data_parallel import MMDataParallel
from mmpar.models import build_model
from mmpar.runner.rng import set_random_seed
from mmpar.runner.speed import apply_speed_options, check_flag
from tests._training import step_losses
from tests.test_tools import TINY, train

LOGGER = logging.getLogger("mmpar.test_speed")


@pytest.mark.parametrize("value", [1, "yes", dict()])
def test_flags_must_be_bools(value: object) -> None:
    with pytest.raises(TypeError, match=r"channels_last: expected True or False, got"):
        check_flag(dict(channels_last=value), "channels_last")
    assert check_flag({}, "channels_last") is False


def test_deterministic_wins_over_cudnn_benchmark(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    model = torch.nn.Linear(2, 2)
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        apply_speed_options(dict(cudnn_benchmark=True), model, True, LOGGER)
        assert torch.backends.cudnn.benchmark is False
        assert "cudnn_benchmark = True is ignored" in caplog.text
        apply_speed_options(dict(cudnn_benchmark=True), model, False, LOGGER)
        assert torch.backends.cudnn.benchmark is True


def _losses(channels_last: bool) -> List[float]:
    torch.manual_seed(0)
    model = build_model(dict(type="TinyDet", width=8))
    seen = []
    if channels_last:
        apply_speed_options(dict(channels_last=True), model, False, LOGGER)
        weight = model.stem[0][0].weight
        assert weight.is_contiguous(memory_format=torch.channels_last) and weight.stride()[1] == 1
    model.stem[0][0].register_forward_pre_hook(
        lambda m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last))
    )
    wrapped = MMDataParallel(model, device_ids=["cpu"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    dataset = build_dataset(dict(type="SyntheticShapes", num_samples=4, min_size=48, max_size=80))
    loader = DataLoader(dataset, batch_size=2, collate_fn=lambda b: collate(b, samples_per_gpu=2))
    set_random_seed(1)  # the same flips for both layouts
    losses = step_losses(wrapped, optimizer, loader)
    assert seen and all(seen) == channels_last  # the batch images arrive in that layout
    # Keys and shapes are the eager model's: the checkpoint loads in a contiguous model.
    build_model(dict(type="TinyDet", width=8)).load_state_dict(model.state_dict())
    return losses


def test_channels_last_converts_weights_and_images_and_keeps_the_losses() -> None:
    assert _losses(True) == pytest.approx(_losses(False), rel=1e-5)


def test_train_tool_applies_both_and_warns_under_deterministic(tmp_path: Path) -> None:
    options = TINY + ["model.width=8", "channels_last=True", "cudnn_benchmark=True"]
    proc = train(tmp_path, "--deterministic", "--no-validate", options=options)
    assert "channels_last: model weights and batch images in NHWC" in proc.stdout
    assert "cudnn_benchmark = True is ignored" in proc.stdout + proc.stderr
    bad = train(tmp_path / "bad", options=TINY + ["channels_last=1"], check=False)
    assert bad.returncode != 0 and "channels_last: expected True or False" in bad.stderr
    assert "Traceback" not in bad.stderr
