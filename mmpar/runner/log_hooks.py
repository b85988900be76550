"""``log_config.hooks``: mmdet 2.x's logger hooks, as writers of the run's log records.

mmdet 2.x configs name their loggers as mmcv hooks::

    log_config = dict(
        interval=50,
        hooks=[dict(type="TextLoggerHook"), dict(type="TensorboardLoggerHook")],
    )

mmpar accepts these two types:

- ``TextLoggerHook``: the text log and the ``.log.json`` records, which mmpar
  writes in any case (they are what ``--auto-resume`` reports and ``plot_log.py``
  reads), so naming it changes nothing.
- ``TensorboardLoggerHook``: the scalars of the same records as TensorBoard
  events, on rank 0, under ``log_dir`` (default ``<work_dir>/tf_logs``; a relative
  ``log_dir`` is taken from the current directory, as mmcv does). The tags are
  mmcv's: ``train/<name>`` for the losses and other logged values,
  ``learning_rate``, ``momentum`` (the first parameter group's ``momentum``, or
  ``betas[0]`` for Adam-style optimizers, else 0), and ``val/<metric>`` (``val/mAP``)
  for evaluations; ``time`` and ``data_time`` are left out, as mmcv leaves them
  out. The step is the record's ``iter``, the iterations completed (0 for the
  evaluation before training), so that TensorBoard and the JSON log agree. Needs
  the ``tensorboard`` package: ``pip install -e ".[tensorboard]"``.

Every hook logs every ``log_config.interval`` iterations; a hook's own
``interval``, if given, must be that one. Other types, or other keys, are refused
with a message naming the entry (``log_config.hooks[1].type``).
"""

from __future__ import annotations

import difflib
import logging
import numbers
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Union

import torch

__all__ = [
    "LOGGER_HOOKS",
    "LogWriters",
    "RecordWriter",
    "TensorboardMissingError",
    "TensorboardWriter",
    "build_log_writers",
    "check_log_config",
    "first_momentum",
    "tensorboard_log_dirs",
]

#: The hook types that ``log_config.hooks`` accepts, and the keys each takes.
LOGGER_HOOKS: Dict[str, Sequence[str]] = {
    "TextLoggerHook": ("type", "interval", "by_epoch"),
    "TensorboardLoggerHook": ("type", "interval", "by_epoch", "log_dir"),
}

INSTALL_HINT = (
    'pip install -e ".[tensorboard]" from the mmpar checkout (or pip install tensorboard)'
)


class TensorboardMissingError(ImportError, ValueError):
    """``TensorboardLoggerHook`` is configured but ``torch.utils.tensorboard`` cannot
    be imported.

    An ImportError for code that imports; also a ValueError, because to the tools it
    is a problem of the config (or of the install) and ends in one ``error:`` line.
    """


