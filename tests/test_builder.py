"""build_dataloader: sampler choice, collate, and worker seeding with real workers."""

from __future__ import annotations

import functools
import random
import warnings
from typing import Dict, List, Tuple

import numpy as np
import pytest
import torch
from torch.utils.data import SequentialSampler, get_worker_info

from mmpar.data import build_dataloader, seed_worker, set_loader_epoch
from mmpar.data.samplers import DistributedGroupSampler, DistributedSampler, GroupSampler
from mmpar.data.worker_seeds import EpochCounter
from mmpar.data_container import DataContainer
from tests._datasets import FlaggedDataset
from tests._dist_helpers import run_workers


class RandomDraws(FlaggedDataset):
    """Each sample: an image container, its index, the worker and random draws made there."""

    def __getitem__(self, i: int) -> dict:
        info = get_worker_info()
        draws = [random.random(), float(np.random.rand()), float(torch.rand(()))]
        return {
            "img": DataContainer(torch.full((3, 4 + i % 3, 5), float(i)), stack=True),
            "idx": i,
            "worker": -1 if info is None else info.id,
            "draws": torch.tensor(draws, dtype=torch.float64),
        }


Epoch = Dict[int, Tuple[int, Tuple[float, ...]]]  # sample index -> (worker, draws)


def _run_epoch(loader, epoch: int, repeats_allowed: bool = False) -> Epoch:
    """Sample index -> (worker, draws); a distributed epoch may repeat samples to even out ranks."""
    set_loader_epoch(loader, epoch)
    out: Epoch = {}
    for batch in loader:
        for idx, worker, draws in zip(
            batch["idx"].tolist(), batch["worker"].tolist(), batch["draws"].tolist()
        ):
            assert repeats_allowed or idx not in out
            out.setdefault(idx, (worker, tuple(draws)))
    return out


def _first_draws_per_worker(epoch: Epoch) -> Dict[int, Tuple[float, ...]]:
    firsts: Dict[int, Tuple[float, ...]] = {}
    for idx in sorted(epoch):
        worker, draws = epoch[idx]
        firsts.setdefault(worker, draws)
    return firsts


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_streams_differ_by_worker_and_epoch_and_repeat_for_seed(persistent):
    ds = RandomDraws(16, flag=[0, 1] * 8)

    def epochs(seed: int) -> List[Epoch]:
        loader = build_dataloader(ds, 2, 2, seed=seed, persistent_workers=persistent)
        return [_run_epoch(loader, e) for e in range(2)]

    first, again, other = epochs(5), epochs(5), epochs(6)
    assert first == again  # same seed: same order, same workers, same draws
    for epoch in first:
        assert sorted(epoch) == list(range(16))
        assert {w for w, _ in epoch.values()} == {0, 1}
        draws = [d for _, d in epoch.values()]
        assert len(set(draws)) == len(draws)  # no two samples drew the same numbers
        w0, w1 = _first_draws_per_worker(epoch).values()
        assert all(a != b for a, b in zip(w0, w1))  # random, numpy and torch all differ
    all_draws = lambda e: {d for _, d in e.values()}  # noqa: E731
    assert not all_draws(first[0]) & all_draws(first[1])  # epochs differ
    assert not all_draws(first[0]) & all_draws(other[0])  # seeds differ


def test_seed_worker_separates_ranks_and_epochs():
    def state(seed: int, rank: int, epoch: int, worker: int) -> Tuple[float, float, float]:
        counter = EpochCounter()
        counter(epoch)
        seed_worker(worker, seed, rank, counter)
        return random.random(), float(np.random.rand()), float(torch.rand(()))

    keys = [(0, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), (1, 0, 0, 0)]
    values = [state(*k) for k in keys]
    assert len({v for vs in values for v in vs}) == 3 * len(keys)
    assert state(0, 1, 0, 0) == values[1]


def test_user_worker_init_fn_runs_after_seeding():
    calls = []
    init = functools.partial(
        seed_worker, seed=1, rank=0, epoch=EpochCounter(), user_init_fn=calls.append
    )
    init(3)
    assert calls == [3]


def test_group_dataset_gets_group_batch_sampler_and_collated_chunks():
    ds = RandomDraws(10, flag=[0] * 7 + [1] * 3)
    loader = build_dataloader(ds, samples_per_gpu=2, workers_per_gpu=0, num_gpus=2, seed=0)
    assert isinstance(loader.batch_sampler, GroupSampler) and loader.batch_sampler.batch_size == 4
    sizes = []
    for batch in loader:
        img = batch["img"]
        assert isinstance(img, DataContainer) and img.stack
        assert [c.shape[0] for c in img.data] == [
            len(c) for c in np.array_split(batch["idx"], len(img.data))
        ]
        sizes.append(len(batch["idx"]))
        assert len({int(ds.flag[i]) for i in batch["idx"]}) == 1
    assert sorted(sizes) == [3, 3, 4]  # group 0: 4 + 3, group 1: 3; every sample once


