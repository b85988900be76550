"""Run under torchrun: train through MMDistributedDataParallel.train_step on gloo.

Every rank collates its own DataContainer batches, trains a few SGD steps and
prints one line ``rank R/W: steps=S forward_calls=F params_equal=B loss=L``,
where ``params_equal`` says whether all ranks hold the same parameters after
training and ``forward_calls`` counts the model's real forward calls.

Usage (mmpar importable, e.g. ``pip install -e .`` or ``PYTHONPATH=.``)::

    python3 -m torch.distributed.run --nproc_per_node=2 --master_port P \
        tests/scripts/ddp_train_steps.py [--steps S]
"""

from __future__ import annotations

import argparse
import gc
from typing import Any, List

import torch
import torch.distributed as dist
from torch import nn

from mmpar.collate import collate
from mmpar.data_container import DataContainer
from mmpar.distributed import MMDistributedDataParallel


class Detector(nn.Module):
    """A tiny "detector": pools a padded image batch, regresses the box count."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(3, 8)
        self.fc2 = nn.Linear(8, 1)
        self.forward_calls = 0

    def forward(
        self, img: torch.Tensor, gt_bboxes: List[torch.Tensor], img_metas: List[dict]
    ) -> torch.Tensor:
        self.forward_calls += 1
        pred = self.fc2(torch.relu(self.fc1(img.mean(dim=(2, 3))))).squeeze(1)
        target = torch.tensor([float(len(b)) for b in gt_bboxes])
        return ((pred - target) ** 2).mean()

    def train_step(self, data: dict, optimizer: Any = None) -> dict:
        for key, value in data.items():
            if isinstance(value, DataContainer):
                raise TypeError(f"train_step got a DataContainer for {key!r}")
        loss = self(**data)
        return dict(loss=loss, log_vars=dict(loss=loss.item()), num_samples=len(data["img_metas"]))


def make_batch(rank: int, step: int, n: int = 4) -> dict:
    g = torch.Generator().manual_seed(100 * rank + step)
    samples = []
    for i in range(n):
        h, w, k = (int(v) for v in torch.randint(2, 6, (3,), generator=g))
        samples.append(
            dict(
                img=DataContainer(torch.rand(3, h, w, generator=g), stack=True),
                gt_bboxes=DataContainer(torch.rand(k, 4, generator=g)),
                img_metas=DataContainer(dict(idx=i, shape=(h, w)), cpu_only=True),
            )
        )
    return collate(samples, samples_per_gpu=n)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = Detector()
    ddp = MMDistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss = float("nan")
    for step in range(args.steps):
        optimizer.zero_grad()
        out = ddp.train_step(make_batch(rank, step), optimizer)
        out["loss"].backward()
        optimizer.step()
        loss = out["log_vars"]["loss"]
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    equal = all(torch.allclose(gathered[0], t) for t in gathered)
    print(
        f"rank {rank}/{world}: steps={args.steps} forward_calls={model.forward_calls} "
        f"params_equal={equal} loss={loss:.4f}",
        flush=True,
    )
    # Release DDP (its reducer holds the group) before the group goes: destroying
    # the group first can abort the process at exit ("terminate called ...").
    del ddp, optimizer, out
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
