"""A model on its device(s): MMDataParallel for one device, MMDistributedDataParallel in a group."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional

import torch
import torch.distributed as dist
from torch import nn

from mmpar.data_parallel import MMDataParallel
from mmpar.dist import is_distributed
from mmpar.distributed import MMDistributedDataParallel
from mmpar.models.norm import has_sync_batchnorm, revert_sync_batchnorm
from mmpar.utils.checks import is_int

__all__ = ["wrap_model", "scale_lr", "run_device"]


def run_device(distributed: bool) -> torch.device:
    """Where a run's model lives: ``cuda:<current device>``, or the CPU.

    The CPU without CUDA, and in a process group whose backend is not nccl
    (choosing gloo on a GPU machine means training on the CPU, e.g. 2 processes
    on a machine with 1 GPU); otherwise the current CUDA device (``cuda:0``
    for a single process).

    Raises:
        RuntimeError: ``distributed`` is set but no process group was initialised.
    """
    if not torch.cuda.is_available():
        return torch.device("cpu")
    if distributed:
        if not is_distributed():
            raise RuntimeError(
                "run_device: distributed=True but no process group exists; call "
                "mmpar.dist.init_dist first"
            )
        if "nccl" not in str(dist.get_backend()):
            return torch.device("cpu")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cuda", 0)


def wrap_model(
    model: nn.Module, distributed: bool, find_unused_parameters: bool = False
) -> nn.Module:
    """Wrap ``model`` for training or testing.

    * ``distributed`` (a process group exists): :class:`MMDistributedDataParallel`,
      on ``cuda:<current device>`` with nccl, on the CPU with gloo (even where
      CUDA is available, see :func:`run_device`);
    * else :class:`MMDataParallel` on ``cuda:0``, or on the CPU without CUDA.

    ``SyncBatchNorm`` layers become ``BatchNorm2d`` with a warning where they cannot
    work: without a process group, or in a CPU process group.

    Raises:
        RuntimeError: ``distributed`` is set but no process group was initialised.
    """
    group = is_distributed()
    if distributed and not group:
        raise RuntimeError(
            "wrap_model: distributed=True but no process group exists; call mmpar.dist.init_dist "
            "first"
        )
    cuda = run_device(distributed).type == "cuda"
    if has_sync_batchnorm(model) and not (distributed and cuda):
        model = revert_sync_batchnorm(
            model,
            "no process group"
            if not distributed
            else "SyncBatchNorm needs CUDA; this run is on the CPU",
        )
    if distributed:
        if cuda:
            device = torch.cuda.current_device()
            return MMDistributedDataParallel(
                model.cuda(device),
                device_ids=[device],
                broadcast_buffers=False,
                find_unused_parameters=find_unused_parameters,
            )
        return MMDistributedDataParallel(model, find_unused_parameters=find_unused_parameters)
    if cuda:
        return MMDataParallel(model.cuda(0), device_ids=[0])
    return MMDataParallel(model, device_ids=["cpu"])


def scale_lr(
    optimizer_cfg: Any,
    auto_scale_lr: Optional[Mapping[str, Any]],
    total_batch_size: int,
    logger: Optional[logging.Logger] = None,
) -> float:
    """Scale ``optimizer_cfg["lr"]`` in place by ``total_batch_size / base_batch_size`` (linear).

    Args:
        optimizer_cfg: The config's ``optimizer`` dict.
        auto_scale_lr: The config's ``auto_scale_lr``, ``dict(base_batch_size=...)``.
        total_batch_size: Samples per iteration over all processes.
        logger: Where to report the change.

    Returns:
        The new lr.

    Raises:
        ValueError: ``auto_scale_lr`` is missing or has no positive int ``base_batch_size``.
    """
    base = (
        (auto_scale_lr or {}).get("base_batch_size") if isinstance(auto_scale_lr, Mapping) else None
    )
    if not is_int(base) or base < 1:
        raise ValueError(
            "auto_scale_lr: --auto-scale-lr needs auto_scale_lr = dict(base_batch_size=N) in the "
            f"config (N a positive int), got {auto_scale_lr!r}"
        )
    old = float(optimizer_cfg["lr"])
    optimizer_cfg["lr"] = old * total_batch_size / base
    if logger is not None:
        logger.info(
            f"auto_scale_lr: lr {old:g} -> {optimizer_cfg['lr']:g} (batch size {total_batch_size} "
            f"vs base {base})"
        )
    return float(optimizer_cfg["lr"])
