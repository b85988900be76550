"""Per-worker seeds and per-epoch orders of a DataLoader.

Worker seeding: every worker seeds ``random``, ``numpy`` and ``torch`` from
``(seed, rank, epoch, worker_id)`` in :func:`seed_worker`, so the random
streams of data augmentation differ between workers, ranks and epochs, and
repeat exactly for the same seed. The epoch is the one last given to the
sampler's ``set_epoch`` (see :func:`set_loader_epoch`) when the workers start,
i.e. at the start of every epoch. With ``persistent_workers=True`` the workers
start once, at the first epoch, and their streams then run on across epochs:
they still differ between epochs and repeat for the same seed when a run goes
through the same epochs, but resuming at epoch ``e`` does not reproduce the
streams a run that reached epoch ``e`` had. The same holds for the endless
loaders of ``runner_type="IterBasedRunner"``, whose one iterator never ends.
"""

from __future__ import annotations

import random
from typing import Callable, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader

__all__ = ["EpochCounter", "seed_worker", "set_loader_epoch"]


class EpochCounter:
    """The sampler's current epoch, carried into the workers with their init function."""

    __slots__ = ("epoch",)

    def __init__(self) -> None:
        self.epoch = 0

    def __call__(self, epoch: int) -> None:
        self.epoch = epoch

    # A tuple: a falsy state (epoch 0) would skip __setstate__ when unpickling.
    def __getstate__(self) -> tuple:
        return (self.epoch,)

    def __setstate__(self, state: tuple) -> None:
        self.epoch = state[0]


def seed_worker(
    worker_id: int,
    seed: int,
    rank: int,
    epoch: EpochCounter,
    user_init_fn: Optional[Callable[[int], None]] = None,
) -> None:
    """Seed ``random``, ``numpy`` and ``torch`` in a DataLoader worker.

    Bind everything but ``worker_id`` with ``functools.partial`` and pass the
    result as ``worker_init_fn``; it pickles, so it also works with the
    ``spawn`` start method.

    Args:
        worker_id: Index of the worker within this rank's loader.
        seed: The loader seed, the same on every rank.
        rank: This process's rank.
        epoch: Holds the epoch at the time the workers start.
        user_init_fn: Called with ``worker_id`` afterwards.
    """
    state = np.random.SeedSequence([seed % (1 << 64), rank, epoch.epoch, worker_id]).generate_state(
        4
    )
    random.seed(int(state[0]) << 32 | int(state[1]))
    np.random.seed(state)
    torch.manual_seed(int(state[2]) << 32 | int(state[3]))
    if user_init_fn is not None:
        user_init_fn(worker_id)


def set_loader_epoch(loader: DataLoader, epoch: int) -> None:
    """Call ``set_epoch(epoch)`` on the loader's batch sampler or sampler.

    :func:`build_dataloader` puts the epoch-aware object in
    ``loader.batch_sampler`` for group batching and in ``loader.sampler``
    otherwise (its ``loader.sampler`` reaches the batch sampler too); this
    finds it in any loader. Call it before each epoch.

    Raises:
        TypeError: neither has a ``set_epoch`` method.
    """
    for owner in (loader.batch_sampler, loader.sampler):
        if hasattr(owner, "set_epoch"):
            owner.set_epoch(epoch)
            return
    raise TypeError(
        "set_loader_epoch: neither loader.batch_sampler "
        f"({type(loader.batch_sampler).__name__}) nor loader.sampler "
        f"({type(loader.sampler).__name__}) has set_epoch"
    )
