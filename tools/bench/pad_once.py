"""Pad-once section: loader throughput with Pad in the workers against size_divisor in collate.

Detection-size images (those of the collate section: 3 x (600-800) x (900-1333)
uint8, 16 distinct images) through a detection pipeline, batches of 16 collated
in a DataLoader with 2 workers. Two pipelines, otherwise equal:

* ``Pad in workers``: ``Normalize``, ``Pad(size_divisor=32)``,
  ``DefaultFormatBundle()``, ``Collect``: every image is copied into a padded
  array in the worker, then copied again into the batch by collate;
* ``pad once``: ``Normalize``, ``DefaultFormatBundle(size_divisor=32)``,
  ``Collect`` (mmpar's default): collate pads each image once, into the batch.

Both give the same batch (``tests/test_pad_once.py``). Each pipeline is measured
with worker-side normalization (float32 batches, the default without CUDA) and
with ``Normalize(on_device=True)`` (uint8 batches, the default with CUDA). The
four loaders keep their workers and alternate epoch by epoch; median images/s,
and the median of the per-round ratios (each round runs every loader once, so a
ratio compares epochs measured seconds apart, under the same load).
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import Any, Dict, List

import numpy as np
from torch.utils.data import DataLoader, Dataset

from mmpar import collate
from mmpar.data.transforms import Compose

BATCH = 16
WORKERS = 2
MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]


def make_images(n: int, scale: float, seed: int = 0) -> List[np.ndarray]:
    """``n`` uint8 HWC images of (600-800) x (900-1333) pixels, times ``scale``."""
    rng = np.random.default_rng(seed)
    sizes = [
        (int(rng.integers(600, 801) * scale), int(rng.integers(900, 1334) * scale))
        for _ in range(n)
    ]
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]


def pipeline(pad_in_workers: bool, on_device: bool) -> List[Dict[str, Any]]:
    steps: List[Dict[str, Any]] = [
        dict(type="LoadImageFromArray"),
        dict(type="Normalize", mean=MEAN, std=STD, to_rgb=True, on_device=on_device),
    ]
    if pad_in_workers:
        steps += [dict(type="Pad", size_divisor=32), dict(type="DefaultFormatBundle")]
    else:
        steps += [dict(type="DefaultFormatBundle", size_divisor=32)]
    return steps + [dict(type="Collect", keys=["img"])]


class _Images(Dataset):
    """``length`` samples cycling over ``images``, each through ``steps``."""

    def __init__(self, images: List[np.ndarray], length: int, steps: List[dict]) -> None:
        self.images, self.length, self.pipeline = images, length, Compose(steps)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        img = self.images[i % len(self.images)]
        return self.pipeline(dict(img=img, img_info=dict(filename=f"{i}.png")))


def _loader(images: List[np.ndarray], length: int, steps: List[dict]) -> DataLoader:
    return DataLoader(
        _Images(images, length, steps),
        batch_size=BATCH,
        num_workers=WORKERS,
        collate_fn=partial(collate, samples_per_gpu=BATCH),
        persistent_workers=True,
    )


def _epoch_rate(loader: DataLoader) -> float:
    images, start = 0, time.perf_counter()
    for batch in loader:
        images += batch["img"].data[0].shape[0]
    return images / (time.perf_counter() - start)


def worker_ms_per_image(images: List[np.ndarray], steps: List[dict]) -> float:
    """Milliseconds of pipeline work per image in this process (what each worker does)."""
    data = _Images(images, len(images), steps)
    start = time.perf_counter()
    for i in range(len(data)):
        data[i]
    return (time.perf_counter() - start) / len(data) * 1e3


def run(quick: bool = False) -> str:
    scale, length, epochs = (0.25, 2 * BATCH, 1) if quick else (1.0, 4 * BATCH, 9)
    images = make_images(BATCH, scale)
    variants = {
        (dtype, name): _loader(images, length, pipeline(name == "Pad in workers", on_device))
        for dtype, on_device in (("float32", False), ("uint8", True))
        for name in ("Pad in workers", "pad once")
    }
    shapes = {
        key: tuple(next(iter(loader))["img"].data[0].shape) for key, loader in variants.items()
    }
    rates: Dict[Any, List[float]] = {key: [] for key in variants}
    for _ in range(epochs):
        for key, loader in variants.items():
            rates[key].append(_epoch_rate(loader))
    lines = [
        "## Pad once: padding in the workers against padding in collate",
        "",
        f"{BATCH} images of 3 x (600-800) x (900-1333)"
        f"{' (quick: scaled 0.25)' if quick else ''}, "
        f"{length} samples per epoch, batches of {BATCH} (one chunk) from a DataLoader with "
        f"{WORKERS} workers; median images/s over {epochs} epochs, the four loaders "
        "alternating; the ratio is the median of the per-round ratios.",
        "",
        "| batch dtype | Pad in workers (images/s) | pad once (images/s) "
        "| pad once / Pad in workers, per round |",
        "|---|---:|---:|---:|",
    ]
    for dtype in ("float32", "uint8"):
        old_rates, new_rates = rates[(dtype, "Pad in workers")], rates[(dtype, "pad once")]
        old, new = statistics.median(old_rates), statistics.median(new_rates)
        ratio = statistics.median(n / o for n, o in zip(new_rates, old_rates))
        if shapes[(dtype, "Pad in workers")] != shapes[(dtype, "pad once")]:
            raise RuntimeError(f"pad_once: the two pipelines batch {dtype} images differently")
        lines.append(f"| {dtype} | {old:,.1f} | {new:,.1f} | {ratio:.2f}x |")
    lines += ["", f"Batch shape (both pipelines): {shapes[('float32', 'pad once')]}.", ""]
    # The pipeline alone, in this process: the work taken out of each worker.
    work: Dict[Any, List[float]] = {key: [] for key in variants}
    for _ in range(3 if quick else 7):
        for dtype, name in variants:
            steps = pipeline(name == "Pad in workers", dtype == "uint8")
            work[(dtype, name)].append(worker_ms_per_image(images, steps))
    lines += [
        "Pipeline work per image in one process (no loader), median of interleaved repeats:",
        "",
        "| batch dtype | Pad in workers (ms) | pad once (ms) |",
        "|---|---:|---:|",
    ]
    for dtype in ("float32", "uint8"):
        old, new = (statistics.median(work[(dtype, n)]) for n in ("Pad in workers", "pad once"))
        lines.append(f"| {dtype} | {old:.2f} | {new:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
