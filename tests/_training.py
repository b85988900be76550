"""A few training steps through a wrapper, for tests that compare two ways to train."""

from __future__ import annotations

from typing import Any, Iterable, List

import torch
from torch import nn


def step_losses(
    wrapped: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterable[Any]
) -> List[float]:
    """``train_step``, backward and ``step`` on each batch in turn; the losses, as floats."""
    losses = []
    for data in batches:
        out = wrapped.train_step(data, optimizer)
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
        losses.append(float(out["loss"].detach()))
    return losses
