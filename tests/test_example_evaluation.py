"""The example config evaluates during training, so that its mAP curve has points between
the evaluation before training and the one after the last epoch."""

from __future__ import annotations

from pathlib import Path

from tests.test_tools import json_records, train

# The example's schedule and evaluations (12 epochs, evaluation.interval) on little data:
# a few iterations per epoch and 8 val images.
SMALL_DATA = [
    "data.train.num_samples=24",
    "data.val.num_samples=8",
    "data.samples_per_gpu=8",
    "data.test_samples_per_gpu=8",
    "log_config.interval=3",
]


def test_the_example_evaluates_every_4_epochs(tmp_path: Path) -> None:
    proc = train(tmp_path, options=SMALL_DATA)
    records = json_records(tmp_path)
    evaluations = [r for r in records if r["mode"] == "val"]
    assert [r["epoch"] for r in evaluations] == [0, 4, 8, 12]
    (meta,) = [r for r in records if r["mode"] == "meta"]
    per_epoch = meta["iters_per_epoch"]
    assert [r["iter"] for r in evaluations] == [e * per_epoch for e in (0, 4, 8, 12)]
    assert [r["tag"] for r in evaluations] == ["before training"] + ["val"] * 3
    assert proc.stdout.count("Epoch(val) [") == 3
    # The run's last line still gives the first and the last evaluation.
    before, after = evaluations[0]["mAP"], evaluations[-1]["mAP"]
    assert f"mAP@0.5 before training: {before:.4f}, after: {after:.4f}" in proc.stdout
