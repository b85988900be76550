"""build_dataloader with mmdet 2.x's arguments; the epoch reached by every path mmcv uses."""

from __future__ import annotations

import itertools
import random
from typing import Callable, Dict, List, Tuple

import pytest
from torch.utils.data import DataLoader, SequentialSampler

from mmpar.data import build_dataloader, set_loader_epoch
from mmpar.data.batch_sampler_loader import BatchSamplerLoader
from mmpar.data.samplers import (
    DistributedGroupSampler,
    DistributedSampler,
    GroupSampler,
    InfiniteBatchSampler,
    InfiniteGroupBatchSampler,
)
from tests._datasets import FlaggedDataset
from tests._dist_helpers import run_workers


class Draws(FlaggedDataset):
    """Sample ``i``: its index and a draw from the worker's seeded ``random``."""

    def __getitem__(self, i: int) -> dict:
        return {"idx": i, "draw": random.random()}


def _mmdet_train_args(dist: bool, runner_type: str) -> dict:
    """What mmdet 2.28's train_detector passes (defaults merged with cfg.data.train_dataloader)."""
    return dict(
        samples_per_gpu=2,
        workers_per_gpu=0,
        num_gpus=1,
        dist=dist,
        seed=0,
        runner_type=runner_type,
        persistent_workers=False,
        shuffle=True,
        class_aware_sampler=None,
    )


@pytest.mark.parametrize(
    "dist, runner_type, kind",
    [
        (True, "EpochBasedRunner", DistributedGroupSampler),
        (False, "EpochBasedRunner", GroupSampler),
        (True, "IterBasedRunner", InfiniteGroupBatchSampler),
        (False, "IterBasedRunner", InfiniteGroupBatchSampler),
        (
            False,
            "EpochBasedRunnerAmp",
            GroupSampler,
        ),  # any other runner name: the epoch loader, as in mmdet
    ],
)
def test_mmdet_train_arguments_are_accepted(dist, runner_type, kind):
    ds = Draws(8, flag=[0, 1] * 4)
    loader = build_dataloader(ds, **_mmdet_train_args(dist, runner_type))
    assert isinstance(loader.batch_sampler, kind)
    batches = [b["idx"].tolist() for b in itertools.islice(loader, 6)]
    assert all(len(b) in (1, 2) and len({i % 2 for i in b}) == 1 for b in batches)


def test_mmdet_test_arguments_and_positional_order():
    ds = Draws(5, flag=[0, 1, 0, 1, 0])
    loader = build_dataloader(
        ds,
        samples_per_gpu=1,
        workers_per_gpu=0,
        dist=False,
        shuffle=False,
        persistent_workers=False,
    )
    assert [int(b["idx"]) for b in loader] == list(range(5))
    # mmdet's positional order: dataset, samples_per_gpu, workers_per_gpu, num_gpus, dist,
    # shuffle, seed, runner_type, persistent_workers, class_aware_sampler
    loader = build_dataloader(ds, 2, 0, 1, False, False, 0, "IterBasedRunner", False, None)
    assert isinstance(loader.batch_sampler, InfiniteBatchSampler)
    assert [b["idx"].tolist() for b in itertools.islice(loader, 4)] == [
        [0, 1],
        [2, 3],
        [4, 3],
        [0, 1],
    ]


def test_dataloader_keyword_arguments_pass_through():
    loader = build_dataloader(
        Draws(4), 2, 1, seed=0, timeout=30, prefetch_factor=3, pin_memory=False
    )
    assert (loader.timeout, loader.prefetch_factor) == (30, 3)
    assert sorted(i for b in loader for i in b["idx"].tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (
            dict(runner_typ="IterBasedRunner"),
            TypeError,
            "unexpected keyword argument.*'runner_typ'",
        ),
        (dict(samples_per_gpus=2), TypeError, "'samples_per_gpus'"),
        (
            dict(runner_type=None),
            TypeError,
            "runner_type must be a runner name \\(str\\).*got NoneType",
        ),
        (
            dict(class_aware_sampler=dict(num_sample_class=1)),
            ValueError,
            "class_aware_sampler is not supported.*expected None, got \\{'num_sample_class': 1\\}",
        ),
        (dict(batch_sampler=None), TypeError, "batch_sampler are derived"),
    ],
)
def test_bad_mmdet_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        build_dataloader(Draws(4), 2, 0, seed=0, **kwargs)


