"""GroupSampler: batches of one group (orientation, or any id) on one process."""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Union

import numpy as np
from torch.utils.data import Sampler

from mmpar.data.samplers._batching import plan_batches
from mmpar.data.samplers._dataset_info import dataset_groups
from mmpar.data.samplers._epoch import BatchIndexView, EpochSeeded, TwoFormSampler
from mmpar.utils.checks import check_positive_int

__all__ = ["GroupSampler"]


class GroupSampler(TwoFormSampler, EpochSeeded, Sampler):
    """Draws batches whose samples all share a group id, on one process.

    One batch holds ``samples_per_gpu * num_gpus`` samples, all of one group, so
    that every chunk of ``samples_per_gpu`` that :func:`mmpar.collate.collate`
    cuts from it (one per GPU of ``MMDataParallel``) is pure too. The dataset
    contract (``len``, optional ``flag`` and ``img_sizes``) is described in
    :mod:`mmpar.data.samplers._dataset_info`.

    Two forms:

    * ``batch_sampler=True`` (what :func:`mmpar.data.builder.build_dataloader`
      uses; pass it as ``DataLoader(batch_sampler=...)``): yields lists of
      indices. Every sample comes exactly once per epoch; the last batch of each
      group may be short (``drop_last=True`` drops those short batches instead).
      Its :attr:`sampler` (the indices, flattened) carries :meth:`set_epoch` for
      hooks that call ``loader.batch_sampler.sampler.set_epoch``.
    * ``batch_sampler=False`` (pass as ``DataLoader(sampler=..., batch_size=B)``
      with ``B = samples_per_gpu * num_gpus``): yields indices whose consecutive
      runs of ``B`` form the batches. To keep that alignment, each group of
      ``n`` samples whose size is not a multiple of ``B`` is completed to
      ``ceil(n / B) * B``: its short last batch of ``r`` samples takes the
      ``B - r`` samples that precede it in the group's order of this epoch (a
      group smaller than ``B`` repeats its own samples). So each sample comes at
      least once and at most ``B - 1`` samples per group twice (more only for a
      group smaller than ``B``).

    With ``shuffle`` the order is drawn from ``(seed, epoch)``: each group is
    shuffled, cut into batches and the batches of all groups are shuffled
    together. Without ``shuffle`` batches come group by group (ascending id) in
    dataset order.

    With ``size_aware=True`` and ``dataset.img_sizes``, each group's shuffled
    samples are cut into pools of ``pool_batches`` batches and every pool is
    split greedily into batches of similar ``(h, w)`` (each batch starts from
    the largest remaining image and takes the images that waste least area in
    its box), so a batch holds images of nearly one shape, which pads far less
    than orientation grouping alone, while pools and batch order stay random
    across epochs.

    Args:
        dataset: Sized dataset, optionally with ``flag`` and ``img_sizes``.
        samples_per_gpu: Samples per chunk, >= 1.
        num_gpus: Chunks per batch, >= 1.
        shuffle: Draw a new random order every epoch.
        seed: Seed of the order; ``None`` takes rank 0's random seed through
            :func:`mmpar.dist.sync_random_seed`.
        size_aware: Batch samples of similar shape together (needs ``img_sizes``;
            without them it is orientation or flag grouping only).
        batch_sampler: Yield index lists instead of single indices.
        pool_batches: Batches per size-sorting pool, >= 1. Larger pools pad less
            and mix less.
        drop_last: With ``batch_sampler=True``, drop each group's short last batch.

    Raises:
        TypeError: a non-int ``samples_per_gpu``, ``num_gpus``, ``pool_batches``
            or ``seed``; a dataset without ``__len__``.
        ValueError: ``samples_per_gpu``, ``num_gpus`` or ``pool_batches`` < 1;
            ``drop_last`` without ``batch_sampler``; a ``flag`` or ``img_sizes``
            that does not match the dataset.
    """

    def __init__(
        self,
        dataset: Any,
        samples_per_gpu: int = 1,
        num_gpus: int = 1,
        shuffle: bool = True,
        seed: Optional[int] = None,
        size_aware: bool = False,
        batch_sampler: bool = False,
        pool_batches: int = 16,
        drop_last: bool = False,
    ) -> None:
        owner = type(self).__name__
        self.samples_per_gpu = check_positive_int(samples_per_gpu, "samples_per_gpu", owner)
        self.num_gpus = check_positive_int(num_gpus, "num_gpus", owner)
        self.pool_batches = check_positive_int(pool_batches, "pool_batches", owner)
        if drop_last and not batch_sampler:
            raise ValueError(
                f"{owner}: drop_last=True needs batch_sampler=True (the index form keeps every "
                "sample by completing short batches)"
            )
        self.batch_size = self.samples_per_gpu * self.num_gpus
        self.shuffle = bool(shuffle)
        self.size_aware = bool(size_aware)
        self.batch_sampler = bool(batch_sampler)
        self.drop_last = bool(drop_last)
        self.num_samples, self.flag, self.sizes, self.group_sizes = dataset_groups(
            dataset, owner, size_aware
        )
        self._init_epoch(seed, owner, shuffle)
        full, short = np.divmod(self.group_sizes, self.batch_size)
        kept = int(full.sum()) * self.batch_size + (0 if self.drop_last else int(short.sum()))
        self._index_view = BatchIndexView(self, kept)

    def batches(self) -> List[List[int]]:
        """The batches of the current epoch, as :meth:`__iter__` yields them."""
        return plan_batches(
            self.flag,
            self.sizes,
            self.batch_size,
            self._rng() if self.shuffle else None,
            self.size_aware,
            self.pool_batches,
            fill=not self.batch_sampler,
        )

    def __iter__(self) -> Iterator[Union[int, List[int]]]:
        batches = self.batches()
        if self.batch_sampler and self.drop_last:
            batches = [b for b in batches if len(b) == self.batch_size]
        return self._stream(batches)

    def __len__(self) -> int:
        """Batches per epoch (``batch_sampler=True``) or indices per epoch."""
        full, short = np.divmod(self.group_sizes, self.batch_size)
        if self.batch_sampler:
            return int(full.sum() + (0 if self.drop_last else np.count_nonzero(short)))
        return int((full + (short > 0)).sum() * self.batch_size)
