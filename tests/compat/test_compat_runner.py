"""mmcv 1.x's EpochBasedRunner and hooks driving mmpar's distributed wrapper and loader.

Two real processes joined by a gloo group on 127.0.0.1: mmcv's runner with its
OptimizerHook, CheckpointHook and DistSamplerSeedHook trains
``mmpar.MMDistributedDataParallel`` for 2 epochs over ``mmpar.build_dataloader(dist=True)``
on a dataset of two orientation groups.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Dict, List

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

import mmpar
from tests._dist_helpers import run_workers
from tests.compat._mmcv_env import install_stand_ins, requires_mmcv

pytestmark = [requires_mmcv, pytest.mark.slow]

NUM_SAMPLES = 16
SAMPLES_PER_GPU = 2
SEED = 7


class GroupedToy(Dataset):
    """Even indices landscape (flag 0), odd ones portrait (flag 1); mmpar containers."""

    def __init__(self, num: int = NUM_SAMPLES) -> None:
        self.flag = np.array([i % 2 for i in range(num)], dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.flag)

    def __getitem__(self, i: int) -> dict:
        h, w = (8, 12 + i % 3) if self.flag[i] == 0 else (12 + i % 3, 8)
        return dict(
            img=mmpar.DataContainer(torch.full((3, h, w), i / NUM_SAMPLES), stack=True),
            img_metas=mmpar.DataContainer(
                dict(idx=i, flag=int(self.flag[i]), img_shape=(h, w, 3)), cpu_only=True
            ),
            gt_labels=mmpar.DataContainer(torch.tensor([i % 3])),
        )


class ToyDetector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.cls = nn.Linear(4, 3)

    def train_step(self, data: dict, optimizer) -> dict:
        img, metas, labels = data["img"], data["img_metas"], data["gt_labels"]
        assert isinstance(img, torch.Tensor) and img.dim() == 4, type(img)
        assert isinstance(metas, list) and all(isinstance(m, dict) for m in metas), type(metas)
        assert isinstance(labels, list) and all(isinstance(t, torch.Tensor) for t in labels), type(
            labels
        )
        logits = self.cls(self.conv(img).mean(dim=(2, 3)))
        loss = nn.functional.cross_entropy(logits, torch.cat(labels))
        return dict(loss=loss, log_vars=dict(loss=float(loss)), num_samples=img.shape[0])


def _epoch_order(loader) -> List[List[int]]:
    """The chunks of sample indices one epoch of ``loader`` yields."""
    return [[m["idx"] for m in batch["img_metas"].data[0]] for batch in loader]


def _runner_worker(rank: int, world_size: int, work_dir: str) -> Dict:
    install_stand_ins()
    from mmcv.runner import CheckpointHook, DistSamplerSeedHook, EpochBasedRunner, Hook

    class OrderRecorder(Hook):
        """Records, per epoch, the sample indices of every chunk the runner trains on."""

        def __init__(self) -> None:
            self.orders: List[List[List[int]]] = []

        def before_train_epoch(self, runner) -> None:
            self.orders.append([])

        def after_train_iter(self, runner) -> None:
            metas = runner.data_batch["img_metas"]
            assert type(metas) is mmpar.DataContainer, type(metas)
            self.orders[-1].append([m["idx"] for m in metas.data[0]])

    torch.manual_seed(0)  # same initial weights on both ranks (DDP also broadcasts them)

    def loader():
        return mmpar.build_dataloader(
            GroupedToy(),
            samples_per_gpu=SAMPLES_PER_GPU,
            workers_per_gpu=0,
            dist=True,
            shuffle=True,
            seed=SEED,
        )

    model = mmpar.MMDistributedDataParallel(ToyDetector(), broadcast_buffers=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    logger = logging.getLogger(f"mmpar-compat-runner-{rank}")
    runner = EpochBasedRunner(
        model, optimizer=optimizer, work_dir=work_dir, logger=logger, max_epochs=2
    )
    runner.register_optimizer_hook(dict(grad_clip=None))
    runner.register_hook(CheckpointHook(interval=1))
    runner.register_hook(DistSamplerSeedHook())
    recorder = OrderRecorder()
    runner.register_hook(recorder)
    runner.run([loader()], [("train", 1)])

    # The order of epoch e is a function of the seed, the rank and the epoch mmcv's
    # DistSamplerSeedHook sets: a fresh loader set to epoch e by the hook repeats it.
    replayed = []
    for epoch in range(2):
        fresh = loader()
        DistSamplerSeedHook().before_epoch(SimpleNamespace(data_loader=fresh, epoch=epoch))
        replayed.append(_epoch_order(fresh))
    return dict(
        orders=recorder.orders,
        replayed=replayed,
        epochs=runner.epoch,
        params={k: v.detach().clone() for k, v in model.module.state_dict().items()},
    )


def test_mmcv_runner_trains_mmpar_ddp_with_dist_sampler_seed_hook(tmp_path) -> None:
    results = run_workers(_runner_worker, 2, str(tmp_path), timeout=120)
    flag = GroupedToy().flag
    for rank, res in enumerate(results):
        assert res["epochs"] == 2
        orders = res["orders"]
        assert len(orders) == 2 and all(
            len(epoch) == NUM_SAMPLES // (2 * SAMPLES_PER_GPU) for epoch in orders
        )
        # DistSamplerSeedHook reached the sampler: epoch 1 is shuffled anew.
        assert orders[0] != orders[1], f"rank {rank} saw the same order in both epochs: {orders[0]}"
        assert res["replayed"] == orders, f"rank {rank}: {res['replayed']} vs {orders}"
        for chunk in orders[0] + orders[1]:
            assert len(chunk) == SAMPLES_PER_GPU and len({int(flag[i]) for i in chunk}) == 1, chunk
    for epoch in range(2):
        seen = [i for res in results for chunk in res["orders"][epoch] for i in chunk]
        assert sorted(seen) == list(range(NUM_SAMPLES)), f"epoch {epoch}: {sorted(seen)}"
    # Gradients were averaged over the ranks: both hold the same trained weights.
    init = ToyDetector().state_dict()
    for key, value in results[0]["params"].items():
        assert torch.equal(value, results[1]["params"][key]), key
    # The checkpoints (rank 0 writes them) hold the bare module's state_dict.
    for epoch in (1, 2):
        ckpt = torch.load(tmp_path / f"epoch_{epoch}.pth", map_location="cpu", weights_only=False)
        assert ckpt["meta"]["epoch"] == epoch
        assert set(ckpt["state_dict"]) == set(init)
        assert not [k for k in ckpt["state_dict"] if k.startswith("module.")]
    for key, value in ckpt["state_dict"].items():
        assert torch.equal(value, results[0]["params"][key]), key
