"""Queue-order region growing on a pixel grid, one breadth-first level per tensor step.

What :mod:`~mmpar.compat.ops.pixel_group` and :mod:`~mmpar.compat.ops.contour_expand`
share. mmcv's kernels grow labels with a first-in first-out queue: popping a pixel labels
each free 4-neighbour, visited in a fixed direction order, with the popped pixel's label
and appends it. A pixel is labelled when it is appended, so the queue holds the pixels by
breadth-first level and, inside a level, in the order they were appended; a free pixel
that several pixels of one level reach takes the label of the first of them.

:func:`grow_regions` takes a whole level at once. Its candidates ``(frontier pixel,
direction)``, listed frontier-major and direction-minor, are in the order the queue
visits them; the first valid candidate of each pixel wins, and the winners, in candidate
order, are the next level in the queue's order. The result is the queue's, pixel for
pixel. (The direction order only orders the children of one pixel, which share its
label, so it never changes the labels; the ops pass mmcv's all the same.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Accept", "as_tensor", "grow_regions"]

#: ``accept(pixels, labels) -> keep``: flat pixel indices ``(M,)`` of the candidates and
#: the labels they would take ``(M,)``; returns ``(M,)`` bool, the candidates kept.
Accept = Callable[[Tensor, Tensor], Tensor]


def as_tensor(op: str, name: str, value: Any) -> Tensor:
    """``value`` as a tensor: a ``numpy.ndarray`` is wrapped (copied only if not contiguous).

    Raises:
        TypeError: Neither a tensor nor an array.
    """
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    raise TypeError(
        f"mmcv.ops.{op}: {name} must be a torch.Tensor or numpy.ndarray, got {type(value).__name__}"
    )


def grow_regions(
    labels: Tensor,
    frontier: Tensor,
    allowed: Tensor,
    directions: Sequence[tuple[int, int]],
    accept: Optional[Accept] = None,
) -> Tensor:
    """Grow ``labels`` breadth-first from ``frontier``, as a FIFO queue would.

    A popped pixel gives its label to each 4-neighbour that is inside the map, ``allowed``,
    still 0 in ``labels``, and kept by ``accept``; the pixels so labelled are queued.

    Args:
        labels: ``(H, W)`` long, 0 for a free pixel.
        frontier: ``(S,)`` long, the queue's initial pixels as flat indices ``y * W + x``,
            in queue order; each must carry a label.
        allowed: ``(H, W)`` bool, the pixels that may be labelled.
        directions: The ``(dy, dx)`` steps in the order a popped pixel visits them.
        accept: Optional filter of the candidates (see :data:`Accept`).

    Returns:
        ``(H, W)`` long, the grown labels (a new tensor).
    """
    height, width = labels.shape
    # A border of never-allowed pixels: no step leaves the padded grid.
    stride = width + 2
    padded = F.pad(labels, (1, 1, 1, 1))
    open_ = F.pad(allowed, (1, 1, 1, 1)).flatten()
    grown = padded.flatten()
    steps = torch.tensor([dy * stride + dx for dy, dx in directions], device=labels.device)
    front = (frontier // width + 1) * stride + frontier % width + 1
    never = torch.iinfo(torch.long).max
    first = torch.full_like(grown, never)
    while front.numel():
        target = (front[:, None] + steps).flatten()
        label = grown[front].repeat_interleave(len(directions))
        keep = open_[target] & (grown[target] == 0)
        target, label = target[keep], label[keep]
        if accept is not None and target.numel():
            keep = accept((target // stride - 1) * width + target % stride - 1, label)
            target, label = target[keep], label[keep]
        position = torch.arange(target.numel(), device=target.device)
        first.scatter_reduce_(0, target, position, reduce="amin")
        wins = first[target] == position
        first[target] = never
        front = target[wins]
        grown[front] = label[wins]
    return grown.view(height + 2, stride)[1:-1, 1:-1].clone()
