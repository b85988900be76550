"""DistributedGroupSampler: one-group batches, the same number on every rank."""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Union

import numpy as np
from torch.utils.data import Sampler

from mmpar.data.samplers._batching import plan_batches
from mmpar.data.samplers._dataset_info import dataset_groups
from mmpar.data.samplers._epoch import (
    BatchIndexView,
    EpochSeeded,
    TwoFormSampler,
    resolve_replicas,
)
from mmpar.utils.checks import check_positive_int

__all__ = ["DistributedGroupSampler"]


class DistributedGroupSampler(TwoFormSampler, EpochSeeded, Sampler):
    """Splits one-group batches of ``samples_per_gpu`` samples over the ranks.

    Every rank builds the same epoch plan from the shared ``(seed, epoch)``,
    as :class:`~mmpar.data.samplers.group_sampler.GroupSampler` does with
    ``batch_size = samples_per_gpu``, then takes every ``num_replicas``-th batch
    starting at its ``rank``. The dataset contract (``len``, optional ``flag``
    and ``img_sizes``) is described in :mod:`mmpar.data.samplers._dataset_info`.

    Repeats, so that every batch is full and every rank gets the same number of
    batches (DDP needs both):

    1. A group of ``n`` samples with ``r = n % samples_per_gpu > 0`` completes
       its short last batch with the ``samples_per_gpu - r`` samples that precede
       it in the group's order of the epoch (the end of the batch before it);
       a group smaller than one batch repeats its own samples.
    2. When the ``T`` batches of the epoch are not a multiple of
       ``num_replicas``, the first ``ceil(T / num_replicas) * num_replicas - T``
       batches of the epoch order are appended again (cycling when ``T`` is
       smaller than ``num_replicas``).

    So every sample is seen at least once per epoch over all ranks; at most
    ``samples_per_gpu - 1`` samples per group and ``num_replicas - 1`` batches
    repeat (more only for a dataset smaller than ``num_replicas`` batches).

    Usable as an index sampler (``DataLoader(sampler=..., batch_size=
    samples_per_gpu)``: every batch is full, so the index stream stays aligned)
    or, with ``batch_sampler=True``, as ``DataLoader(batch_sampler=...)``; its
    :attr:`sampler` then reaches :meth:`set_epoch` the way mmcv's hooks look
    for it (``loader.batch_sampler.sampler.set_epoch``).

    Args:
        dataset: Sized dataset, optionally with ``flag`` and ``img_sizes``.
        samples_per_gpu: Samples per batch on each rank, >= 1.
        num_replicas: Number of ranks; ``None`` takes the process group's size
            (1 without a group).
        rank: This rank; ``None`` takes the process group's rank.
        seed: Seed of the order; ``None`` takes rank 0's random seed through
            :func:`mmpar.dist.sync_random_seed` (the same on every rank).
        shuffle: Draw a new random order every epoch; without it batches come
            group by group in dataset order.
        size_aware: Batch samples of similar shape together (needs ``img_sizes``).
        batch_sampler: Yield index lists instead of single indices.
        pool_batches: Batches per size-sorting pool, >= 1.

    Raises:
        TypeError: non-int arguments where ints are expected; a dataset without
            ``__len__``.
        ValueError: ``samples_per_gpu``, ``num_replicas`` or ``pool_batches`` < 1,
            ``rank`` outside ``[0, num_replicas)``, or a ``flag`` or
            ``img_sizes`` that does not match the dataset.
    """

    def __init__(
        self,
        dataset: Any,
        samples_per_gpu: int = 1,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        seed: Optional[int] = None,
        shuffle: bool = True,
        size_aware: bool = False,
        batch_sampler: bool = False,
        pool_batches: int = 16,
    ) -> None:
        owner = type(self).__name__
        self.samples_per_gpu = check_positive_int(samples_per_gpu, "samples_per_gpu", owner)
        self.pool_batches = check_positive_int(pool_batches, "pool_batches", owner)
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank, owner)
        self.shuffle = bool(shuffle)
        self.size_aware = bool(size_aware)
        self.batch_sampler = bool(batch_sampler)
        self.num_samples, self.flag, self.sizes, group_sizes = dataset_groups(
            dataset, owner, size_aware
        )
        total = int(np.ceil(group_sizes / self.samples_per_gpu).sum())
        self.num_batches = -(-total // self.num_replicas)
        self._init_epoch(seed, owner, shuffle)
        self._index_view = BatchIndexView(self, self.num_batches * self.samples_per_gpu)

    def batches(self) -> List[List[int]]:
        """This rank's batches of the current epoch, each of ``samples_per_gpu``."""
        return self.epoch_batches(self.epoch)

    def epoch_batches(self, epoch: int) -> List[List[int]]:
        """This rank's batches of ``epoch`` (any epoch, without selecting it)."""
        plan = plan_batches(
            self.flag,
            self.sizes,
            self.samples_per_gpu,
            self._rng(epoch) if self.shuffle else None,
            self.size_aware,
            self.pool_batches,
            fill=True,
        )
        if not plan:
            return []
        missing = self.num_batches * self.num_replicas - len(plan)
        plan.extend(plan[k % len(plan)] for k in range(missing))
        return plan[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[Union[int, List[int]]]:
        return self._stream(self.batches())

    def __len__(self) -> int:
        """Batches per epoch on this rank (``batch_sampler=True``) or indices."""
        if self.batch_sampler:
            return self.num_batches
        return self.num_batches * self.samples_per_gpu
