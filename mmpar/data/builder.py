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
streams a run that reached epoch ``e`` had.
"""
from __future__ import annotations

import functools
import random
import warnings
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader

from mmpar.collate import collate
from mmpar.dist_utils import get_dist_info, sync_random_seed

from .samplers import DistributedGroupSampler, DistributedSampler, GroupSampler
from .samplers._epoch import check_positive_int

__all__ = ["build_dataloader", "seed_worker", "set_loader_epoch"]

#: DataLoader arguments that build_dataloader derives itself.
_RESERVED = ("batch_size", "shuffle", "sampler", "batch_sampler", "num_workers")


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
    otherwise; this finds it. Call it before each epoch.

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


def build_dataloader(
    dataset: Any,
    samples_per_gpu: int,
    workers_per_gpu: int,
    num_gpus: int = 1,
    dist: bool = False,
    shuffle: bool = True,
    seed: Optional[int] = None,
    drop_last: bool = False,
    pin_memory: Optional[bool] = None,
    persistent_workers: bool = False,
    size_aware: bool = False,
    **kwargs: Any,
) -> DataLoader:
    """Build the DataLoader of one process for single-process or distributed training.

    ==============  ========================================  ===========================
    mode            batch size / workers                      sampler
    ==============  ========================================  ===========================
    ``dist``        ``samples_per_gpu`` / ``workers_per_gpu``  shuffle and groups:
                                                               ``DistributedGroupSampler``
                                                               else ``DistributedSampler``
    not ``dist``    ``samples_per_gpu * num_gpus`` /           shuffle and groups:
                    ``workers_per_gpu * num_gpus``             ``GroupSampler``, else
                                                               ``DistributedSampler``
                                                               with one replica
    ==============  ========================================  ===========================

    "Groups" means the dataset has ``flag`` or ``img_sizes`` (see
    :mod:`mmpar.data.samplers`). A group sampler goes in ``loader.batch_sampler``
    in its batch form: every sample once per epoch on one process (the last
    batch of each group may be short; ``drop_last`` drops those), every batch
    one group. A plain sampler goes in ``loader.sampler``. Without ``shuffle``
    the order is sequential. Either way call :func:`set_loader_epoch` (or
    ``set_epoch`` on the sampler) before each epoch to get a new order.

    Batches are collated by :func:`mmpar.collate.collate` in chunks of
    ``samples_per_gpu``; workers are seeded by :func:`seed_worker` (see the
    module docstring).

    Args:
        dataset: Map-style dataset.
        samples_per_gpu: Samples per GPU in a batch, >= 1.
        workers_per_gpu: Loader worker processes per GPU, >= 0.
        num_gpus: GPUs driven by this process (``MMDataParallel``); ignored with
            ``dist``.
        dist: One process per GPU in a process group.
        shuffle: Draw a new random order every epoch.
        seed: Seed of orders and workers; ``None`` takes rank 0's random seed.
        drop_last: Drop short batches instead of yielding them. With
            ``DistributedGroupSampler`` every batch is full, so nothing is dropped.
        pin_memory: Passed to ``DataLoader``; ``None`` (the default) pins when
            CUDA is available, so that host-to-GPU copies run at full speed and
            asynchronously (unpinned float32 batches cost up to 9x the input
            throughput on a GPU, see docs/benchmarks.md).
        persistent_workers: Passed to ``DataLoader``; turned off with a
            ``UserWarning`` when there are no workers.
        size_aware: Batch images of similar shape together (group samplers only).
        **kwargs: Passed to ``DataLoader`` (e.g. ``collate_fn`` to override, a
            ``worker_init_fn`` that runs after the seeding, ``generator``).

    Returns:
        The ``DataLoader``.

    Raises:
        TypeError: non-int sizes, or ``kwargs`` holding an argument that
            build_dataloader sets itself (batch_size, shuffle, sampler,
            batch_sampler, num_workers).
        ValueError: ``samples_per_gpu`` or ``num_gpus`` < 1, ``workers_per_gpu`` < 0,
            or a dataset whose ``flag`` / ``img_sizes`` do not match it.
    """
    samples_per_gpu = check_positive_int(samples_per_gpu, "samples_per_gpu", "build_dataloader")
    num_gpus = check_positive_int(num_gpus, "num_gpus", "build_dataloader")
    if isinstance(workers_per_gpu, bool) or not isinstance(workers_per_gpu, int):
        raise TypeError(
            f"build_dataloader: workers_per_gpu must be an int, got {type(workers_per_gpu).__name__}"
        )
    if workers_per_gpu < 0:
        raise ValueError(f"build_dataloader: workers_per_gpu must be >= 0, got {workers_per_gpu}")
    reserved = [k for k in _RESERVED if k in kwargs]
    if reserved:
        raise TypeError(
            f"build_dataloader: {', '.join(reserved)} are derived from samples_per_gpu, "
            "workers_per_gpu, num_gpus, dist and shuffle; do not pass them in kwargs"
        )
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

    loader_args: dict = {}
    if grouped and dist:
        sampler: Any = DistributedGroupSampler(
            dataset, samples_per_gpu, world_size, rank, seed=seed, size_aware=size_aware, batch_sampler=True
        )
        loader_args["batch_sampler"] = sampler
    elif grouped:
        sampler = GroupSampler(
            dataset, samples_per_gpu, num_gpus, seed=seed, size_aware=size_aware,
            batch_sampler=True, drop_last=drop_last,
        )
        loader_args["batch_sampler"] = sampler
    else:
        sampler = DistributedSampler(dataset, world_size, rank, shuffle=shuffle, seed=seed)
        loader_args.update(sampler=sampler, batch_size=samples_per_gpu * gpus, drop_last=drop_last)

    epoch = _EpochCounter()
    sampler.add_epoch_hook(epoch)
    init_fn = functools.partial(
        seed_worker, seed=seed, rank=rank, epoch=epoch, user_init_fn=kwargs.pop("worker_init_fn", None)
    )
    kwargs.setdefault("collate_fn", functools.partial(collate, samples_per_gpu=samples_per_gpu))
    # Torch draws each epoch's base worker seed from this generator; a private one
    # leaves the global RNG alone (seed_worker then reseeds every worker anyway).
    kwargs.setdefault("generator", torch.Generator().manual_seed(seed % (1 << 63)))
    return DataLoader(
        dataset,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers,
        worker_init_fn=init_fn,
        **loader_args,
        **kwargs,
    )