def test_set_epoch_on_batch_sampler_changes_order():
    ds = RandomDraws(12, flag=[0, 1] * 6)
    loader = build_dataloader(ds, 2, 0, seed=3)
    order = lambda: [i for b in loader for i in b["idx"].tolist()]  # noqa: E731
    first = order()
    loader.batch_sampler.set_epoch(1)
    assert order() != first and sorted(order()) == sorted(first)


def test_plain_dataset_gets_sampler_with_set_epoch():
    ds = RandomDraws(12)
    loader = build_dataloader(ds, 3, 0, num_gpus=2, seed=3)
    assert isinstance(loader.sampler, DistributedSampler) and loader.batch_size == 6
    first = [i for b in loader for i in b["idx"].tolist()]
    loader.sampler.set_epoch(1)
    second = [i for b in loader for i in b["idx"].tolist()]
    assert first != second and sorted(first) == sorted(second) == list(range(12))


def test_no_shuffle_is_sequential():
    for ds in (RandomDraws(7), RandomDraws(7, flag=[0, 1, 0, 1, 0, 1, 0])):
        loader = build_dataloader(ds, 2, 0, shuffle=False, seed=0)
        assert [i for b in loader for i in b["idx"].tolist()] == list(range(7))


def test_dist_without_group_uses_distributed_group_sampler():
    ds = RandomDraws(9, flag=[0] * 5 + [1] * 4)
    loader = build_dataloader(ds, 2, 0, dist=True, seed=0)
    assert isinstance(loader.batch_sampler, DistributedGroupSampler)
    assert all(len(b["idx"]) == 2 for b in loader)


def test_persistent_workers_without_workers_warns_and_turns_off():
    with pytest.warns(UserWarning, match="persistent_workers=True needs worker processes"):
        loader = build_dataloader(RandomDraws(4), 2, 0, seed=0, persistent_workers=True)
    assert loader.persistent_workers is False
    assert len(list(loader)) == 2


def test_size_aware_without_effect_warns():
    with pytest.warns(UserWarning, match="size_aware=True has no effect"):
        build_dataloader(RandomDraws(4), 2, 0, seed=0, size_aware=True)
    with pytest.warns(UserWarning, match="no img_sizes"):
        build_dataloader(RandomDraws(4, flag=[0, 1, 0, 1]), 2, 0, seed=0, size_aware=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_dataloader(RandomDraws(4, flag=[0, 1, 0, 1]), 2, 0, seed=0)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(samples_per_gpu=0, workers_per_gpu=0), ValueError, "samples_per_gpu must be >= 1"),
        (
            dict(samples_per_gpu=1, workers_per_gpu=-1),
            ValueError,
            "workers_per_gpu must be >= 0, got -1",
        ),
        (dict(samples_per_gpu=1, workers_per_gpu=1.0), TypeError, "workers_per_gpu must be an int"),
        (
            dict(samples_per_gpu=1, workers_per_gpu=0, num_gpus=0),
            ValueError,
            "num_gpus must be >= 1",
        ),
        (
            dict(samples_per_gpu=1, workers_per_gpu=0, batch_size=4),
            TypeError,
            "batch_size are derived",
        ),
        (
            dict(samples_per_gpu=1, workers_per_gpu=0, sampler=SequentialSampler(range(4))),
            TypeError,
            "sampler",
        ),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        build_dataloader(RandomDraws(4), **kwargs)


def test_set_loader_epoch_needs_an_epoch_aware_sampler():
    loader = torch.utils.data.DataLoader(range(4))
    with pytest.raises(TypeError, match="has set_epoch"):
        set_loader_epoch(loader, 1)


def _dist_loader_epoch(rank: int, world_size: int) -> list:
    ds = RandomDraws(11, flag=[0] * 6 + [1] * 5)
    loader = build_dataloader(ds, 2, 1, dist=True)  # seed None: broadcast from rank 0
    epoch = _run_epoch(loader, 0, repeats_allowed=True)
    return [loader.batch_sampler.seed, len(loader), sorted(epoch), [d for _, d in epoch.values()]]


@pytest.mark.slow
def test_dist_loaders_over_gloo_share_seed_and_split_work():
    (seed0, n0, idx0, draws0), (seed1, n1, idx1, draws1) = run_workers(
        _dist_loader_epoch, 2, timeout=120
    )
    assert seed0 == seed1 and n0 == n1 == 3
    assert set(idx0) | set(idx1) == set(range(11))
    assert not set(draws0) & set(draws1)  # worker streams differ between ranks
