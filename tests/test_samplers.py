"""Samplers: coverage, one group per batch, equal work per rank, determinism."""

from __future__ import annotations

from collections import Counter
from typing import List, Optional, Sequence

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpar.data.padding_stats import PaddingStats, padding_counts
from mmpar.data.samplers import DistributedGroupSampler, DistributedSampler, GroupSampler
from tests._datasets import Flagged
from tests._dist_helpers import run_workers

SETTINGS = settings(max_examples=50, deadline=None)


flags = st.lists(st.integers(0, 3), min_size=1, max_size=60)
world_sizes = st.integers(1, 4)
per_gpu = st.integers(1, 5)


def _one_group(batch: Sequence[int], flag: np.ndarray) -> bool:
    return len({int(flag[i]) for i in batch}) == 1


def _rank_batches(
    dataset, samples_per_gpu: int, world: int, seed: int = 3, epoch: int = 0, **kw
) -> List[List[List[int]]]:
    out = []
    for rank in range(world):
        s = DistributedGroupSampler(
            dataset, samples_per_gpu, world, rank, seed=seed, batch_sampler=True, **kw
        )
        s.set_epoch(epoch)
        batches = list(s)
        assert len(batches) == len(s)
        out.append(batches)
    return out


# --- GroupSampler -----------------------------------------------------------


@SETTINGS
@given(flag=flags, samples_per_gpu=per_gpu, num_gpus=st.integers(1, 3), size_aware=st.booleans())
def test_group_batch_sampler_every_sample_once(flag, samples_per_gpu, num_gpus, size_aware):
    sizes = np.random.default_rng(len(flag)).integers(100, 1000, size=(len(flag), 2))
    ds = Flagged(flag, sizes)
    sampler = GroupSampler(
        ds, samples_per_gpu, num_gpus, seed=0, size_aware=size_aware, batch_sampler=True
    )
    batches = list(sampler)
    batch_size = samples_per_gpu * num_gpus
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(flag)))
    assert all(_one_group(b, ds.flag) and 1 <= len(b) <= batch_size for b in batches)
    short = Counter(int(ds.flag[b[0]]) for b in batches if len(b) < batch_size)
    assert all(count == 1 for count in short.values())  # only a group's last batch is short


