"""Benchmark section: padded share per epoch for random, orientation and size-aware batching.

5,000 image sizes with COCO-like aspect ratios (fixed seed), resized to fit
1333x800 keeping the ratio, batched 8 per GPU by three samplers; the padding
of every batch is counted with :mod:`mmpar.data.padding_stats`. No image is
loaded: the dataset only exposes ``img_sizes`` and ``flag``.

Run directly (``python tools/bench/padding.py``) or through ``tools/benchmark.py``.
"""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from mmpar.data.padding_stats import PaddingStats, padding_counts
from mmpar.data.samplers import GroupSampler

#: (w / h, share of images); each ratio is jittered by +-10%.
ASPECTS: Tuple[Tuple[float, float], ...] = (
    (4 / 3, 0.40),
    (3 / 2, 0.15),
    (16 / 9, 0.10),
    (1.0, 0.05),
    (3 / 4, 0.20),
    (2 / 3, 0.10),
)
SCALE = (1333, 800)  # (long side, short side) limits, as mmdet's Resize(keep_ratio=True)
SAMPLES_PER_GPU = 8
TARGET_VS_RANDOM = 0.40
TARGET_VS_ORIENTATION = 0.15


def coco_like_sizes(n: int, seed: int = 0) -> np.ndarray:
    """Draw ``n`` image sizes and resize them to fit :data:`SCALE` keeping the ratio.

    Returns:
        Integer array ``(n, 2)`` of ``(h, w)`` after resizing.
    """
    rng = np.random.default_rng(seed)
    ratios = np.array([r for r, _ in ASPECTS])
    shares = np.array([p for _, p in ASPECTS])
    aspect = rng.choice(ratios, size=n, p=shares / shares.sum()) * rng.uniform(0.9, 1.1, size=n)
    long_side = rng.integers(480, 641, size=n).astype(np.float64)  # original sizes, COCO-like
    h = np.where(aspect >= 1, long_side / aspect, long_side)
    w = np.where(aspect >= 1, long_side, long_side * aspect)
    scale = np.minimum(SCALE[0] / np.maximum(h, w), SCALE[1] / np.minimum(h, w))
    return np.stack([np.floor(h * scale + 0.5), np.floor(w * scale + 0.5)], axis=1).astype(np.int64)


class SizesOnly:
    """A dataset with sizes and orientation flags but no images."""

    def __init__(self, sizes: Optional[np.ndarray], n: int) -> None:
        self.img_sizes = sizes
        self.flag = None if sizes is None else (sizes[:, 1] > sizes[:, 0]).astype(np.int64)
        self._n = n

    def __len__(self) -> int:
        return self._n


def epoch_stats(
    sampler: GroupSampler, sizes: np.ndarray, epoch: int, size_divisor: Optional[int]
) -> PaddingStats:
    """Padding of one epoch of ``sampler`` (a batch sampler; each batch is one chunk per GPU)."""
    sampler.set_epoch(epoch)
    stats = PaddingStats()
    for batch in sampler:
        per_gpu = sampler.samples_per_gpu
        chunks = [sizes[batch[s : s + per_gpu]] for s in range(0, len(batch), per_gpu)]
        stats = stats + padding_counts(chunks, size_divisor=size_divisor)
    return stats


def measure(
    n: int, epochs: int, seed: int = 0
) -> Dict[Tuple[str, Optional[int]], List[PaddingStats]]:
    """Padding per epoch of every (method, size_divisor)."""
    sizes = coco_like_sizes(n, seed)
    samplers = {
        "random": GroupSampler(SizesOnly(None, n), SAMPLES_PER_GPU, seed=seed, batch_sampler=True),
        "orientation": GroupSampler(
            SizesOnly(sizes, n), SAMPLES_PER_GPU, seed=seed, batch_sampler=True
        ),
        "size-aware": GroupSampler(
            SizesOnly(sizes, n), SAMPLES_PER_GPU, seed=seed, size_aware=True, batch_sampler=True
        ),
    }
    return {
        (name, divisor): [epoch_stats(s, sizes, e, divisor) for e in range(epochs)]
        for name, s in samplers.items()
        for divisor in (None, 32)
    }


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def run(quick: bool = False) -> str:
    """Measure and return the Markdown section."""
    n, epochs = (1000, 2) if quick else (5000, 5)
    results = measure(n, epochs)
    share = {k: _median([s.ratio for s in v]) for k, v in results.items()}
    padded = {k: _median([s.padded_pixels for s in v]) for k, v in results.items()}
    labels = {
        "random": "random batching",
        "orientation": "orientation grouping (`GroupSampler`)",
        "size-aware": "size-aware grouping (`GroupSampler(size_aware=True)`)",
    }
    lines = [
        "## Padding per epoch",
        "",
        f"{n:,} COCO-like image sizes resized to fit 1333x800, {SAMPLES_PER_GPU} samples per GPU; "
        f"padded share of the batch pixels, median over {epochs} epochs.",
        "",
        "| batching | padded share | padded Mpx / epoch "
        "| padded share, size_divisor=32 | padded Mpx / epoch, size_divisor=32 |",
        "|---|---|---|---|---|",
    ]
    for name, label in labels.items():
        lines.append(
            f"| {label} | {share[name, None]:.1%} | {padded[name, None] / 1e6:,.0f} "
            f"| {share[name, 32]:.1%} | {padded[name, 32] / 1e6:,.0f} |"
        )
    lines.append("")
    for divisor in (None, 32):
        tag = "no divisor" if divisor is None else f"size_divisor={divisor}"
        for base, target in (("random", TARGET_VS_RANDOM), ("orientation", TARGET_VS_ORIENTATION)):
            cut = 1 - padded["size-aware", divisor] / padded[base, divisor]
            verdict = "met" if cut >= target else "not met"
            lines.append(
                f"- {tag}: size-aware pads {cut:.1%} fewer pixels than {base} "
                f"(target >= {target:.0%}): **{verdict}**"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
