"""DistributedSampler: a plain (ungrouped) split of the dataset over ranks."""

from __future__ import annotations

from typing import Any, Iterator, Optional

import numpy as np
from torch.utils.data import Sampler

from mmpar.data.samplers._dataset_info import dataset_length
from mmpar.data.samplers._epoch import EpochSeeded, resolve_replicas

__all__ = ["DistributedSampler"]


class DistributedSampler(EpochSeeded, Sampler):
    """Gives each rank an equal share of the dataset's indices.

    The epoch order (a permutation drawn from ``(seed, epoch)`` with
    ``shuffle``, else ``0 .. N-1``) is dealt out round-robin: rank ``r`` gets
    positions ``r, r + num_replicas, ...``. So that every rank gets the same
    number of indices:

    * ``drop_last=False``: the first ``ceil(N / R) * R - N`` indices of the epoch
      order are appended again (cycling when ``N < R``), so fewer than
      ``num_replicas`` samples repeat;
    * ``drop_last=True``: the last ``N % R`` indices of the epoch order are left
      out this epoch (other ones in other epochs when shuffling).

    With one replica it is a seeded random (or sequential) sampler whose order
    changes with :meth:`set_epoch`.

    Args:
        dataset: Sized dataset.
        num_replicas: Number of ranks; ``None`` takes the process group's size.
        rank: This rank; ``None`` takes the process group's rank.
        shuffle: Draw a new random order every epoch.
        seed: Seed of the order; ``None`` takes rank 0's random seed through
            :func:`mmpar.dist.sync_random_seed` (the same on every rank).
        drop_last: Leave out the tail instead of repeating the head (see above).

    Raises:
        TypeError: non-int ``num_replicas``, ``rank`` or ``seed``; a dataset
            without ``__len__``.
        ValueError: ``num_replicas`` < 1 or ``rank`` outside ``[0, num_replicas)``.
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        shuffle: bool = True,
        seed: Optional[int] = None,
        drop_last: bool = False,
    ) -> None:
        owner = type(self).__name__
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank, owner)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.dataset_size = dataset_length(dataset, owner)
        if self.drop_last:
            self.num_samples = self.dataset_size // self.num_replicas
        else:
            self.num_samples = -(-self.dataset_size // self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self._init_epoch(seed, owner, shuffle)

    def __iter__(self) -> Iterator[int]:
        n = self.dataset_size
        order = self._rng().permutation(n) if self.shuffle else np.arange(n)
        if self.total_size > n:
            order = np.concatenate([order, order[np.arange(self.total_size - n) % n]])
        order = order[: self.total_size]
        return iter(order[self.rank :: self.num_replicas].tolist())

    def __len__(self) -> int:
        """Indices per epoch on this rank."""
        return self.num_samples