@SETTINGS
@given(flag=flags, samples_per_gpu=per_gpu, num_gpus=st.integers(1, 3))
def test_group_index_sampler_keeps_batches_aligned(flag, samples_per_gpu, num_gpus):
    ds = Flagged(flag)
    sampler = GroupSampler(ds, samples_per_gpu, num_gpus, seed=1)
    indices = list(sampler)
    batch_size = samples_per_gpu * num_gpus
    assert len(indices) == len(sampler) and len(indices) % batch_size == 0
    runs = [indices[s : s + batch_size] for s in range(0, len(indices), batch_size)]
    assert all(_one_group(r, ds.flag) for r in runs)
    assert set(indices) == set(range(len(flag)))
    counts = Counter(int(f) for f in ds.flag)
    for group, n in counts.items():
        in_group = [i for i in indices if ds.flag[i] == group]
        assert len(in_group) == -(-n // batch_size) * batch_size
        if n >= batch_size:  # the completion reuses other samples of the group, each once
            assert max(Counter(in_group).values()) <= 2


def test_group_index_sampler_matches_batch_form_order():
    ds = Flagged([0, 1] * 7 + [1])
    plain = list(GroupSampler(ds, 3, seed=5, batch_sampler=True))
    aligned = list(GroupSampler(ds, 3, seed=5))
    runs = [aligned[s : s + 3] for s in range(0, len(aligned), 3)]
    assert [r[: len(b)] for r, b in zip(runs, plain)] == plain


def test_group_sampler_chunks_pure_with_many_gpus():
    ds = Flagged([0] * 10 + [1] * 7)
    batches = list(GroupSampler(ds, samples_per_gpu=2, num_gpus=3, seed=0, batch_sampler=True))
    assert sorted(len(b) for b in batches) == [1, 4, 6, 6]
    assert all(_one_group(b, ds.flag) for b in batches)


def test_group_sampler_drop_last_drops_only_short_batches():
    ds = Flagged([0] * 10 + [1] * 7)
    sampler = GroupSampler(ds, 4, seed=0, batch_sampler=True, drop_last=True)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 3 and all(len(b) == 4 for b in batches)


def test_group_sampler_without_flag_uses_orientation_of_sizes():
    sizes = [(600, 800), (800, 600), (500, 900), (900, 500), (700, 700)]
    sampler = GroupSampler(Flagged(img_sizes=sizes), 2, seed=0, batch_sampler=True, shuffle=False)
    assert list(sampler) == [[1, 3], [4], [0, 2]]


def test_group_sampler_without_flag_or_sizes_is_one_group():
    sampler = GroupSampler(Flagged(n=7), 3, seed=0, batch_sampler=True, shuffle=False)
    assert list(sampler) == [[0, 1, 2], [3, 4, 5], [6]]


def test_tiny_dataset_smaller_than_one_batch():
    ds = Flagged([1, 0])
    assert sorted(map(sorted, GroupSampler(ds, 5, 2, seed=0, batch_sampler=True))) == [[0], [1]]
    indices = list(GroupSampler(ds, 5, 2, seed=0))
    assert len(indices) == 20 and Counter(indices) == {0: 10, 1: 10}
    per_rank = _rank_batches(ds, 5, 4)
    assert all(len(b) == 1 and len(b[0]) == 5 and _one_group(b[0], ds.flag) for b in per_rank)
    assert {i for b in per_rank for batch in b for i in batch} == {0, 1}


def test_empty_dataset_yields_nothing():
    ds = Flagged([])
    assert list(GroupSampler(ds, 2, seed=0)) == [] and len(GroupSampler(ds, 2, seed=0)) == 0
    sampler = DistributedGroupSampler(ds, 2, 2, 1, seed=0)
    assert list(sampler) == [] and len(sampler) == 0


# --- DistributedGroupSampler --------------------------------------------------


@SETTINGS
@given(
    flag=flags,
    samples_per_gpu=per_gpu,
    world=world_sizes,
    size_aware=st.booleans(),
    epoch=st.integers(0, 3),
)
def test_distributed_group_sampler_over_ranks(flag, samples_per_gpu, world, size_aware, epoch):
    sizes = np.random.default_rng(7).integers(100, 1000, size=(len(flag), 2))
    ds = Flagged(flag, sizes)
    per_rank = _rank_batches(ds, samples_per_gpu, world, epoch=epoch, size_aware=size_aware)
    assert len({len(b) for b in per_rank}) == 1  # DDP: the same number of steps on every rank
    every = [batch for batches in per_rank for batch in batches]
    assert all(len(b) == samples_per_gpu and _one_group(b, ds.flag) for b in every)
    assert {i for b in every for i in b} == set(range(len(flag)))
    groups = Counter(int(f) for f in flag)
    needed = sum(-(-n // samples_per_gpu) for n in groups.values())
    assert len(per_rank[0]) == -(-needed // world)
    if world == 1:  # one process: batches repeat only to complete a group's last batch
        assert len(every) == needed


@SETTINGS
@given(flag=flags, samples_per_gpu=per_gpu, world=world_sizes)
def test_distributed_group_index_form_flattens_batches(flag, samples_per_gpu, world):
    ds = Flagged(flag)
    for rank in range(world):
        as_batches = DistributedGroupSampler(
            ds, samples_per_gpu, world, rank, seed=9, batch_sampler=True
        )
        as_indices = DistributedGroupSampler(ds, samples_per_gpu, world, rank, seed=9)
        indices = list(as_indices)
        assert len(indices) == len(as_indices) == len(as_batches) * samples_per_gpu
        assert indices == [i for b in as_batches for i in b]


def test_distributed_group_sampler_one_process_every_sample_once_when_groups_divide():
    ds = Flagged([0] * 6 + [1] * 9)
    (batches,) = _rank_batches(ds, 3, 1)
    assert sorted(i for b in batches for i in b) == list(range(15))


def test_distributed_group_sampler_repeats_documented_batches():
    ds = Flagged([0] * 5)  # batches of 2: [a, b], [c, d], [e] + one preceding sample
    plan = DistributedGroupSampler(ds, 2, 1, 0, seed=4, batch_sampler=True, shuffle=False)
    assert list(plan) == [[0, 1], [2, 3], [4, 3]]
    per_rank = _rank_batches(ds, 2, 2, shuffle=False)
    assert per_rank == [[[0, 1], [4, 3]], [[2, 3], [0, 1]]]  # the first batch is appended again


# --- DistributedSampler -------------------------------------------------------


@SETTINGS
@given(n=st.integers(0, 50), world=world_sizes, shuffle=st.booleans(), drop_last=st.booleans())
def test_distributed_sampler_splits_evenly(n, world, shuffle, drop_last):
    ds = Flagged(n=n)
    parts = [
        list(DistributedSampler(ds, world, r, shuffle=shuffle, seed=2, drop_last=drop_last))
        for r in range(world)
    ]
    lengths = {len(p) for p in parts}
    assert len(lengths) == 1
    assert lengths.pop() == len(DistributedSampler(ds, world, 0, seed=2, drop_last=drop_last))
    seen = [i for p in parts for i in p]
    if drop_last:
        assert len(set(seen)) == len(seen) == n - n % world
    else:
        assert set(seen) == set(range(n)) and len(seen) == -(-n // world) * world
    if world == 1:
        assert sorted(seen) == list(range(n))
        if not shuffle:
            assert seen == list(range(n))


# --- determinism ----------------------------------------------------------------


def _all_orders(seed: int, epoch: int) -> list:
    rng = np.random.default_rng(0)
    ds = Flagged(rng.integers(0, 2, 200), rng.integers(100, 1000, size=(200, 2)))
    samplers = [
        GroupSampler(ds, 4, seed=seed, batch_sampler=True),
        GroupSampler(ds, 2, 2, seed=seed, size_aware=True),
        DistributedGroupSampler(ds, 3, 2, 1, seed=seed),
        DistributedGroupSampler(ds, 3, 3, 0, seed=seed, size_aware=True, batch_sampler=True),
        DistributedSampler(ds, 2, 0, seed=seed),
    ]
    for s in samplers:
        s.set_epoch(epoch)
    return [list(s) for s in samplers]


def test_same_seed_and_epoch_repeat_exactly():
    assert _all_orders(11, 3) == _all_orders(11, 3)


def test_other_epoch_or_seed_changes_every_order():
    base = _all_orders(11, 3)
    for other in (_all_orders(11, 4), _all_orders(12, 3)):
        assert all(a != b for a, b in zip(base, other))


def test_set_epoch_hooks_and_validation():
    sampler = GroupSampler(Flagged(n=4), seed=0)
    seen = []
    sampler.add_epoch_hook(seen.append)
    sampler.set_epoch(2)
    assert seen == [2] and sampler.epoch == 2
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        sampler.set_epoch(-1)
    with pytest.raises(TypeError, match="epoch must be an int"):
        sampler.set_epoch(1.5)


def test_seed_none_uses_a_fresh_seed_without_group():
    a, b = GroupSampler(Flagged(n=3)), GroupSampler(Flagged(n=3))
    assert isinstance(a.seed, int) and isinstance(b.seed, int)


def _orders_with_synced_seed(rank: int, world_size: int) -> list:
    np.random.seed(1000 + rank)  # each rank would draw another seed on its own
    ds = Flagged([0, 1] * 20)
    group = DistributedGroupSampler(ds, 2, seed=None, batch_sampler=True)
    plain = DistributedSampler(ds)
    return [group.seed, plain.seed, group.num_replicas, group.rank, plain.rank]


@pytest.mark.slow
def test_seed_none_is_broadcast_from_rank0_over_gloo():
    results = run_workers(_orders_with_synced_seed, 2, timeout=90)
    assert results[0][:2] == results[1][:2]
    assert [r[2:] for r in results] == [[2, 0, 0], [2, 1, 1]]


def _unshuffled_sampler_on_rank0_only(rank: int, world_size: int) -> Optional[list]:
    # A rank-0-only evaluation loader: the other rank never builds a sampler, so a
    # seed broadcast here would block until the group's timeout.
    if rank != 0:
        return None
    ds = Flagged([0, 1] * 3)
    return [
        list(DistributedSampler(ds, num_replicas=1, rank=0, shuffle=False)),
        list(GroupSampler(ds, 2, shuffle=False, batch_sampler=True)),
    ]


@pytest.mark.slow
def test_unshuffled_samplers_need_no_collective():
    results = run_workers(_unshuffled_sampler_on_rank0_only, 2, timeout=30)
    assert results[0][0] == list(range(6))
    assert sorted(i for batch in results[0][1] for i in batch) == list(range(6))


# --- size-aware ---------------------------------------------------------------


def _epoch_padding(sampler, sizes: np.ndarray) -> PaddingStats:
    stats = PaddingStats()
    for batch in sampler:
        stats = stats + padding_counts([sizes[batch]])
    return stats


def test_size_aware_pads_far_less_on_skewed_sizes():
    rng = np.random.default_rng(0)
    n = 600
    small = rng.integers(200, 260, size=(n, 2))
    big = rng.integers(900, 1000, size=(n, 2))
    sizes = np.where(rng.random((n, 1)) < 0.85, small, big)  # mostly small, a few big
    ds = Flagged(np.zeros(n, dtype=int), sizes)
    plain = _epoch_padding(GroupSampler(ds, 4, seed=0, batch_sampler=True), sizes)
    aware_sampler = GroupSampler(ds, 4, seed=0, batch_sampler=True, size_aware=True)
    aware = _epoch_padding(aware_sampler, sizes)
    assert aware.padded_pixels < 0.3 * plain.padded_pixels
    first = list(aware_sampler)
    aware_sampler.set_epoch(1)
    assert list(aware_sampler) != first  # still random across epochs


# --- argument checks ------------------------------------------------------------


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda: GroupSampler(Flagged(n=3), 0, seed=0),
            ValueError,
            "samples_per_gpu must be >= 1, got 0",
        ),
        (
            lambda: GroupSampler(Flagged(n=3), 2, num_gpus=0, seed=0),
            ValueError,
            "num_gpus must be >= 1",
        ),
        (
            lambda: GroupSampler(Flagged(n=3), 2.0, seed=0),
            TypeError,
            "samples_per_gpu must be an int, got float",
        ),
        (lambda: GroupSampler(Flagged(n=3), seed="x"), TypeError, "seed must be an int or None"),
        (
            lambda: GroupSampler(Flagged(n=3), seed=0, drop_last=True),
            ValueError,
            "drop_last=True needs batch_sampler",
        ),
        (
            lambda: GroupSampler(Flagged([0, 1], n=3), seed=0),
            ValueError,
            r"expected shape \(3,\).*found shape \(2,\)",
        ),
        (lambda: GroupSampler(Flagged([0.5, 1, 0]), seed=0), ValueError, "integer group ids"),
        (
            lambda: GroupSampler(Flagged(img_sizes=np.ones((3, 3))), seed=0),
            ValueError,
            r"shape \(3, 2\).*found shape \(3, 3\)",
        ),
        (
            lambda: GroupSampler(Flagged(img_sizes=[(1, 2), (0, 4)]), seed=0),
            ValueError,
            "sample 1 has",
        ),
        (lambda: GroupSampler(object(), seed=0), TypeError, "must define __len__"),
        (
            lambda: DistributedGroupSampler(Flagged(n=3), 1, 2, 2, seed=0),
            ValueError,
            r"rank must be in \[0, 2\).*got 2",
        ),
        (
            lambda: DistributedGroupSampler(Flagged(n=3), 1, 2, -1, seed=0),
            ValueError,
            "rank must be in",
        ),
        (
            lambda: DistributedGroupSampler(Flagged(n=3), 1, 0, 0, seed=0),
            ValueError,
            "num_replicas must be >= 1",
        ),
        (
            lambda: DistributedSampler(Flagged(n=3), 3, 5, seed=0),
            ValueError,
            r"rank must be in \[0, 3\)",
        ),
    ],
)
def test_bad_arguments_are_named(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_works_as_dataloader_batch_sampler():
    ds = Flagged([0, 1, 1, 0, 1, 0, 0])
    values = torch.arange(7)
    loader = torch.utils.data.DataLoader(
        values, batch_sampler=GroupSampler(ds, 2, seed=0, batch_sampler=True)
    )
    seen = sorted(int(v) for batch in loader for v in batch)
    assert seen == list(range(7))
