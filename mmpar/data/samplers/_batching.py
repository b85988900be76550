"""Cut the samples of each group into batches, optionally by size, and order them.

Shared by the group samplers. Everything here is a pure function of its
arguments and of the ``numpy.random.Generator`` it is handed, so a sampler is
deterministic given its seed and epoch.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np

__all__ = ["plan_batches", "size_sorted", "cut_batches"]


def size_sorted(
    order: np.ndarray, sizes: np.ndarray, pool_size: int, batch_size: int
) -> np.ndarray:
    """Reorder ``order`` so that each run of ``batch_size`` holds images of similar shape.

    ``order`` is cut into consecutive pools of ``pool_size`` samples (a multiple
    of ``batch_size``); the pools keep their place, so a random ``order`` stays
    random at the scale of pools. Within a pool, batches are formed greedily:
    each starts from the largest remaining image (by area), whose ``(h, w)`` is
    the box, and takes the ``batch_size - 1`` remaining images that would waste
    the least area padded to that box grown to fit them,
    ``max(H, h) * max(W, w) - h * w``. Unlike sorting by aspect ratio, this also
    keeps small and large images of the same aspect apart.

    Args:
        order: Sample indices, shape ``(n,)``.
        sizes: ``(h, w)`` of every sample of the dataset, shape ``(N, 2)``.
        pool_size: Samples per pool, a positive multiple of ``batch_size``.
        batch_size: Samples per batch, >= 1.

    Returns:
        The same indices, shape ``(n,)``; consecutive runs of ``batch_size``
        from the start are the batches.
    """
    out: List[int] = []
    for start in range(0, len(order), pool_size):
        remaining = order[start : start + pool_size]
        while len(remaining):
            h, w = sizes[remaining, 0], sizes[remaining, 1]
            seed = int(np.argmax(h * w))
            waste = np.maximum(h[seed], h) * np.maximum(w[seed], w) - h * w
            waste[seed] = -1.0  # the box's own image comes first
            # Stable: ties keep the pool's random order.
            picked = np.argsort(waste, kind="stable")[:batch_size]
            out.extend(remaining[picked].tolist())
            remaining = np.delete(remaining, picked)
    return np.asarray(out, dtype=order.dtype)


def cut_batches(order: np.ndarray, batch_size: int, fill: bool) -> List[np.ndarray]:
    """Cut one group's ordered samples into batches of ``batch_size``.

    Args:
        order: The group's sample indices in batch order, shape ``(n,)``, n >= 1.
        batch_size: Samples per batch, >= 1.
        fill: Complete a short last batch of ``r`` samples with the
            ``batch_size - r`` samples that precede it in ``order`` (the end of
            the batch before it), walking backwards and
            wrapping around when the group holds fewer than ``batch_size``
            samples. Without ``fill`` the last batch may be short.

    Returns:
        ``ceil(n / batch_size)`` index arrays; all full when ``fill``.
    """
    n = len(order)
    batches = [order[s : s + batch_size] for s in range(0, n, batch_size)]
    short = n % batch_size
    if fill and short:
        missing = batch_size - short
        positions = (n - short - 1 - np.arange(missing)) % n
        batches[-1] = np.concatenate([batches[-1], order[positions]])
    return batches


def plan_batches(
    groups: np.ndarray,
    sizes: Optional[np.ndarray],
    batch_size: int,
    rng: Optional[np.random.Generator],
    size_aware: bool,
    pool_batches: int,
    fill: bool,
) -> List[List[int]]:
    """All batches of one epoch; every batch holds samples of one group only.

    Each group's samples are shuffled (when ``rng`` is given), sorted by shape
    within pools of ``pool_batches * batch_size`` samples (when ``size_aware``
    and ``sizes`` are known, see :func:`size_sorted`), and cut by
    :func:`cut_batches`. With ``rng`` the
    batches of all groups are then shuffled together; without it they come
    group by group (ascending group id) in dataset order.

    Args:
        groups: Group id per sample, shape ``(N,)``.
        sizes: ``(h, w)`` per sample, shape ``(N, 2)``, or ``None``.
        batch_size: Samples per batch, >= 1.
        rng: Source of randomness, or ``None`` for a fixed order.
        size_aware: Batch samples of similar shape together.
        pool_batches: Batches per sorting pool, >= 1.
        fill: Complete each group's short last batch (see :func:`cut_batches`).

    Returns:
        The batches as lists of Python ints.
    """
    batches: List[np.ndarray] = []
    for g in np.unique(groups):
        order = np.flatnonzero(groups == g)
        if rng is not None:
            order = rng.permutation(order)
        if size_aware and sizes is not None:
            order = size_sorted(order, sizes, pool_batches * batch_size, batch_size)
        batches.extend(cut_batches(order, batch_size, fill))
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return [b.tolist() for b in batches]
