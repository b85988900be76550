"""Learning-rate schedules from ``lr_config``: a pure function of epoch and iteration.

``lr_config`` keys:

* ``policy``: ``"fixed"``, ``"step"`` (``step``: an epoch or list of epochs at which
  the lr is multiplied by ``gamma``, default 0.1) or ``"cosine"`` (from the base
  lr to ``min_lr`` over all iterations);
* ``warmup``: None, ``"linear"`` or ``"constant"``, for the first ``warmup_iters``
  iterations, starting from ``warmup_ratio`` times the scheduled lr.

Because the lr depends only on ``(epoch, iteration)``, a resumed run follows
the same schedule as an uninterrupted one.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import torch

__all__ = ["scheduled_lr", "set_lr", "check_lr_config"]

_POLICIES = ("fixed", "step", "cosine")
_WARMUPS = (None, "linear", "constant")


def check_lr_config(lr_config: Optional[Mapping[str, Any]]) -> dict:
    """``lr_config`` with defaults filled in.

    Raises:
        TypeError: not a dict or None.
        ValueError: an unknown policy or warmup, or a bad ``step``, ``warmup_iters`` or
            ``warmup_ratio``.
    """
    if lr_config is None:
        return dict(policy="fixed", warmup=None, warmup_iters=0, warmup_ratio=1.0)
    if not isinstance(lr_config, Mapping):
        raise TypeError(
            "lr_config: expected a dict such as dict(policy='step', step=[8]), got "
            f"{type(lr_config).__name__}"
        )
    cfg = dict(
        policy="fixed",
        warmup=None,
        warmup_iters=0,
        warmup_ratio=0.1,
        gamma=0.1,
        step=[],
        min_lr=0.0,
    )
    cfg.update(lr_config)
    if cfg["policy"] not in _POLICIES:
        raise ValueError(
            f"lr_config.policy: expected one of {list(_POLICIES)}, got {cfg['policy']!r}"
        )
    if cfg["warmup"] not in _WARMUPS:
        raise ValueError(
            f"lr_config.warmup: expected one of {list(_WARMUPS)}, got {cfg['warmup']!r}"
        )
    steps = [cfg["step"]] if isinstance(cfg["step"], int) else list(cfg["step"])
    if not all(isinstance(s, int) and s >= 0 for s in steps):
        raise ValueError(
            f"lr_config.step: expected an epoch or list of epochs (ints >= 0), got {cfg['step']!r}"
        )
    cfg["step"] = sorted(steps)
    if not isinstance(cfg["warmup_iters"], int) or cfg["warmup_iters"] < 0:
        raise ValueError(
            f"lr_config.warmup_iters: expected an int >= 0, got {cfg['warmup_iters']!r}"
        )
    if not 0 < float(cfg["warmup_ratio"]) <= 1:
        raise ValueError(
            f"lr_config.warmup_ratio: expected a number in (0, 1], got {cfg['warmup_ratio']!r}"
        )
    return cfg


def scheduled_lr(
    base_lr: float, lr_config: Mapping[str, Any], epoch: int, iteration: int, max_iters: int
) -> float:
    """The learning rate of one iteration.

    Args:
        base_lr: The optimizer's configured lr.
        lr_config: Checked config (see :func:`check_lr_config`).
        epoch: 0-based epoch of the iteration.
        iteration: 0-based iteration counted from the start of training.
        max_iters: Iterations of the whole run (for ``cosine``).

    Returns:
        The lr.
    """
    policy = lr_config["policy"]
    if policy == "step":
        lr = base_lr * lr_config["gamma"] ** sum(epoch >= s for s in lr_config["step"])
    elif policy == "cosine":
        progress = min(iteration / max(max_iters, 1), 1.0)
        lr = (
            lr_config["min_lr"]
            + (base_lr - lr_config["min_lr"]) * (1 + math.cos(math.pi * progress)) / 2
        )
    else:
        lr = base_lr
    warmup, n = lr_config["warmup"], lr_config["warmup_iters"]
    if warmup is not None and iteration < n:
        ratio = float(lr_config["warmup_ratio"])
        factor = ratio if warmup == "constant" else ratio + (1 - ratio) * iteration / n
        lr *= factor
    return lr


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set ``lr`` on every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr
