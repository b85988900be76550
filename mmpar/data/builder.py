"""build_dataloader: a DataLoader with the right sampler, collate and worker seeds.

Workers are seeded by :mod:`mmpar.data.worker_seeds`; datasets are built from
configs by :func:`build_dataset`.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Dict, Mapping, Optional

import torch
from torch.utils.data import DataLoader

from mmpar.collate import collate
from mmpar.data.batch_sampler_loader import BatchSamplerLoader
from mmpar.data.samplers import (
    DistributedGroupSampler,
    DistributedSampler,
    GroupSampler,
    InfiniteBatchSampler,
    InfiniteGroupBatchSampler,
)
from mmpar.data.worker_seeds import EpochCounter, seed_worker
from mmpar.dist import get_dist_info, sync_random_seed
from mmpar.registry import DATASETS, check_build_cfg
from mmpar.utils.checks import check_positive_int, is_int

__all__ = ["build_dataloader", "build_dataset"]

#: DataLoader arguments that build_dataloader derives itself.
_RESERVED = ("batch_size", "shuffle", "sampler", "batch_sampler", "num_workers")
#: Keyword arguments of DataLoader that build_dataloader passes on from kwargs.
_LOADER_ARGS = frozenset(inspect.signature(DataLoader.__init__).parameters) - {
    "self",
    "dataset",
    *_RESERVED,
}


def build_dataset(cfg: Mapping[str, Any], **default_args: Any) -> Any:
    """Build a dataset from ``cfg`` with :data:`mmpar.registry.DATASETS`.

    Importing :mod:`mmpar.data` registers the built-in datasets
    (``SyntheticShapes``, ``CocoDetection``) and transforms.

    Args:
        cfg: e.g. ``dict(type="SyntheticShapes", num_samples=256)``.
        **default_args: Used where ``cfg`` has no such key (e.g. ``test_mode=True``).

    Raises:
        TypeError: ``cfg`` is not a dict.
        KeyError: ``cfg`` has no ``type`` or names an unregistered dataset.
    """
    return DATASETS.build(check_build_cfg(cfg, "dataset"), **default_args)


def _has_groups(dataset: Any) -> bool:
    return (
        getattr(dataset, "flag", None) is not None
        or getattr(dataset, "img_sizes", None) is not None
    )


def _check_arguments(
    workers_per_gpu: Any, runner_type: Any, class_aware_sampler: Any, kwargs: Dict[str, Any]
) -> None:
    """Refuse what build_dataloader cannot take; see its ``Raises`` section."""
    if not is_int(workers_per_gpu):
        raise TypeError(
            "build_dataloader: workers_per_gpu must be an int, got "
            f"{type(workers_per_gpu).__name__}"
        )
    if workers_per_gpu < 0:
        raise ValueError(f"build_dataloader: workers_per_gpu must be >= 0, got {workers_per_gpu}")
    if not isinstance(runner_type, str):
        raise TypeError(
            "build_dataloader: runner_type must be a runner name (str) such as 'EpochBasedRunner' "
            f"or 'IterBasedRunner', got {type(runner_type).__name__} {runner_type!r}"
        )
    if class_aware_sampler is not None:
        raise ValueError(
            "build_dataloader: class_aware_sampler is not supported (mmpar has no "
            f"ClassAwareSampler); expected None, got {class_aware_sampler!r}"
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
            "expected mmdet's build_dataloader arguments, mmpar's (drop_last, pin_memory, "
            "size_aware) or DataLoader arguments"
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
            asynchronously (on one H200, a ResNet-50 step fed float32 detection
            batches reached 0.82 of its ideal pinned and 0.68 unpinned, see
            docs/benchmarks.md). A batch collated by :func:`mmpar.collate` is
            one buffer, pinned in one copy.
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
            "build_dataloader: persistent_workers=True needs worker processes, but "
            "workers_per_gpu=0; turning persistent_workers off",
            UserWarning,
            stacklevel=2,
        )
        persistent_workers = False
    seed = sync_random_seed(seed)
    grouped = shuffle and _has_groups(dataset)
    if size_aware and not grouped:
        why = "shuffle=False" if not shuffle else "the dataset has neither flag nor img_sizes"
        warnings.warn(
            f"build_dataloader: size_aware=True has no effect ({why})", UserWarning, stacklevel=2
        )
    elif size_aware and getattr(dataset, "img_sizes", None) is None:
        warnings.warn(
            "build_dataloader: size_aware=True but the dataset has no img_sizes; grouping by flag "
            "only",
            UserWarning,
            stacklevel=2,
        )

    batch_size = samples_per_gpu * gpus
    if runner_type == "IterBasedRunner" and shuffle:
        sampler: Any = InfiniteGroupBatchSampler(
            dataset, batch_size, world_size, rank, seed=seed, size_aware=size_aware
        )
    elif runner_type == "IterBasedRunner":
        sampler = InfiniteBatchSampler(
            dataset, batch_size, world_size, rank, seed=seed, shuffle=False
        )
    elif grouped and dist:
        sampler = DistributedGroupSampler(
            dataset,
            samples_per_gpu,
            world_size,
            rank,
            seed=seed,
            size_aware=size_aware,
            batch_sampler=True,
        )
    elif grouped:
        sampler = GroupSampler(
            dataset,
            samples_per_gpu,
            num_gpus,
            seed=seed,
            size_aware=size_aware,
            batch_sampler=True,
            drop_last=drop_last,
        )
    else:
        sampler = DistributedSampler(dataset, world_size, rank, shuffle=shuffle, seed=seed)

    epoch = EpochCounter()
    sampler.add_epoch_hook(epoch)
    init_fn = functools.partial(
        seed_worker,
        seed=seed,
        rank=rank,
        epoch=epoch,
        user_init_fn=kwargs.pop("worker_init_fn", None),
    )
    kwargs.setdefault("collate_fn", functools.partial(collate, samples_per_gpu=samples_per_gpu))
    # Torch draws each epoch's base worker seed from this generator; a private one
    # leaves the global RNG alone (seed_worker then reseeds every worker anyway).
    kwargs.setdefault("generator", torch.Generator().manual_seed(seed % (1 << 63)))
    kwargs.update(
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers,
        worker_init_fn=init_fn,
    )
    if isinstance(sampler, DistributedSampler):
        return DataLoader(
            dataset, sampler=sampler, batch_size=batch_size, drop_last=drop_last, **kwargs
        )
    return BatchSamplerLoader(dataset, batch_sampler=sampler, **kwargs)
