"""QueryAndGroup's ``uniform_sample``: each group's distinct points, then random repeats."""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

__all__ = ["uniform_resample"]

# Random integers are drawn below this and reduced modulo a group's distinct count (at
# most a group's size): the modulo's bias is below 2**-40.
_DRAW_BOUND = 1 << 62


def uniform_resample(idx: Tensor) -> Tuple[Tensor, Tensor]:
    """Each row's distinct values ascending, then values drawn uniformly from them.

    mmcv's ``QueryAndGroup`` (``uniform_sample=True``) replaces each group of indices by
    ``torch.unique`` of it (ascending) followed by ``sample_num - unique`` draws with
    replacement among those distinct indices: a group that repeats its first point found
    (a ball with few points) becomes a uniform sample of its points. Here every row is done
    at once; the draws come from torch's generator of ``idx``'s device, not from one
    ``torch.randint`` call per group, so they differ from mmcv's for the same seed.

    Args:
        idx: ``(B, P, S)`` integer, ``S >= 1``.

    Returns:
        ``(resampled, unique_cnt)``: ``(B, P, S)`` of ``idx``'s dtype, and ``(B, P)`` int64,
        each row's distinct values.
    """
    ordered, _ = idx.sort(-1)
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    unique_cnt = first.sum(-1)
    # Distinct values to the front, ascending (a stable sort of "is not first" flags).
    front = (~first).to(torch.uint8).sort(dim=-1, stable=True)[1]
    distinct = ordered.gather(-1, front)
    draws = torch.randint(0, _DRAW_BOUND, idx.shape, device=idx.device)
    picks = distinct.gather(-1, draws % unique_cnt[..., None])
    slots = torch.arange(idx.shape[-1], device=idx.device)
    return torch.where(slots < unique_cnt[..., None], distinct, picks), unique_cnt