class RecordWriter(Protocol):
    """Takes the log records (the dicts of the JSON log) one by one."""

    def write(self, record: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


def _closest(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def check_log_config(log_config: Optional[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Check ``log_config.hooks`` and return its entries, as dicts.

    Also checks that ``torch.utils.tensorboard`` imports when a
    ``TensorboardLoggerHook`` is configured, so that a missing package stops the run
    before it trains.

    Args:
        log_config: The config's ``log_config`` (``None``: no hooks).

    Returns:
        The hook dicts, in order (empty without ``hooks``).

    Raises:
        TypeError: ``hooks`` is not a list of dicts, or a value has the wrong type.
        ValueError: an unknown type, a type given twice, an unknown key, a per-hook
            ``interval`` other than ``log_config.interval``, or ``by_epoch=False``.
        TensorboardMissingError: ``TensorboardLoggerHook`` without the ``tensorboard``
            package.
    """
    if not log_config:
        return []
    hooks = log_config.get("hooks")
    if hooks is None:
        return []
    if not isinstance(hooks, (list, tuple)):
        raise TypeError(
            "log_config.hooks: expected a list of dicts such as [dict(type='TextLoggerHook')], "
            f"got {type(hooks).__name__} {hooks!r}"
        )
    accepted = list(LOGGER_HOOKS)
    seen: Dict[str, int] = {}
    checked: List[Dict[str, Any]] = []
    for i, hook in enumerate(hooks):
        where = f"log_config.hooks[{i}]"
        if not isinstance(hook, Mapping) or "type" not in hook:
            raise TypeError(
                f"{where}: expected a dict with a 'type' among {accepted}, "
                f"got {type(hook).__name__} {hook!r}"
            )
        kind = hook["type"]
        if kind not in LOGGER_HOOKS:
            hint = _closest(kind, accepted) if isinstance(kind, str) else ""
            raise ValueError(
                f"{where}.type: {kind!r} is not supported; {hint}mmpar accepts {accepted}"
            )
        if kind in seen:
            raise ValueError(f"{where}.type: {kind!r} is already log_config.hooks[{seen[kind]}]")
        seen[kind] = i
        for key in hook:
            if key not in LOGGER_HOOKS[kind]:
                hint = _closest(str(key), LOGGER_HOOKS[kind])
                raise ValueError(
                    f"{where}.{key}: not a key of {kind} in mmpar; {hint}"
                    f"it takes {list(LOGGER_HOOKS[kind])}"
                )
        _check_hook_values(where, hook, log_config.get("interval"))
        checked.append(dict(hook))
    if "TensorboardLoggerHook" in seen:
        _summary_writer_class(f"log_config.hooks[{seen['TensorboardLoggerHook']}]: ")
    return checked


def _check_hook_values(where: str, hook: Mapping[str, Any], interval: Any) -> None:
    if "interval" in hook and hook["interval"] != interval:
        raise ValueError(
            f"{where}.interval: {hook['interval']!r}, but every hook logs every "
            f"log_config.interval ({interval!r}) iterations in mmpar; remove it or set "
            "log_config.interval"
        )
    if "by_epoch" in hook and hook["by_epoch"] is not True:
        raise ValueError(
            f"{where}.by_epoch: {hook['by_epoch']!r}, but mmpar trains by epoch; remove it"
        )
    log_dir = hook.get("log_dir")
    if log_dir is not None and not isinstance(log_dir, (str, Path)):
        raise TypeError(
            f"{where}.log_dir: expected a folder (str), got {type(log_dir).__name__} {log_dir!r}"
        )


def _summary_writer_class(where: str = "") -> Any:
    """``torch.utils.tensorboard.SummaryWriter``, or a clear error (starting with
    ``where``) saying how to get it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise TensorboardMissingError(
            f"{where}TensorboardLoggerHook needs the tensorboard package ({exc}); install it with "
            f"{INSTALL_HINT}, or remove the hook from log_config.hooks",
            name="tensorboard",
        ) from exc
    return SummaryWriter


def tensorboard_log_dirs(
    hooks: Sequence[Mapping[str, Any]], work_dir: Union[str, Path]
) -> List[Path]:
    """The folders that the ``TensorboardLoggerHook`` entries of ``hooks`` write to."""
    return [
        Path(hook["log_dir"]) if hook.get("log_dir") is not None else Path(work_dir) / "tf_logs"
        for hook in hooks
        if hook["type"] == "TensorboardLoggerHook"
    ]


def first_momentum(optimizer: torch.optim.Optimizer) -> float:
    """The momentum that mmcv logs: the first parameter group's ``momentum``, its
    ``betas[0]`` (Adam and its kin), else 0."""
    group = optimizer.param_groups[0]
    if "momentum" in group:
        return float(group["momentum"])
    if "betas" in group:
        return float(group["betas"][0])
    return 0.0


# The record keys that are not scalars to plot (or that mmcv does not plot).
_NOT_TAGGED = frozenset({"mode", "epoch", "iter", "tag", "time", "data_time"})


def _is_scalar(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class TensorboardWriter:
    """Writes the scalars of the train and val records as TensorBoard events.

    Events are flushed after every record, so that a run that is killed keeps the
    ones logged so far. Other ranks than 0 write nothing and open no file.

    Args:
        log_dir: The folder of the event files (created).
        rank: This process's rank.
        momentum: Returns the momentum to log with each train record (``None``: not logged).
        purge_step: On a resumed run, the first step it logs: TensorBoard then hides
            the events of earlier runs in the same folder from that step on, which
            the interrupted run had logged after its last checkpoint.

    Raises:
        TensorboardMissingError: ``torch.utils.tensorboard`` cannot be imported.
    """

    def __init__(
        self,
        log_dir: Union[str, Path],
        rank: int = 0,
        momentum: Optional[Callable[[], float]] = None,
        purge_step: Optional[int] = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.momentum = momentum
        self._writer: Any = None
        if rank == 0:
            writer_class = _summary_writer_class()
            self._writer = writer_class(str(self.log_dir), purge_step=purge_step)

    def write(self, record: Mapping[str, Any]) -> None:
        """Write the scalars of a ``train`` or ``val`` record at step ``record['iter']``;
        other records (``meta``) are ignored."""
        if self._writer is None:
            return
        mode = record.get("mode")
        if mode not in ("train", "val"):
            return
        step = int(record["iter"])
        tags: Dict[str, float] = {}
        for key, value in record.items():
            if key in _NOT_TAGGED or not _is_scalar(value):
                continue
            if mode == "train" and key == "lr":
                tags["learning_rate"] = float(value)
            else:
                tags[f"{mode}/{key}"] = float(value)
        if mode == "train" and self.momentum is not None:
            tags["momentum"] = self.momentum()
        for tag, value in tags.items():
            self._writer.add_scalar(tag, value, step)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class LogWriters:
    """Hands each log record to several writers (the JSON log, TensorBoard).

    Args:
        writers: The writers, each with ``write(record)`` and ``close()``.
    """

    def __init__(self, *writers: RecordWriter) -> None:
        self.writers = list(writers)

    def write(self, record: Mapping[str, Any]) -> None:
        """Give ``record`` to every writer, in order."""
        for writer in self.writers:
            writer.write(record)

    def close(self) -> None:
        """Close every writer."""
        for writer in self.writers:
            writer.close()


def build_log_writers(
    log_config: Optional[Mapping[str, Any]],
    json_log: RecordWriter,
    work_dir: Union[str, Path],
    rank: int,
    optimizer: Optional[torch.optim.Optimizer] = None,
    resumed_iter: int = 0,
    logger: Optional[logging.Logger] = None,
) -> LogWriters:
    """The JSON log plus a :class:`TensorboardWriter` per ``TensorboardLoggerHook``.

    Args:
        log_config: The config's ``log_config``.
        json_log: The ``.log.json`` writer, always first.
        work_dir: The run's work dir (the default ``log_dir`` is ``<work_dir>/tf_logs``).
        rank: This process's rank (only rank 0 writes events).
        optimizer: Its momentum is logged with the train records.
        resumed_iter: The iterations completed before this run (a resumed run).
        logger: Says where the events go.

    Raises:
        TypeError, ValueError, TensorboardMissingError: see :func:`check_log_config`.
    """
    hooks = check_log_config(log_config)
    writers: List[RecordWriter] = [json_log]
    momentum = None if optimizer is None else (lambda: first_momentum(optimizer))
    # A resumed run logs from resumed_iter + 1 on (the evaluation at resumed_iter,
    # if any, was logged before the checkpoint was written).
    purge = resumed_iter + 1 if resumed_iter > 0 else None
    for log_dir in tensorboard_log_dirs(hooks, work_dir):
        writers.append(TensorboardWriter(log_dir, rank, momentum, purge_step=purge))
        if logger is not None and rank == 0:
            logger.info(f"TensorBoard: scalars go to {log_dir} (tensorboard --logdir {log_dir})")
    return LogWriters(*writers)
