"""build_dataloader: a DataLoader with the right sampler, collate and worker seeds.

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

import functools
import inspect
import random
import warnings
from typing import Any, Callable, Dict, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader

from mmpar.collate import collate
from mmpar.dist_utils import get_dist_info, sync_random_seed

from .batch_sampler_loader import BatchSamplerLoader
from .samplers import (
    DistributedGroupSampler,
    DistributedSampler,
    GroupSampler,
    InfiniteBatchSampler,
    InfiniteGroupBatchSampler,
)
from .samplers._epoch import check_positive_int

__all__ = ["build_dataloader", "seed_worker", "set_loader_epoch"]

#: DataLoader arguments that build_dataloader derives itself.
_RESERVED = ("batch_size", "shuffle", "sampler", "batch_sampler", "num_workers")
#: Keyword arguments of DataLoader that build_dataloader passes on from kwargs.
_LOADER_ARGS = frozenset(inspect.signature(DataLoader.__init__).parameters) - {"self", "dataset", *_RESERVED}


class _EpochCounter:
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
    epoch: _EpochCounter,
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
    state = np.random.SeedSequence([seed % (1 << 64), rank, epoch.epoch, worker_id]).generate_state(4)
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


def _has_groups(dataset: Any) -> bool:
    return getattr(dataset, "flag", None) is not None or getattr(dataset, "img_sizes", None) is not None


def _check_arguments(
    workers_per_gpu: Any, runner_type: Any, class_aware_sampler: Any, kwargs: Dict[str, Any]
) -> None:
    """Refuse what build_dataloader cannot take; see its ``Raises`` section."""
    if isinstance(workers_per_gpu, bool) or not isinstance(workers_per_gpu, int):
        raise TypeError(
            f"build_dataloader: workers_per_gpu must be an int, got {type(workers_per_gpu).__name__}"
        )
    if workers_per_gpu < 0:
        raise ValueError(f"build_dataloader: workers_per_gpu must be >= 0, got {workers_per_gpu}")
    if not isinstance(runner_type, str):
        raise TypeError(
            "build_dataloader: runner_type must be a runner name (str) such as 'EpochBasedRunner' or "
            f"'IterBasedRunner', got {type(runner_type).__name__} {runner_type!r}"
        )
    if class_aware_sampler is not None:
        raise ValueError(
            "build_dataloader: class_aware_sampler is not supported (mmpar has no ClassAwareSampler); "
            f"expected None, got {class_aware_sampler!r}"
        )
    reserved = [k for k in _RESERVED if k in kwargs]
    if reserved:
        raise TypeError(
            f"build_dataloader: {', '.join(reserved)} are derived from samples_per_gpu, "
            "workers_per_gpu, num_gpus, dist, shuffle and runner_type; do not pass them in kwargs"
        )
    unknown = sorted(k for k in kwargs if k not in _LOADER_ARGS)
    if unknown:
        raise TypeError(
            f"build_dataloader: unexpected keyword argument(s) {', '.join(map(repr, unknown))}: "
            "expected mmdet's build_dataloader arguments, mmpar's (drop_last, pin_memory, size_aware) "
            "or DataLoader arguments"
        )


def build_dataloader(
    dataset: Any,
    samples_per_gpu: int,
    workers_per_gpu: int,
    num_gpus: int = 1,
    dist: bool = False,
    shuffle: bool = True,
    seed: Optional[int] = None,
    runner_type: str = "EpochBasedRunner",
    persistent_workers: bool = False,
    class_aware_sampler: Optional[Dict[str, Any]] = None,
    *,
    drop_last: bool = False,
    pin_memory: Optional[bool] = None,
    size_aware: bool = False,
    **kwargs: Any,
) -> DataLoader:
    """Build the DataLoader of one process for single-process or distributed training.

    Takes the arguments of mmdet 2.x's ``build_dataloader`` in the same order and
    with the same meaning, except that ``dist`` defaults to ``False`` (mmdet:
    ``True``; mmdet's own callers always pass it).

    * Batch size and workers: ``samples_per_gpu`` and ``workers_per_gpu`` with
      ``dist``; times ``num_gpus`` without (one loader feeds ``MMDataParallel``).
    * Batches: with shuffle and groups, ``DistributedGroupSampler`` (``dist``)
      or ``GroupSampler``; else ``DistributedSampler`` (one replica without
      ``dist``). ``runner_type="IterBasedRunner"``: ``InfiniteGroupBatchSampler``
      with shuffle, else ``InfiniteBatchSampler``.

    "Groups" means the dataset has ``flag`` or ``img_sizes`` (see
    :mod:`mmpar.data.samplers`). A group sampler goes in ``loader.batch_sampler``
    in its batch form: every sample once per epoch on one process (the last
    batch of each group may be short; ``drop_last`` drops those), every batch
    one group. A plain sampler goes in ``loader.sampler``. Without ``shuffle``
    the order is sequential.

    With ``runner_type="IterBasedRunner"`` (mmcv's ``IterBasedRunner`` and its
    ``IterLoader``) the batch sampler never runs out: a new order (seeded,
    rank-sharded, one group per batch when shuffling) on every pass over the
    data, every batch full; ``len(loader)`` is one pass. Any other runner name
    gives the epoch loader above, as in mmdet.

    New order per epoch: call :func:`set_loader_epoch`, ``set_epoch`` on
    ``loader.sampler`` or on ``loader.batch_sampler`` (or its ``.sampler``).
    With a batch sampler the loader is a
    :class:`~mmpar.data.batch_sampler_loader.BatchSamplerLoader`, whose
    ``loader.sampler`` is ``loader.batch_sampler.sampler``, so mmcv's
    ``DistSamplerSeedHook`` and ``IterLoader`` reach the epoch too.

    Batches are collated by :func:`mmpar.collate.collate` in chunks of
    ``samples_per_gpu``; workers are seeded by :func:`seed_worker` (see the
    module docstring), whichever path set the epoch.

    Args:
        dataset: Map-style dataset.
        samples_per_gpu: Samples per GPU in a batch, >= 1.
        workers_per_gpu: Loader worker processes per GPU, >= 0.
        num_gpus: GPUs driven by this process (``MMDataParallel``); ignored with
            ``dist``.
        dist: One process per GPU in a process group.
        shuffle: Draw a new random order every epoch.
        seed: Seed of orders and workers; ``None`` takes rank 0's random seed.
        runner_type: Name of the runner that reads the loader;
            ``"IterBasedRunner"`` selects the endless batch samplers.
        persistent_workers: Passed to ``DataLoader``; turned off with a
            ``UserWarning`` when there are no workers.
        class_aware_sampler: mmdet's ``ClassAwareSampler`` config. Only
            ``None`` is accepted: mmpar has no class-aware sampler.
        drop_last: Drop short batches instead of yielding them. With
            ``DistributedGroupSampler`` and the endless samplers every batch
            is full, so nothing is dropped.
        pin_memory: Passed to ``DataLoader``; ``None`` (the default) pins when
            CUDA is available, so that host-to-GPU copies run at full speed and
            asynchronously (unpinned float32 batches cost up to 9x the input
            throughput on a GPU, see docs/benchmarks.md).
        size_aware: Batch images of similar shape together (group samplers only).
        **kwargs: Other ``DataLoader`` arguments (e.g. ``collate_fn`` to
            override, a ``worker_init_fn`` that runs after the seeding,
            ``generator``, ``timeout``, ``prefetch_factor``).

    Returns:
        The ``DataLoader``.

    Raises:
        TypeError: non-int sizes; a ``runner_type`` that is not a str;
            ``kwargs`` holding an argument that build_dataloader sets itself
            (batch_size, shuffle, sampler, batch_sampler, num_workers) or one
            that is neither mmdet's, mmpar's nor ``DataLoader``'s.
        ValueError: ``samples_per_gpu`` or ``num_gpus`` < 1, ``workers_per_gpu`` < 0,
            a ``class_aware_sampler`` other than ``None``, an empty dataset
            with ``IterBasedRunner``, or a dataset whose ``flag`` /
            ``img_sizes`` do not match it.
    """
    samples_per_gpu = check_positive_int(samples_per_gpu, "samples_per_gpu", "build_dataloader")
    num_gpus = check_positive_int(num_gpus, "num_gpus", "build_dataloader")
    _check_arguments(workers_per_gpu, runner_type, class_aware_sampler, kwargs)
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    rank, world_size = get_dist_info() if dist else (0, 1)
    gpus = 1 if dist else num_gpus
    num_workers = workers_per_gpu * gpus
    if persistent_workers and num_workers == 0:
        warnings.warn(
            "build_dataloader: persistent_workers=True needs worker processes, but workers_per_gpu=0; "
            "turning persistent_workers off",
            UserWarning,
            stacklevel=2,
        )
        persistent_workers = False
    seed = sync_random_seed(seed)
    grouped = shuffle and _has_groups(dataset)
    if size_aware and not grouped:
        why = "shuffle=False" if not shuffle else "the dataset has neither flag nor img_sizes"
        warnings.warn(f"build_dataloader: size_aware=True has no effect ({why})", UserWarning, stacklevel=2)
    elif size_aware and getattr(dataset, "img_sizes", None) is None:
        warnings.warn(
            "build_dataloader: size_aware=True but the dataset has no img_sizes; grouping by flag only",
            UserWarning,
            stacklevel=2,
        )

    batch_size = samples_per_gpu * gpus
    if runner_type == "IterBasedRunner" and shuffle:
        sampler: Any = InfiniteGroupBatchSampler(
            dataset, batch_size, world_size, rank, seed=seed, size_aware=size_aware
        )
    elif runner_type == "IterBasedRunner":
        sampler = InfiniteBatchSampler(dataset, batch_size, world_size, rank, seed=seed, shuffle=False)
    elif grouped and dist:
        sampler = DistributedGroupSampler(
            dataset, samples_per_gpu, world_size, rank, seed=seed, size_aware=size_aware, batch_sampler=True
        )
    elif grouped:
        sampler = GroupSampler(
            dataset, samples_per_gpu, num_gpus, seed=seed, size_aware=size_aware,
            batch_sampler=True, drop_last=drop_last,
        )
    else:
        sampler = DistributedSampler(dataset, world_size, rank, shuffle=shuffle, seed=seed)

    epoch = _EpochCounter()
    sampler.add_epoch_hook(epoch)
    init_fn = functools.partial(
        seed_worker, seed=seed, rank=rank, epoch=epoch, user_init_fn=kwargs.pop("worker_init_fn", None)
    )
    kwargs.setdefault("collate_fn", functools.partial(collate, samples_per_gpu=samples_per_gpu))
    # Torch draws each epoch's base worker seed from this generator; a private one
    # leaves the global RNG alone (seed_worker then reseeds every worker anyway).
    kwargs.setdefault("generator", torch.Generator().manual_seed(seed % (1 << 63)))
    kwargs.update(
        num_workers=num_workers, pin_memory=pin_memory, persistent_workers=persistent_workers, worker_init_fn=init_fn
    )
    if isinstance(sampler, DistributedSampler):
        return DataLoader(dataset, sampler=sampler, batch_size=batch_size, drop_last=drop_last, **kwargs)
    return BatchSamplerLoader(dataset, batch_sampler=sampler, **kwargs)
