"""Endless batch samplers for iteration-based training (mmcv's ``IterBasedRunner``)."""

from __future__ import annotations

import itertools
from typing import Any, Iterator, List, Optional

from torch.utils.data import Sampler

from mmpar.data.samplers._dataset_info import dataset_length
from mmpar.data.samplers._epoch import (
    BatchIndexView,
    EpochSeeded,
    resolve_replicas,
)
from mmpar.data.samplers.distributed_group_sampler import DistributedGroupSampler
from mmpar.utils.checks import check_positive_int

__all__ = ["InfiniteBatchSampler", "InfiniteGroupBatchSampler"]


class _Ungrouped:
    """Stands for a dataset of ``n`` samples without ``flag`` or ``img_sizes``."""

    def __init__(self, n: int) -> None:
        self._n = n

    def __len__(self) -> int:
        return self._n


class InfiniteGroupBatchSampler(EpochSeeded, Sampler):
    """Yields this rank's one-group batches forever, a new order on every pass.

    The stream is a run of *passes* over the dataset. Pass ``p`` is the epoch
    ``p`` plan of :class:`~mmpar.data.samplers.DistributedGroupSampler` with
    the same arguments: every batch holds ``batch_size`` samples of one group
    (a group's short last batch is completed from the same group), the batches
    are dealt round-robin to the ranks (padded by the first batches so that
    every rank gets the same number), and over all ranks every sample comes at
    least once per pass. Passes are drawn from ``(seed, p)``, so they differ
    from one another and repeat exactly for the same seed.

    Iteration starts at pass :attr:`epoch` (0 until :meth:`set_epoch`) and never
    ends. ``set_epoch`` therefore selects where the *next* ``iter()`` starts,
    e.g. to resume a run at the pass it had reached; an iterator already
    running keeps going (mmcv's ``IterLoader`` makes one iterator and, as the
    stream never ends, never calls ``set_epoch``).

    Pass it as ``DataLoader(batch_sampler=...)``. ``len()`` is the number of
    batches of one pass on this rank, which is what ``len(loader)`` reports;
    :attr:`sampler` is the flattened index view carrying :meth:`set_epoch`.

    Args:
        dataset: Sized, non-empty dataset, optionally with ``flag`` and
            ``img_sizes`` (see :mod:`mmpar.data.samplers`).
        batch_size: Samples per batch on this rank, >= 1 (``samples_per_gpu``,
            times the GPUs of ``MMDataParallel`` when not distributed).
        num_replicas: Number of ranks; ``None`` takes the process group's size.
        rank: This rank; ``None`` takes the process group's rank.
        seed: Seed of the order; ``None`` takes rank 0's random seed through
            :func:`mmpar.dist.sync_random_seed` (the same on every rank).
        shuffle: Draw a new random order every pass; without it every pass
            comes group by group in dataset order.
        size_aware: Batch samples of similar shape together (needs ``img_sizes``).
        pool_batches: Batches per size-sorting pool, >= 1.

    Raises:
        TypeError: non-int arguments where ints are expected; a dataset without
            ``__len__``.
        ValueError: an empty dataset (an endless stream of nothing would hang
            the loop that reads it); ``batch_size``, ``num_replicas`` or
            ``pool_batches`` < 1; ``rank`` outside ``[0, num_replicas)``; a
            ``flag`` or ``img_sizes`` that does not match the dataset.
    """

    _grouped = True

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        seed: Optional[int] = None,
        shuffle: bool = True,
        size_aware: bool = False,
        pool_batches: int = 16,
    ) -> None:
        owner = type(self).__name__
        self.batch_size = check_positive_int(batch_size, "batch_size", owner)
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank, owner)
        self.shuffle = bool(shuffle)
        n = dataset_length(dataset, owner)
        if n == 0:
            raise ValueError(
                f"{owner}: dataset must hold at least one sample, got an empty dataset"
            )
        self._init_epoch(seed, owner, shuffle)
        self._plan = DistributedGroupSampler(
            dataset if self._grouped else _Ungrouped(n),
            self.batch_size,
            self.num_replicas,
            self.rank,
            seed=self.seed,
            shuffle=self.shuffle,
            size_aware=size_aware,
            batch_sampler=True,
            pool_batches=pool_batches,
        )
        self.num_batches = self._plan.num_batches
        self._index_view = BatchIndexView(self, self.num_batches * self.batch_size)

    @property
    def sampler(self) -> Sampler:
        """Flattened index view whose ``set_epoch`` is this sampler's."""
        return self._index_view

    def pass_batches(self, index: int) -> List[List[int]]:
        """This rank's batches of pass ``index`` (``num_batches`` of them)."""
        return self._plan.epoch_batches(index)

    def __iter__(self) -> Iterator[List[int]]:
        start = self.epoch
        return (batch for p in itertools.count(start) for batch in self.pass_batches(p))

    def __len__(self) -> int:
        """Batches of one pass on this rank."""
        return self.num_batches


class InfiniteBatchSampler(InfiniteGroupBatchSampler):
    """:class:`InfiniteGroupBatchSampler` that ignores ``flag`` and ``img_sizes``.

    Every pass is one permutation of the whole dataset (``0 .. N-1`` without
    ``shuffle``) cut into batches of ``batch_size`` (the last one completed
    with the samples before it) and dealt out to the ranks as described
    there. ``build_dataloader(runner_type="IterBasedRunner", shuffle=False)``
    uses it, as mmdet does.
    """

    _grouped = False

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        seed: Optional[int] = None,
        shuffle: bool = True,
    ) -> None:
        super().__init__(dataset, batch_size, num_replicas, rank, seed=seed, shuffle=shuffle)
