"""mmpar loaders under mmcv 1.x's real runners, DistSamplerSeedHook and IterLoader.

Skipped unless mmcv 1.x is importable. ``mmcv.runner`` imports ``torchvision``;
where it is not installed, a bare module stands in for it during these tests.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
import warnings
from typing import Any, List

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from mmpar.data import build_dataloader
from mmpar.data.samplers import DistributedGroupSampler
from tests._dist_helpers import run_workers


def _import_mmcv_runner() -> Any:
    """``mmcv.runner``, or a skip without mmcv 1.x; call with torchvision present or stubbed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mmcv 1.7 warns about its 2.0 release on import
        mmcv = pytest.importorskip("mmcv")
        if not str(mmcv.__version__).startswith("1."):
            pytest.skip(f"needs mmcv 1.x (mmcv.runner), found {mmcv.__version__}")
        import mmcv.runner
        import mmcv.runner.iter_based_runner  # noqa: F401 - IterLoader lives here
    return mmcv.runner


@pytest.fixture
def runner_mod(monkeypatch):
    if importlib.util.find_spec("mmcv") is None:
        pytest.skip("mmcv is not installed")
    if "torchvision" not in sys.modules and importlib.util.find_spec("torchvision") is None:
        monkeypatch.setitem(sys.modules, "torchvision", types.ModuleType("torchvision"))
    return _import_mmcv_runner()


class Flagged(Dataset):
    """Sample ``i`` is ``{"idx": i}``; two groups."""

    def __init__(self, n: int) -> None:
        self.flag = np.arange(n) % 2

    def __len__(self) -> int:
        return len(self.flag)

    def __getitem__(self, i: int) -> dict:
        return {"idx": i}


class Recorder(torch.nn.Module):
    """A model whose train_step only records the sample indices of each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: List[List[int]] = []

    def train_step(self, data: dict, optimizer: Any, **kwargs: Any) -> dict:
        self.seen.append(data["idx"].tolist())
        return dict(loss=self.weight * 0, log_vars={}, num_samples=len(data["idx"]))


def _run(
    runner_mod: Any, kind: str, loader: DataLoader, length: int, tmp_path: Any
) -> List[List[int]]:
    """Train a Recorder for ``length`` epochs (or iterations); the flat order of every batch."""
    model = Recorder()
    common = dict(work_dir=str(tmp_path), logger=logging.getLogger("mmpar.tests.mmcv"))
    if kind == "epoch":
        runner = runner_mod.EpochBasedRunner(model, max_epochs=length, **common)
        runner.register_hook(runner_mod.DistSamplerSeedHook())
    else:
        runner = runner_mod.IterBasedRunner(model, max_iters=length, **common)
    runner.run([loader], [("train", 1)])
    return model.seen


def _by_epoch(batches: List[List[int]], per_epoch: int) -> List[List[int]]:
    return [
        [i for b in batches[s : s + per_epoch] for i in b]
        for s in range(0, len(batches), per_epoch)
    ]


@pytest.mark.parametrize("dist", [True, False])
def test_epoch_runner_with_dist_sampler_seed_hook_reorders_every_epoch(runner_mod, dist, tmp_path):
    loader = build_dataloader(Flagged(12), 2, 0, dist=dist, seed=0)
    epochs = _by_epoch(_run(runner_mod, "epoch", loader, 3, tmp_path), len(loader))
    assert len(epochs) == 3 and all(sorted(e) == list(range(12)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3
    assert loader.batch_sampler.epoch == 2  # the hook's last set_epoch reached the batch sampler


def test_hook_falls_back_to_batch_sampler_sampler_of_a_hand_built_loader(runner_mod):
    hook = runner_mod.DistSamplerSeedHook()
    sampler = DistributedGroupSampler(Flagged(8), 2, 1, 0, seed=1, batch_sampler=True)
    loader = DataLoader(
        Flagged(8), batch_sampler=sampler
    )  # loader.sampler: torch's SequentialSampler
    orders = []
    for epoch in range(3):
        hook.before_epoch(types.SimpleNamespace(data_loader=loader, epoch=epoch))
        assert sampler.epoch == epoch
        orders.append([i for b in loader for i in b["idx"].tolist()])
    assert len({tuple(o) for o in orders}) == 3 and all(sorted(o) == list(range(8)) for o in orders)


def test_iter_runner_over_an_endless_loader_changes_order_per_pass(runner_mod, tmp_path):
    loader = build_dataloader(Flagged(12), 2, 0, seed=3, runner_type="IterBasedRunner")
    seen = _run(runner_mod, "iter", loader, 4 * len(loader), tmp_path)
    passes = _by_epoch(seen, len(loader))
    assert len(passes) == 4 and all(sorted(p) == list(range(12)) for p in passes)
    assert len({tuple(p) for p in passes}) == 4
    assert all(len({i % 2 for i in b}) == 1 for b in seen)


def test_iter_loader_over_an_epoch_loader_sets_a_new_epoch_each_pass(runner_mod, tmp_path):
    # mmseg 0.x style: an IterBasedRunner reading a loader built without runner_type.
    loader = build_dataloader(Flagged(8), 2, 0, seed=5)
    passes = _by_epoch(_run(runner_mod, "iter", loader, 3 * len(loader), tmp_path), len(loader))
    assert len({tuple(p) for p in passes}) == 3 and all(sorted(p) == list(range(8)) for p in passes)
    assert loader.batch_sampler.epoch == 2


def _dist_epochs_under_mmcv(rank: int, world_size: int, work_dir: str) -> List[List[int]]:
    if "torchvision" not in sys.modules and importlib.util.find_spec("torchvision") is None:
        sys.modules["torchvision"] = types.ModuleType("torchvision")
    runner_mod = _import_mmcv_runner()
    loader = build_dataloader(Flagged(16), 2, 0, dist=True)  # seed from rank 0
    seen = _run(runner_mod, "epoch", loader, 3, f"{work_dir}/{rank}")
    return _by_epoch(seen, len(loader))


@pytest.mark.slow
def test_two_gloo_ranks_under_dist_sampler_seed_hook(runner_mod, tmp_path):
    epochs0, epochs1 = run_workers(_dist_epochs_under_mmcv, 2, str(tmp_path), timeout=120)
    assert len(epochs0) == len(epochs1) == 3
    for a, b in zip(epochs0, epochs1):
        assert not set(a) & set(b) and sorted(a + b) == list(range(16))
    assert len({tuple(e) for e in epochs0}) == 3
