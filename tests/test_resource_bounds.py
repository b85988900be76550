"""Resource bounds: long loading runs do not grow, and scatter/gather keep nothing alive.

Growth is judged by comparing a late window of a run with an early one, with wide
tolerances: the machine may be noisy, a leak of one batch per step is not subtle.
"""

from __future__ import annotations

import gc
import os
import shutil
import weakref
from typing import Dict, List

import pytest
import torch
from torch.utils.data import Dataset

from mmpar.collate import collate
from mmpar.data import build_dataloader
from mmpar.data_container import DataContainer
from mmpar.gather import gather
from mmpar.scatter_gather import scatter

_MB = 1 << 20


class PaddedImages(Dataset):
    """Images of 3x(48..79)x(48..79) with boxes and metadata, made on the fly."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        g = torch.Generator().manual_seed(index)
        h, w = (48 + int(v) for v in torch.randint(0, 32, (2,), generator=g))
        return {
            "img": DataContainer(torch.rand(3, h, w, generator=g), stack=True, size_divisor=32),
            "gt_bboxes": DataContainer(torch.rand(index % 5, 4, generator=g)),
            "img_metas": DataContainer({"idx": index, "shape": (h, w)}, cpu_only=True),
        }


def _usage() -> Dict[str, float]:
    with open("/proc/self/status") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return {
        "rss": rss_kb * 1024.0,
        "fds": float(len(os.listdir("/proc/self/fd"))),
        "shm": float(shutil.disk_usage("/dev/shm").used) if os.path.isdir("/dev/shm") else 0.0,
    }


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_collate_in_workers_does_not_grow_memory_fds_or_shm() -> None:
    batches, samples_per_gpu = 1500, 8
    loader = build_dataloader(
        PaddedImages(batches * samples_per_gpu),
        samples_per_gpu,
        2,
        shuffle=False,
        seed=0,
        timeout=60,
    )
    samples: List[dict] = []
    seen = 0
    for i, batch in enumerate(loader):
        (img,) = batch["img"].data
        assert img.shape[2] % 32 == 0 and img.shape[3] % 32 == 0
        seen += len(batch["img_metas"].data[0])
        samples.append(_usage())
        del batch, img
    assert seen == batches * samples_per_gpu  # no sample lost on the way
    early, late = samples[100:300], samples[-200:]

    def peak(window: List[Dict[str, float]], key: str) -> float:
        return max(s[key] for s in window)

    # One batch is ~8 x 3 x 96 x 96 x 4 B = 0.9 MB: a per-batch leak would add over 1 GB by the late
    # window.
    assert peak(late, "rss") <= 1.5 * peak(early, "rss") + 64 * _MB, (
        peak(early, "rss"),
        peak(late, "rss"),
    )
    assert peak(late, "fds") <= peak(early, "fds") + 16, (peak(early, "fds"), peak(late, "fds"))
    assert peak(late, "shm") <= peak(early, "shm") + 64 * _MB, (
        peak(early, "shm"),
        peak(late, "shm"),
    )


def _batch(n: int = 6) -> dict:
    return collate([PaddedImages(n)[i] for i in range(n)], samples_per_gpu=3)


def test_scatter_and_gather_keep_no_reference_to_their_inputs_on_cpu() -> None:
    batch = _batch()
    watched = [
        weakref.ref(t) for t in batch["img"].data
    ]  # DataContainer has __slots__ without __weakref__
    watched += [weakref.ref(b) for chunk in batch["gt_bboxes"].data for b in chunk]
    pieces = scatter(batch, ["cpu", -1])
    outputs = [
        {"feat": p["img"].mean(dim=(1, 2, 3)), "boxes": list(p["gt_bboxes"])} for p in pieces
    ]
    watched += [weakref.ref(o["feat"]) for o in outputs]
    merged = gather(outputs, "cpu")
    assert merged["feat"].shape == (6,) and len(merged["boxes"]) == 6
    del batch, pieces, outputs, merged
    # Plain reference counting must free them: no cycles, no caches.
    assert [r() is None for r in watched] == [True] * len(watched)
    gc.collect()


@pytest.mark.cuda
def test_scatter_to_cuda_keeps_no_batch_alive_after_the_step() -> None:
    device = torch.device("cuda", 0)
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated(device)
    for _ in range(3):
        batch = _batch(6)  # two chunks of 3: one per listed target
        pieces = scatter(batch, [0, 0])
        watched = [weakref.ref(p["img"]) for p in pieces]
        watched += [weakref.ref(b) for p in pieces for b in p["gt_bboxes"]]
        assert all(p["img"].is_cuda for p in pieces)
        losses = [{"loss": p["img"].float().mean()} for p in pieces]
        total = gather(losses, "cpu")["loss"].sum()
        assert torch.isfinite(total)
        del batch, pieces, losses, total
        assert all(r() is None for r in watched)
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated(device) == baseline
