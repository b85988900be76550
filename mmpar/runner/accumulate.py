"""Gradient accumulation: the optimizer steps every ``cumulative_iters`` batches.

``optimizer_config = dict(cumulative_iters=N)`` (or mmdet 2.x's
``dict(type="GradientCumulativeOptimizerHook", cumulative_iters=N)``) sums the
gradients of N batches, each loss divided by N, before one optimizer step: with
losses that are means over samples, N batches of B make the step of one batch of
N·B. Iterations (and the lr schedule, ``warmup_iters`` included) still count batches.

Windows are counted within each epoch. When an epoch's length is not a multiple
of N, its last ``len % N`` batches form a shorter window whose losses are divided
by that remainder, and the optimizer steps at the end of the epoch. mmcv counts
the windows over the whole run instead (carrying gradients across epochs, with
the short window at the end of training); per-epoch windows leave no pending
gradient in a checkpoint, so that a resumed run continues exactly. Both agree
when the epoch length is a multiple of N.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from mmpar.utils.checks import check_positive_int

__all__ = ["CUMULATIVE_HOOKS", "cumulative_iters", "is_step_iter", "loss_divisor"]

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


def _window(inner: int, epoch_len: int, n: int) -> int:
    """Length of the accumulation window that holds 0-based batch ``inner`` of an epoch."""
    full = epoch_len // n * n
    return n if inner < full else epoch_len - full


def loss_divisor(inner: int, epoch_len: int, n: int) -> int:
    """What the loss of batch ``inner`` (0-based, in an epoch of ``epoch_len``) is divided by."""
    return _window(inner, epoch_len, n)


def is_step_iter(inner: int, epoch_len: int, n: int) -> bool:
    """Whether the optimizer steps after batch ``inner``: a window's last batch."""
    return (inner + 1) % n == 0 or inner + 1 == epoch_len


def is_window_start(inner: int, n: int) -> bool:
    """Whether batch ``inner`` opens a window (gradients are cleared before it)."""
    return inner % n == 0
