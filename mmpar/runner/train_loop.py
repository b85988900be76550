"""The epoch loop: ``train_step``, backward, optimizer step, lr schedule and log lines."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from mmpar.data import set_loader_epoch
from mmpar.dist import collective_device, is_distributed
from mmpar.runner.log_hooks import RecordWriter
from mmpar.runner.logger import format_train_line
from mmpar.runner.lr_schedule import scheduled_lr, set_lr
from mmpar.runner.optim_step import OptimizerStepper

__all__ = ["TrainState", "train_one_epoch"]


@dataclasses.dataclass
class TrainState:
    """Progress of a run: ``epoch`` and ``iter`` count what is *completed*."""

    epoch: int = 0
    iter: int = 0
    max_epochs: int = 1
    iters_per_epoch: int = 1

    @property
    def max_iters(self) -> int:
        return self.max_epochs * self.iters_per_epoch


class _Meter:
    """Sample-weighted means of the log variables, and mean times, over a logging interval."""

    def __init__(self) -> None:
        self.sums: Dict[str, float] = OrderedDict()
        self.samples = 0
        self.times: List[float] = []
        self.data_times: List[float] = []

    def add(
        self, log_vars: Mapping[str, float], num_samples: int, time_s: float, data_time_s: float
    ) -> None:
        for k, v in log_vars.items():
            self.sums[k] = self.sums.get(k, 0.0) + float(v) * num_samples
        self.samples += num_samples
        self.times.append(time_s)
        self.data_times.append(data_time_s)

    def means(self) -> Dict[str, float]:
        """Means over this interval, averaged over the ranks of a process group too."""
        names = list(self.sums)
        values = torch.tensor(
            [self.sums[k] for k in names] + [float(self.samples)], dtype=torch.float64
        )
        if is_distributed():
            reduced = values.to(collective_device())
            dist.all_reduce(reduced)
            values = reduced.cpu()
        total = max(float(values[-1]), 1.0)
        return OrderedDict((k, float(values[i]) / total) for i, k in enumerate(names))


def train_one_epoch(
    model: nn.Module,
    data_loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    state: TrainState,
    lr_config: Mapping[str, Any],
    base_lr: float,
    logger: logging.Logger,
    json_log: Optional[RecordWriter] = None,
    log_interval: int = 10,
    grad_clip: Optional[Mapping[str, Any]] = None,
    stepper: Optional[OptimizerStepper] = None,
) -> None:
    """Train one epoch: epoch ``state.epoch`` (0-based), advancing ``state``.

    The loader's sampler gets ``set_epoch(state.epoch)`` first, so the data order
    depends on the seed and the epoch only. Each iteration sets the scheduled lr,
    runs ``model.train_step(batch, optimizer)`` (which returns ``loss``,
    ``log_vars`` and ``num_samples``), then ``zero_grad``, ``backward``, optional
    gradient clipping and ``step``: all through ``stepper`` when given (AMP,
    gradient accumulation; see :class:`mmpar.runner.optim_step.OptimizerStepper`),
    else plainly with ``grad_clip``. Every ``log_interval`` iterations and at the
    end of the epoch a line goes to ``logger`` and a record to ``json_log``.

    Raises:
        KeyError: ``train_step`` returned no ``loss``.
    """
    if stepper is None:
        stepper = OptimizerStepper(model, optimizer, grad_clip)
    model.train()
    set_loader_epoch(data_loader, state.epoch)
    n = len(data_loader)
    meter, last = _Meter(), time.perf_counter()
    for i, data in enumerate(data_loader):
        data_time = time.perf_counter() - last
        lr = scheduled_lr(base_lr, lr_config, state.epoch, state.iter, state.max_iters)
        set_lr(optimizer, lr)
        outputs = stepper.train_iter(data, state.iter, state.max_iters)
        state.iter += 1
        now = time.perf_counter()
        meter.add(
            outputs.get("log_vars", {}), int(outputs.get("num_samples", 1)), now - last, data_time
        )
        last = now
        if (i + 1) % log_interval == 0 or i + 1 == n:
            _log(meter, state, i + 1, n, lr, logger, json_log)
            meter = _Meter()
    state.epoch += 1


def _log(
    meter: _Meter,
    state: TrainState,
    inner: int,
    n: int,
    lr: float,
    logger: logging.Logger,
    json_log: Optional[RecordWriter],
) -> None:
    log_vars = meter.means()
    iter_time = sum(meter.times) / len(meter.times)
    data_time = sum(meter.data_times) / len(meter.data_times)
    eta = iter_time * (state.max_iters - state.iter)
    logger.info(
        format_train_line(state.epoch + 1, inner, n, lr, eta, iter_time, data_time, log_vars)
    )
    if json_log is not None:
        record: Dict[str, Any] = dict(
            mode="train",
            epoch=state.epoch + 1,
            iter=state.iter,
            lr=lr,
            time=iter_time,
            data_time=data_time,
        )
        record.update(log_vars)
        json_log.write(record)
