"""Collate section: mmpar's one-copy padded stacking against pad-then-stack and the floor.

16 images of 3 x (600-800) x (900-1333), ``stack=True``, one chunk. Side by side
in one run, interleaved, medians of several repeats:

* ``mmpar``: :func:`mmpar.collate` on the samples' DataContainers;
* ``pad+stack``: ``F.pad`` each sample to the batch size, then ``torch.stack``;
* ``floor``: a fresh ``torch.empty`` of the padded batch filled with the padding
  value: the memory the batch needs, written once.

Then DataLoader throughput (batches and images per second) with 2 workers.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from mmpar import DataContainer, collate
from mmpar.stacking import padded_shape

BATCH = 16
TARGET_VS_PAD_STACK = 1.5
TARGET_VS_FLOOR = {torch.float32: 1.25, torch.uint8: 1.5}


def make_images(
    dtype: torch.dtype, n: int = BATCH, seed: int = 0, scale: float = 1.0
) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    images = []
    for _ in range(n):
        h = int(torch.randint(600, 801, (1,), generator=g)) * scale
        w = int(torch.randint(900, 1334, (1,), generator=g)) * scale
        img = torch.randint(0, 256, (3, int(h), int(w)), generator=g, dtype=torch.uint8)
        images.append(img.to(dtype))
    return images


def pad_then_stack(images: List[torch.Tensor], value: float = 0) -> torch.Tensor:
    shape = padded_shape([t.shape for t in images], 2)
    padded = [
        F.pad(t, (0, shape[2] - t.shape[2], 0, shape[1] - t.shape[1]), value=value) for t in images
    ]
    return torch.stack(padded)


def floor(images: List[torch.Tensor], value: float = 0) -> torch.Tensor:
    shape = (len(images),) + padded_shape([t.shape for t in images], 2)
    return torch.empty(shape, dtype=images[0].dtype).fill_(value)


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(fns: Dict[str, Callable[[], object]], repeats: int) -> Dict[str, float]:
    """Median seconds of each function, run interleaved so noise hits all alike."""
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for fn in fns.values():  # warm-up
        fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(_time(fn))
    return {name: statistics.median(ts) for name, ts in times.items()}


class _ImageDataset(Dataset):
    def __init__(self, images: List[torch.Tensor]) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict:
        return {
            "img": DataContainer(self.images[i], stack=True),
            "img_metas": DataContainer({"i": i}, cpu_only=True),
        }


def loader_throughput(images: List[torch.Tensor], epochs: int) -> float:
    """Images per second through a DataLoader with 2 workers collating one chunk of 16."""
    loader = DataLoader(
        _ImageDataset(images * 4),
        batch_size=BATCH,
        num_workers=2,
        collate_fn=partial(collate, samples_per_gpu=BATCH),
        persistent_workers=True,
    )
    for _ in loader:  # start the workers
        break
    seen, start = 0, time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            seen += batch["img"].data[0].shape[0]
    return seen / (time.perf_counter() - start)


def run(quick: bool = False) -> str:
    repeats = 3 if quick else 15
    scale = 0.1 if quick else 1.0
    lines = [
        "## Collate: padded stacking",
        "",
        f"{BATCH} images of 3 x (600-800) x (900-1333){' (quick: scaled 0.1)' if quick else ''}, "
        f"`stack=True`, one chunk; medians of {repeats} interleaved repeats.",
        "",
        "| dtype | mmpar collate (ms) | pad+stack (ms) | floor (ms) | speed-up vs pad+stack | "
        "mmpar / floor |",
        "|---|---|---|---|---|---|",
    ]
    verdicts = []
    for dtype in (torch.float32, torch.uint8):
        images = make_images(dtype, scale=scale)
        samples = [{"img": DataContainer(t, stack=True)} for t in images]
        med = compare(
            {
                "mmpar": lambda: collate(samples, samples_per_gpu=BATCH),
                "pad+stack": lambda: pad_then_stack(images),
                "floor": lambda: floor(images),
            },
            repeats,
        )
        speedup = med["pad+stack"] / med["mmpar"]
        vs_floor = med["mmpar"] / med["floor"]
        name = str(dtype).replace("torch.", "")
        lines.append(
            f"| {name} | {med['mmpar'] * 1e3:.1f} | {med['pad+stack'] * 1e3:.1f} | "
            f"{med['floor'] * 1e3:.1f} | {speedup:.2f}x | {vs_floor:.2f}x |"
        )
        verdicts.append(
            f"- {name}: speed-up vs pad+stack {speedup:.2f}x (target >= {TARGET_VS_PAD_STACK}x: "
            f"{'met' if speedup >= TARGET_VS_PAD_STACK else 'NOT met'}); mmpar / floor "
            f"{vs_floor:.2f}x (target <= {TARGET_VS_FLOOR[dtype]}x: "
            f"{'met' if vs_floor <= TARGET_VS_FLOOR[dtype] else 'NOT met'})"
        )
    lines += [""] + verdicts + [""]
    images = make_images(torch.uint8, scale=scale)
    rate = loader_throughput(images, epochs=1 if quick else 3)
    lines.append(f"DataLoader, 2 workers, uint8 batches of {BATCH}: {rate:.0f} images/s.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