def test_iter_based_loader_never_runs_out_and_changes_order_per_pass():
    ds = Draws(14, flag=[0] * 5 + [1] * 9)  # 2 + 3 batches of 4 per pass, short ones completed
    loader = build_dataloader(ds, 2, 1, num_gpus=2, seed=4, runner_type="IterBasedRunner")
    assert len(loader) == 5 and loader.batch_sampler.batch_size == 4
    batches = [b["idx"].tolist() for b in itertools.islice(loader, 4 * len(loader))]
    passes = [batches[p * 5 : (p + 1) * 5] for p in range(4)]
    for p in passes:
        assert all(len(b) == 4 and len({int(ds.flag[i]) for i in b}) == 1 for b in p)
        assert {i for b in p for i in b} == set(range(14))
    assert len({str(p) for p in passes}) == 4
    again = build_dataloader(ds, 2, 1, num_gpus=2, seed=4, runner_type="IterBasedRunner")
    assert [b["idx"].tolist() for b in itertools.islice(again, 20)] == batches


def test_iter_based_loader_rejects_an_empty_dataset():
    with pytest.raises(ValueError, match="at least one sample"):
        build_dataloader(Draws(0), 2, 0, seed=0, runner_type="IterBasedRunner")


# --- the epoch through every path -------------------------------------------

EPOCH_PATHS: Dict[str, Callable[[DataLoader, int], None]] = {
    # DistSamplerSeedHook and IterLoader: loader.sampler.set_epoch
    "loader.sampler": lambda loader, e: loader.sampler.set_epoch(e),
    # DistSamplerSeedHook when loader.sampler has no set_epoch
    "loader.batch_sampler.sampler": lambda loader, e: loader.batch_sampler.sampler.set_epoch(e),
    "set_loader_epoch": set_loader_epoch,
}

LOADERS = {
    "group": dict(dist=False),
    "dist group": dict(dist=True),
    "plain": dict(dist=False, flag=None),
    "iter": dict(dist=False, runner_type="IterBasedRunner"),
}


def _make_loader(kind: str, workers: int = 1) -> DataLoader:
    args = dict(LOADERS[kind])
    flag = args.pop("flag", [0, 1] * 6)
    return build_dataloader(Draws(12, flag=flag), 2, workers, seed=9, **args)


def _epoch(loader: DataLoader) -> List[Tuple[int, float]]:
    """(index, worker draw) for one epoch (one pass for the endless loader)."""
    out = []
    for batch in itertools.islice(loader, len(loader)):
        out.extend(zip(batch["idx"].tolist(), batch["draw"].tolist()))
    return out


@pytest.mark.parametrize("kind", list(LOADERS))
@pytest.mark.parametrize("path", list(EPOCH_PATHS))
def test_every_path_reorders_and_reseeds_workers_each_epoch(kind, path):
    loader = _make_loader(kind)
    epochs = []
    for e in range(3):
        EPOCH_PATHS[path](loader, e)
        owner = loader.sampler if kind == "plain" else loader.batch_sampler
        assert owner.epoch == e
        epochs.append(_epoch(loader))
    for a, b in itertools.combinations(epochs, 2):
        assert [i for i, _ in a] != [i for i, _ in b]  # a new order
        assert not {d for _, d in a} & {d for _, d in b}  # new worker streams
    reference = _make_loader(kind)
    set_loader_epoch(reference, 2)
    assert _epoch(reference) == epochs[2]  # every path selects the same epoch


