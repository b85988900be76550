"""Endless batch samplers: never run out, a new order per pass, sharded, seeded, set_epoch."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpar.data.samplers import (
    DistributedGroupSampler,
    InfiniteBatchSampler,
    InfiniteGroupBatchSampler,
)
from tests._datasets import Flagged
from tests._dist_helpers import run_workers


def _take(sampler, n: int) -> List[List[int]]:
    return list(itertools.islice(iter(sampler), n))


def _passes(sampler, count: int) -> List[List[List[int]]]:
    """The first ``count`` passes of a fresh iterator, cut at ``len(sampler)`` batches."""
    batches = _take(sampler, count * len(sampler))
    return [batches[p * len(sampler) : (p + 1) * len(sampler)] for p in range(count)]


@settings(max_examples=40, deadline=None)
@given(
    flag=st.lists(st.integers(0, 2), min_size=1, max_size=40),
    batch_size=st.integers(1, 4),
    world=st.integers(1, 3),
)
def test_every_pass_full_one_group_batches_covering_the_dataset(flag, batch_size, world):
    ds = Flagged(flag)
    samplers = [InfiniteGroupBatchSampler(ds, batch_size, world, r, seed=7) for r in range(world)]
    assert len({len(s) for s in samplers}) == 1  # every rank: the same batches per pass
    per_rank = [_passes(s, 3) for s in samplers]
    for p in range(3):
        batches = [b for rank in per_rank for b in rank[p]]
        assert all(len(b) == batch_size and len({int(ds.flag[i]) for i in b}) == 1 for b in batches)
        assert {i for b in batches for i in b} == set(
            range(len(flag))
        )  # no sample lost in any pass


def test_stream_runs_past_any_number_of_passes():
    sampler = InfiniteGroupBatchSampler(Flagged([0, 1, 1]), 2, seed=0)
    assert len(sampler) == 2
    assert len(_take(sampler, 1000)) == 1000


def test_ranks_are_disjoint_when_batches_divide_and_pass_equals_distributed_epoch():
    ds = Flagged([0, 1] * 12)  # 12 per group, batch 2: 12 batches, 3 per rank of 4
    for p in range(3):
        orders = []
        for rank in range(4):
            infinite = InfiniteGroupBatchSampler(ds, 2, 4, rank, seed=11)
            pass_p = _passes(infinite, p + 1)[p]
            epoch = DistributedGroupSampler(ds, 2, 4, rank, seed=11, batch_sampler=True)
            epoch.set_epoch(p)
            assert pass_p == list(epoch)
            orders.append([i for b in pass_p for i in b])
        flat = [i for o in orders for i in o]
        assert sorted(flat) == list(range(24))  # disjoint and complete


def test_deterministic_per_seed_and_different_per_pass():
    ds = Flagged([0, 0, 1, 1, 1, 0, 1, 0, 1, 1])
    first = _passes(InfiniteGroupBatchSampler(ds, 2, seed=3), 4)
    assert first == _passes(InfiniteGroupBatchSampler(ds, 2, seed=3), 4)
    assert first != _passes(InfiniteGroupBatchSampler(ds, 2, seed=4), 4)
    assert len({str(p) for p in first}) == 4  # four passes, four orders


def test_set_epoch_selects_the_pass_the_next_iterator_starts_at():
    ds = Flagged([0, 1] * 5)
    sampler = InfiniteGroupBatchSampler(ds, 2, seed=5)
    running = iter(sampler)
    head = [next(running) for _ in range(len(sampler))]
    sampler.set_epoch(2)
    assert next(running) == sampler.pass_batches(1)[0]  # a running iterator keeps its course
    assert _passes(sampler, 2) == [sampler.pass_batches(2), sampler.pass_batches(3)]
    assert sampler.epoch == sampler.sampler.epoch == 2
    assert head == sampler.pass_batches(0)


def test_index_view_forwards_set_epoch_and_hooks():
    sampler = InfiniteGroupBatchSampler(Flagged([0, 1] * 4), 2, seed=1)
    seen: List[int] = []
    sampler.add_epoch_hook(seen.append)
    sampler.sampler.set_epoch(3)
    assert sampler.epoch == 3 and seen == [3]
    assert len(sampler.sampler) == len(sampler) * 2
    indices = list(itertools.islice(iter(sampler.sampler), 8))
    assert indices == [i for b in sampler.pass_batches(3) for i in b]
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        sampler.sampler.set_epoch(-1)


def test_unshuffled_infinite_batch_sampler_is_sequential_and_ignores_groups():
    ds = Flagged([0, 1, 0, 1, 0])
    sampler = InfiniteBatchSampler(ds, 2, shuffle=False)
    assert (
        _take(sampler, 6) == [[0, 1], [2, 3], [4, 3]] * 2
    )  # the short batch takes the sample before it
    shuffled = InfiniteBatchSampler(ds, 2, seed=0)
    mixed = [b for b in _take(shuffled, 60) if len({int(ds.flag[i]) for i in b}) > 1]
    assert mixed  # groups are not kept apart
    assert Counter(i for b in _passes(shuffled, 1)[0] for i in b).keys() == set(range(5))


def test_unshuffled_needs_no_seed_and_sharding_covers_each_pass():
    ds = Flagged(n=7)
    ranks = [InfiniteBatchSampler(ds, 2, 2, r, shuffle=False) for r in range(2)]
    one_pass = [b for s in ranks for b in _passes(s, 1)[0]]
    assert {i for b in one_pass for i in b} == set(range(7))
    assert all(s.seed == 0 for s in ranks)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda: InfiniteGroupBatchSampler(Flagged(n=0), 2, seed=0),
            ValueError,
            "at least one sample",
        ),
        (
            lambda: InfiniteGroupBatchSampler(Flagged(n=4), 0, seed=0),
            ValueError,
            "batch_size must be >= 1",
        ),
        (
            lambda: InfiniteGroupBatchSampler(Flagged(n=4), 2.0, seed=0),
            TypeError,
            "batch_size must be an int",
        ),
        (
            lambda: InfiniteGroupBatchSampler(Flagged(n=4), 2, 2, 2, seed=0),
            ValueError,
            "rank must be in",
        ),
        (
            lambda: InfiniteGroupBatchSampler(Flagged([0, 1]), 2, seed="1"),
            TypeError,
            "seed must be an int",
        ),
        (
            lambda: InfiniteGroupBatchSampler(Flagged([0, 1, 2], n=4), 2, seed=0),
            ValueError,
            "flag must hold",
        ),
        (lambda: InfiniteBatchSampler(object(), 2, seed=0), TypeError, "must define __len__"),
    ],
)
def test_bad_arguments_are_named(make, error, match):
    with pytest.raises(error, match=match):
        make()


def _rank_passes(rank: int, world_size: int) -> list:
    sampler = InfiniteGroupBatchSampler(Flagged([0, 1] * 10), 2)  # seed None: rank 0's, broadcast
    return [sampler.seed, _passes(sampler, 3)]


@pytest.mark.slow
def test_ranks_share_the_seed_and_split_every_pass_over_gloo():
    (seed0, passes0), (seed1, passes1) = run_workers(_rank_passes, 2, timeout=90)
    assert seed0 == seed1
    for p0, p1 in zip(passes0, passes1):
        idx0 = [i for b in p0 for i in b]
        idx1 = [i for b in p1 for i in b]
        assert not set(idx0) & set(idx1) and sorted(idx0 + idx1) == list(range(20))
    assert passes0[0] != passes0[1] != passes0[2]
