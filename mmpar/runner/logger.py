"""Logging of training runs: console and text file, plus a JSON line per logging step.

The text lines look like mmcv's::

    Epoch [2][10/16]	lr: 3.000e-03, eta: 0:00:12, time: 0.051, data_time: 0.002, loss: 1.1080

and the JSON log (``<timestamp>.log.json``) holds one object per line:
``{"mode": "train", "epoch": 2, "iter": 26, "lr": 0.003, "time": 0.051, ...}``
(``iter`` counts from the start of training), ``{"mode": "val", "epoch": 2,
"mAP": 0.71}`` after an evaluation, and a first ``{"mode": "meta", ...}`` line.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

__all__ = ["get_logger", "format_train_line", "format_eta", "JsonLogWriter"]

_FORMAT = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"


def get_logger(
    name: str = "mmpar",
    log_file: Optional[Union[str, Path]] = None,
    level: int = logging.INFO,
    rank: int = 0,
) -> logging.Logger:
    """A logger writing to stdout and, on rank 0, to ``log_file``.

    Other ranks only log errors, so a multi-process run prints each line once.
    Calling it again with the same name replaces the handlers it added before.

    Args:
        name: Logger name.
        log_file: Text log to append to (rank 0 only); its folder is created.
        level: Level on rank 0.
        rank: This process's rank.

    Returns:
        The configured ``logging.Logger`` (not propagating to the root logger).
    """
    logger = logging.getLogger(name)
    for handler in [h for h in logger.handlers if getattr(h, "_mmpar", False)]:
        logger.removeHandler(handler)
        handler.close()
    handlers: list = [logging.StreamHandler(sys.stdout)]
    if log_file is not None and rank == 0:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="a", encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(logging.Formatter(_FORMAT))
        handler._mmpar = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level if rank == 0 else logging.ERROR)
    logger.propagate = False
    return logger


def format_eta(seconds: float) -> str:
    """``H:MM:SS`` of a non-negative duration (``"unknown"`` for nan/inf)."""
    if not math.isfinite(seconds):
        return "unknown"
    return str(datetime.timedelta(seconds=int(max(seconds, 0))))


def format_train_line(
    epoch: int,
    inner_iter: int,
    iters_per_epoch: int,
    lr: float,
    eta_s: float,
    time_s: float,
    data_time_s: float,
    log_vars: Mapping[str, float],
) -> str:
    """One training log line (see the module docstring).

    Args:
        epoch: 1-based epoch.
        inner_iter: 1-based iteration within the epoch.
        iters_per_epoch: Iterations per epoch.
        lr: Current learning rate.
        eta_s: Estimated seconds left.
        time_s: Mean seconds per iteration over the logging interval.
        data_time_s: Mean seconds per iteration spent waiting for data.
        log_vars: Averaged losses and other scalars.
    """
    parts = [
        f"lr: {lr:.3e}",
        f"eta: {format_eta(eta_s)}",
        f"time: {time_s:.3f}",
        f"data_time: {data_time_s:.3f}",
    ]
    parts += [f"{k}: {v:.4f}" for k, v in log_vars.items()]
    return f"Epoch [{epoch}][{inner_iter}/{iters_per_epoch}]\t" + ", ".join(parts)


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return _plain(value.item())
    return value


class JsonLogWriter:
    """Appends one JSON object per line to a file (rank 0 only: other ranks write nothing).

    Args:
        path: The ``.log.json`` file; its folder is created.
        rank: This process's rank.
    """

    def __init__(self, path: Union[str, Path], rank: int = 0) -> None:
        self.path = Path(path)
        self.rank = rank
        if rank == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: Mapping[str, Any]) -> None:
        """Append ``record``: floats rounded to 6 digits, tensors/numpy scalars as numbers,
        non-finite floats as strings (so that every line is valid JSON).

        Raises:
            TypeError: ``record`` is not a dict.
        """
        if not isinstance(record, Mapping):
            raise TypeError(
                f"JsonLogWriter.write: record must be a dict, got {type(record).__name__}"
            )
        if self.rank != 0:
            return
        line: Dict[str, Any] = _plain(record)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def close(self) -> None:
        """Nothing to do: each record is appended and the file closed at once."""