def test_batch_sampler_loader_exposes_the_index_view_as_sampler():
    loader = _make_loader("group", workers=0)
    assert isinstance(loader, BatchSamplerLoader)
    assert loader.sampler is loader.batch_sampler.sampler
    assert sorted(loader.sampler) == list(range(12)) and len(loader.sampler) == 12
    assert [i for b in loader for i in b["idx"].tolist()] == list(loader.sampler)
    with pytest.raises(ValueError, match="sampler attribute should not be set"):
        loader.sampler = SequentialSampler(range(12))


@pytest.mark.parametrize("drop_last", [False, True])
def test_index_view_of_every_batch_form_matches_its_batches(drop_last):
    ds = Draws(11, flag=[0] * 6 + [1] * 5)
    forms = [
        GroupSampler(ds, 2, seed=2, batch_sampler=True, drop_last=drop_last),
        DistributedGroupSampler(ds, 2, 2, 1, seed=2, batch_sampler=True),
        InfiniteGroupBatchSampler(ds, 2, seed=2),
    ]
    for sampler in forms:
        batches = list(itertools.islice(iter(sampler), len(sampler)))
        flat = [i for b in batches for i in b]
        assert list(itertools.islice(iter(sampler.sampler), len(flat))) == flat
        assert len(sampler.sampler) == len(flat)
    assert len(forms[0].sampler) == (10 if drop_last else 11)
    index_form = GroupSampler(ds, 2, seed=2)
    assert index_form.sampler is index_form


def test_hand_built_loader_reaches_the_epoch_through_batch_sampler_sampler():
    # A user's DataLoader(batch_sampler=...): loader.sampler is torch's SequentialSampler,
    # so DistSamplerSeedHook falls back to loader.batch_sampler.sampler.set_epoch.
    sampler = GroupSampler(Draws(8, flag=[0, 1] * 4), 2, seed=1, batch_sampler=True)
    loader = DataLoader(Draws(8), batch_sampler=sampler)
    assert not hasattr(loader.sampler, "set_epoch")
    first = [i for b in loader for i in b["idx"].tolist()]
    loader.batch_sampler.sampler.set_epoch(1)
    second = [i for b in loader for i in b["idx"].tolist()]
    assert first != second and sorted(first) == sorted(second) == list(range(8))


def test_batch_sampler_loader_needs_an_epoch_view():
    with pytest.raises(TypeError, match="must have a .sampler with set_epoch.*DistributedSampler"):
        BatchSamplerLoader(Draws(4), DistributedSampler(Draws(4), 1, 0, seed=0))


def _dist_epochs(rank: int, world_size: int) -> list:
    orders = []
    loader = build_dataloader(Draws(16, flag=[0, 1] * 8), 2, 1, dist=True)  # seed from rank 0
    for e in range(4):
        EPOCH_PATHS["loader.sampler" if e % 2 else "loader.batch_sampler.sampler"](loader, e)
        orders.append([i for b in loader for i in b["idx"].tolist()])
    endless = build_dataloader(
        Draws(16, flag=[0, 1] * 8), 2, 0, dist=True, runner_type="IterBasedRunner"
    )
    stream = [i for b in itertools.islice(endless, 3 * len(endless)) for i in b["idx"].tolist()]
    return [orders, [stream[p * 8 : (p + 1) * 8] for p in range(3)]]


@pytest.mark.slow
def test_two_gloo_ranks_split_every_epoch_and_pass_disjointly():
    (epochs0, passes0), (epochs1, passes1) = run_workers(_dist_epochs, 2, timeout=120)
    for a, b in list(zip(epochs0, epochs1)) + list(zip(passes0, passes1)):
        assert len(a) == len(b) == 8 and not set(a) & set(b) and sorted(a + b) == list(range(16))
    assert len({str(e) for e in epochs0}) == 4 and len({str(p) for p in passes0}) == 3
