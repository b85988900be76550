"""Loader section: images/s of a detection loader, per batching, with 2 workers.

``build_dataloader`` over ``SyntheticShapes`` (images of 64-160 px in both
orientations, its default pipeline: flip, normalize, format into DataContainers
that collate pads to multiples of 32), 8 samples per GPU, 2 workers, for random
batching, orientation grouping and size-aware grouping; side by side in one run
(variants alternate epoch by epoch), median images/s over epochs, plus the
epoch's padded share.
"""

from __future__ import annotations

import statistics
import time
from typing import Dict, List

from mmpar.data import SyntheticShapes, build_dataloader, loader_padding_ratio, set_loader_epoch

SAMPLES_PER_GPU = 8
WORKERS = 2


def _epoch_rate(loader, epoch: int) -> float:
    set_loader_epoch(loader, epoch)
    images, start = 0, time.perf_counter()
    for batch in loader:
        images += batch["img"].data[0].shape[0]
    return images / (time.perf_counter() - start)


def run(quick: bool = False) -> str:
    n, epochs = (64, 1) if quick else (1024, 5)
    dataset = SyntheticShapes(num_samples=n)
    loaders = {
        "random batching": _random_loader(dataset),
        "orientation grouping": build_dataloader(
            dataset, SAMPLES_PER_GPU, WORKERS, seed=0, persistent_workers=True
        ),
        "size-aware grouping": build_dataloader(
            dataset, SAMPLES_PER_GPU, WORKERS, seed=0, persistent_workers=True, size_aware=True
        ),
    }
    rates: Dict[str, List[float]] = {name: [] for name in loaders}
    for name, loader in loaders.items():  # start the workers
        _epoch_rate(loader, 0)
    for epoch in range(1, epochs + 1):
        for name, loader in loaders.items():
            rates[name].append(_epoch_rate(loader, epoch))
    lines = [
        "## Detection loader throughput",
        "",
        f"`build_dataloader(SyntheticShapes({n}), samples_per_gpu={SAMPLES_PER_GPU}, "
        f"workers_per_gpu={WORKERS})` with its default pipeline; median images/s over "
        f"{epochs} epochs, the variants alternating.",
        "",
        "| batching | images/s | padded share |",
        "|---|---:|---:|",
    ]
    for name, loader in loaders.items():
        share = loader_padding_ratio(loader).ratio
        lines.append(f"| {name} | {statistics.median(rates[name]):,.0f} | {share:.1%} |")
    return "\n".join(lines) + "\n"


class _NoGroups:
    """The dataset without ``flag`` / ``img_sizes``: build_dataloader then batches at random."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        return self.dataset[i]


def _random_loader(dataset):
    return build_dataloader(
        _NoGroups(dataset), SAMPLES_PER_GPU, WORKERS, seed=0, persistent_workers=True
    )


if __name__ == "__main__":
    print(run())
