"""Gradient accumulation: the optimizer steps every ``cumulative_iters`` batches.

``optimizer_config = dict(cumulative_iters=N)`` (or mmdet 2.x's
``dict(type="GradientCumulativeOptimizerHook", cumulative_iters=N)``) sums the
gradients of N batches, each loss divided by N, before one optimizer step: with
losses that are means over samples, N batches of B make the step of one batch of
N·B. Iterations (and the lr schedule, ``warmup_iters`` included) still count batches.

Windows are counted over the whole run, as mmcv's hook counts them: a window may
straddle two epochs, and when the run's length is not a multiple of N its last
``total % N`` batches form a shorter window whose losses are divided by that
remainder. A checkpoint written inside a window keeps the gradients gathered so
far (see :meth:`mmpar.runner.optim_step.OptimizerStepper.pending_grads`), so
that a resumed run continues exactly; mmcv's hook drops them, with a warning.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from mmpar.utils.checks import check_positive_int

__all__ = [
    "CUMULATIVE_HOOKS",
    "cumulative_iters",
    "is_step_iter",
    "is_window_start",
    "loss_divisor",
    "window_open",
]

#: mmcv's optimizer hooks that accumulate gradients.
CUMULATIVE_HOOKS = ("GradientCumulativeOptimizerHook", "GradientCumulativeFp16OptimizerHook")
_KNOWN_TYPES = (None, "OptimizerHook", "Fp16OptimizerHook") + CUMULATIVE_HOOKS


def cumulative_iters(optimizer_config: Optional[Mapping[str, Any]]) -> int:
    """``optimizer_config.cumulative_iters`` (default 1), checked.

    Raises:
        TypeError: ``optimizer_config`` is not a dict, or ``cumulative_iters`` is not an int.
        ValueError: ``cumulative_iters`` < 1, or an unknown ``type``.
    """
    if optimizer_config is None:
        return 1
    if not isinstance(optimizer_config, Mapping):
        raise TypeError(f"optimizer_config: expected a dict, got {type(optimizer_config).__name__}")
    kind = optimizer_config.get("type")
    if kind not in _KNOWN_TYPES:
        raise ValueError(
            f"optimizer_config.type: expected one of {[t for t in _KNOWN_TYPES if t]}, got {kind!r}"
        )
    value = optimizer_config.get("cumulative_iters", 1)
    return check_positive_int(value, "cumulative_iters", "optimizer_config")


def loss_divisor(it: int, total: int, n: int) -> int:
    """What the loss of iteration ``it`` (0-based, in a run of ``total``) is divided by:
    the length of its window, N, or the remainder ``total % N`` for the last one."""
    full = total // n * n
    return n if it < full else total - full


def is_step_iter(it: int, total: int, n: int) -> bool:
    """Whether the optimizer steps after iteration ``it``: a window's last batch."""
    return (it + 1) % n == 0 or it + 1 == total


def is_window_start(it: int, n: int) -> bool:
    """Whether iteration ``it`` opens a window (gradients are cleared before it)."""
    return it % n == 0


def window_open(done: int, total: int, n: int) -> bool:
    """Whether gradients are pending after ``done`` completed iterations of ``total``."""
    return done % n != 0 and done < total
