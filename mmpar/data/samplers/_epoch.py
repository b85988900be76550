"""What every sampler shares: a seed synced over ranks, an epoch, argument checks."""

from __future__ import annotations

from typing import Callable, Iterator, List, Optional, Tuple, Union

import numpy as np
from torch.utils.data import Sampler

from mmpar.dist import get_dist_info, sync_random_seed
from mmpar.utils.checks import check_positive_int, is_int

__all__ = [
    "BatchIndexView",
    "EpochSeeded",
    "TwoFormSampler",
    "resolve_replicas",
    "resolve_seed",
]


def resolve_seed(seed: Optional[int], owner: str, shuffle: bool = True) -> int:
    """The sampler seed: ``seed``, or when ``None`` rank 0's random seed.

    ``None`` with ``shuffle`` calls :func:`mmpar.dist.sync_random_seed`,
    which draws a seed on rank 0 and broadcasts it, so that every rank shuffles
    the same way: such a sampler must then be built on every rank of the group.
    Without ``shuffle`` the order needs no seed: ``None`` means 0 and no
    collective runs, so a sampler for a rank-0-only loader cannot block.

    Raises:
        TypeError: ``seed`` is neither ``None`` nor an int.
    """
    if seed is None:
        seed = sync_random_seed() if shuffle else 0
    if not is_int(seed):
        raise TypeError(f"{owner}: seed must be an int or None, got {type(seed).__name__} {seed!r}")
    return int(seed)


def resolve_replicas(
    num_replicas: Optional[int], rank: Optional[int], owner: str
) -> Tuple[int, int]:
    """``(num_replicas, rank)``, each taken from the process group when ``None``.

    Raises:
        TypeError: a non-int value.
        ValueError: ``num_replicas`` < 1 or ``rank`` outside ``[0, num_replicas)``.
    """
    if num_replicas is None or rank is None:
        group_rank, group_size = get_dist_info()
        num_replicas = group_size if num_replicas is None else num_replicas
        rank = group_rank if rank is None else rank
    num_replicas = check_positive_int(num_replicas, "num_replicas", owner)
    if not is_int(rank):
        raise TypeError(f"{owner}: rank must be an int, got {type(rank).__name__} {rank!r}")
    if not 0 <= rank < num_replicas:
        raise ValueError(
            f"{owner}: rank must be in [0, {num_replicas}) (num_replicas={num_replicas}), got "
            f"{rank}"
        )
    return num_replicas, int(rank)


class EpochSeeded:
    """Mixin: a seed, the current epoch and a random generator derived from both.

    ``set_epoch(epoch)`` selects the order of the next pass; the same
    ``(seed, epoch)`` always gives the same order and different epochs give
    different ones. Callbacks registered with :meth:`add_epoch_hook` run on
    every ``set_epoch`` (``build_dataloader`` uses one to reseed its workers).
    """

    _seed: int
    _epoch: int
    _epoch_hooks: List[Callable[[int], None]]

    def _init_epoch(self, seed: Optional[int], owner: str, shuffle: bool = True) -> None:
        self._seed = resolve_seed(seed, owner, shuffle)
        self._epoch = 0
        self._epoch_hooks = []

    @property
    def seed(self) -> int:
        """The seed shared by every rank."""
        return self._seed

    @property
    def epoch(self) -> int:
        """The epoch last given to :meth:`set_epoch` (0 before any call)."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration yields.

        Args:
            epoch: The epoch number, >= 0.

        Raises:
            TypeError: ``epoch`` is not an int.
            ValueError: ``epoch`` < 0.
        """
        if not is_int(epoch):
            raise TypeError(
                f"{type(self).__name__}.set_epoch: epoch must be an int, got {type(epoch).__name__}"
            )
        if epoch < 0:
            raise ValueError(f"{type(self).__name__}.set_epoch: epoch must be >= 0, got {epoch}")
        self._epoch = int(epoch)
        for hook in self._epoch_hooks:
            hook(self._epoch)

    def add_epoch_hook(self, hook: Callable[[int], None]) -> None:
        """Call ``hook(epoch)`` on every later :meth:`set_epoch`."""
        self._epoch_hooks.append(hook)

    def _rng(self, epoch: Optional[int] = None) -> np.random.Generator:
        # SeedSequence needs non-negative entries; a negative seed wraps modulo 2**64.
        return np.random.default_rng(
            [self._seed % (1 << 64), self._epoch if epoch is None else epoch]
        )


class BatchIndexView(Sampler):
    """The index-level face of a batch sampler: its batches flattened, its epoch controls.

    A batch sampler of this package exposes one as ``.sampler``, as torch's
    ``BatchSampler`` exposes the sampler it wraps, and the loaders of
    :func:`mmpar.data.builder.build_dataloader` expose the same object as
    ``loader.sampler``. So the two ways mmcv 1.x reaches an epoch-aware sampler,
    ``loader.sampler.set_epoch(e)`` (``DistSamplerSeedHook``, ``IterLoader``)
    and ``loader.batch_sampler.sampler.set_epoch(e)`` (``DistSamplerSeedHook``
    when the first has no ``set_epoch``), both land on the batch sampler's own
    :meth:`EpochSeeded.set_epoch`, with its epoch hooks.

    Args:
        owner: The batch sampler; iterating it yields lists of indices.
        num_indices: Indices it yields per epoch (per pass when infinite).
    """

    def __init__(self, owner: EpochSeeded, num_indices: int) -> None:
        self._owner = owner
        self._num_indices = int(num_indices)

    @property
    def owner(self) -> EpochSeeded:
        """The batch sampler this view belongs to."""
        return self._owner

    @property
    def epoch(self) -> int:
        """The owner's current epoch."""
        return self._owner.epoch

    def set_epoch(self, epoch: int) -> None:
        """Call the owner's ``set_epoch(epoch)`` (same checks, same hooks)."""
        self._owner.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        for batch in self._owner:  # type: ignore[attr-defined]
            yield from batch

    def __len__(self) -> int:
        """Indices per epoch of the owner (per pass for an infinite one)."""
        return self._num_indices


class TwoFormSampler:
    """Mixin for a sampler usable as an index sampler or, with ``batch_sampler``, a batch sampler.

    The class sets ``batch_sampler`` and ``_index_view`` (its
    :class:`BatchIndexView`) in ``__init__``.
    """

    batch_sampler: bool
    _index_view: BatchIndexView

    @property
    def sampler(self) -> Sampler:
        """The index-level sampler: this object in index form, else a
        :class:`~mmpar.data.samplers._epoch.BatchIndexView` whose ``set_epoch``
        is this sampler's."""
        return self._index_view if self.batch_sampler else self  # type: ignore[return-value]

    def _stream(self, batches: List[List[int]]) -> Iterator[Union[int, List[int]]]:
        """``batches`` as this sampler yields them: whole, or flattened in index form."""
        if self.batch_sampler:
            return iter(batches)
        return iter([i for b in batches for i in b])
