"""Log lines, the JSON log and the logger's handlers."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from mmpar.runner.logger import JsonLogWriter, format_eta, format_train_line, get_logger


def test_train_line_looks_like_mmcv() -> None:
    line = format_train_line(
        2, 10, 16, 0.003, 75.4, 0.0512, 0.0021, dict(loss_heatmap=0.739, loss=1.108)
    )
    assert line == (
        "Epoch [2][10/16]\tlr: 3.000e-03, eta: 0:01:15, time: 0.051, data_time: 0.002, "
        "loss_heatmap: 0.7390, loss: 1.1080"
    )
    assert format_eta(float("nan")) == "unknown" and format_eta(3725) == "1:02:05"


def test_json_log_one_valid_object_per_line(tmp_path: Path) -> None:
    writer = JsonLogWriter(tmp_path / "sub" / "run.log.json")
    writer.write(dict(mode="train", iter=1, loss=torch.tensor(0.25), lr=np.float32(0.5), x=1 / 3))
    writer.write(dict(mode="val", mAP=float("nan"), per_class=[dict(ap=np.float64(0.5))]))
    lines = (tmp_path / "sub" / "run.log.json").read_text().splitlines()
    first, second = (json.loads(line) for line in lines)
    assert first == dict(mode="train", iter=1, loss=0.25, lr=0.5, x=0.333333)
    assert second == dict(mode="val", mAP="nan", per_class=[dict(ap=0.5)])
    with pytest.raises(TypeError, match="record must be a dict"):
        writer.write(["loss", 1])


def test_json_log_of_other_ranks_stays_empty(tmp_path: Path) -> None:
    JsonLogWriter(tmp_path / "r1.log.json", rank=1).write(dict(mode="train"))
    assert not (tmp_path / "r1.log.json").exists()


def test_logger_file_on_rank_zero_only_and_no_duplicate_handlers(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    log_file = tmp_path / "run.log"
    logger = get_logger("mmpar_test_logger", log_file)
    logger = get_logger("mmpar_test_logger", log_file)  # again: handlers replaced, not added
    logger.info("hello %d", 1)
    assert log_file.read_text().count("hello 1") == 1
    assert capsys.readouterr().out.count("hello 1") == 1
    other = get_logger("mmpar_test_logger_r1", tmp_path / "r1.log", rank=1)
    other.info("quiet")
    other.error("loud")
    assert not (tmp_path / "r1.log").exists() and other.level == logging.ERROR
    out = capsys.readouterr().out
    assert "quiet" not in out and "loud" in out
    for name in ("mmpar_test_logger", "mmpar_test_logger_r1"):
        for handler in list(logging.getLogger(name).handlers):
            handler.close()
            logging.getLogger(name).removeHandler(handler)
