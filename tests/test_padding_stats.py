"""Padding report on real collated batches, on sizes, over a loader; the bench section."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from mmpar.collate import collate
from mmpar.data import build_dataloader
from mmpar.data.padding_stats import (
    PaddingStats,
    loader_padding_ratio,
    padding_counts,
    padding_ratio,
)
from mmpar.data_container import DataContainer

REPO = Path(__file__).resolve().parents[1]


def _sample(h: int, w: int, size_divisor=None) -> dict:
    return {
        "img": DataContainer(torch.ones(3, h, w), stack=True, size_divisor=size_divisor),
        "img_metas": DataContainer({"img_shape": (h, w, 3)}, cpu_only=True),
    }


class Images(Dataset):
    def __init__(self, sizes) -> None:
        self.img_sizes = np.asarray(sizes)

    def __len__(self) -> int:
        return len(self.img_sizes)

    def __getitem__(self, i: int) -> dict:
        h, w = (int(v) for v in self.img_sizes[i])
        return _sample(h, w)


def test_padding_of_a_real_collated_batch():
    batch = collate([_sample(4, 6), _sample(2, 3), _sample(5, 5)], samples_per_gpu=2)
    # chunk 0: (2, 3, 4, 6) holds 24 + 6 real pixels of 48; chunk 1: (1, 3, 5, 5) is full
    stats = padding_counts(batch)
    assert stats == PaddingStats(padded_pixels=18, total_pixels=73, batches=1)
    assert padding_ratio(batch) == pytest.approx(18 / 73)
    assert padding_ratio(batch["img"], img_metas=batch["img_metas"]) == pytest.approx(18 / 73)
    real = sum(
        int((c[:, 0] != 0).sum()) for c in batch["img"].data
    )  # the images are ones, padding zeros
    assert stats.total_pixels - stats.padded_pixels == real


def test_size_divisor_counts_as_padding():
    batch = collate([_sample(30, 33, 32), _sample(32, 32, 32)], samples_per_gpu=2)
    assert batch["img"].data[0].shape[-2:] == (32, 64)
    expected = 2 * 32 * 64 - (30 * 33 + 32 * 32)
    assert padding_counts(batch).padded_pixels == expected
    assert padding_counts([[(30, 33), (32, 32)]], size_divisor=32).padded_pixels == expected


def test_sizes_form():
    assert padding_ratio([[(2, 2), (1, 1)], [(3, 3)]]) == pytest.approx(3 / 17)
    assert padding_ratio([np.array([[2, 2], [2, 2]])]) == 0.0
    assert PaddingStats().ratio == 0.0


def test_loader_padding_ratio_over_an_epoch():
    sizes = [(8, 8), (8, 4), (4, 8), (2, 2), (6, 6), (8, 8)]
    loader = build_dataloader(Images(sizes), 2, 0, shuffle=False, seed=0)
    stats = loader_padding_ratio(loader)
    assert stats.batches == 3
    # sequential batches: [(8,8),(8,4)], [(4,8),(2,2)], [(6,6),(8,8)]
    real = sum(h * w for h, w in sizes)
    total = 2 * 64 + 2 * 32 + 2 * 64
    assert (stats.padded_pixels, stats.total_pixels) == (total - real, total)
    assert loader_padding_ratio(loader, max_batches=1).batches == 1
    assert loader_padding_ratio(loader, max_batches=0) == PaddingStats()
    endless = build_dataloader(
        Images(sizes), 2, 0, shuffle=False, seed=0, runner_type="IterBasedRunner"
    )
    assert (
        loader_padding_ratio(endless) == stats
    )  # one pass: the same sequential batches, then stop


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda b: padding_counts(b["img"]), ValueError, "true image sizes are unknown"),
        (
            lambda b: padding_counts(b, size_divisor=32),
            ValueError,
            "size_divisor is for sizes input only",
        ),
        (lambda b: padding_counts(b, key="image"), ValueError, "batch has no field 'image'"),
        (lambda b: padding_counts(b["img"], img_metas=[[{}]]), ValueError, "no 'img_shape'"),
        (
            lambda b: padding_counts(b["img"], img_metas=[[{"img_shape": (9, 9)}]]),
            ValueError,
            "does not fit",
        ),
        (
            lambda b: padding_counts(b["img"], img_metas=[[], []]),
            ValueError,
            "1 chunks but img_metas has 2",
        ),
        (lambda b: padding_counts([[]]), ValueError, "empty chunk"),
        (lambda b: padding_counts([[(0, 3)]]), ValueError, "positive"),
        (lambda b: padding_counts("sizes"), TypeError, "list of chunks"),
        (
            lambda b: padding_counts([[(2, 3)]], size_divisor=0),
            ValueError,
            "size_divisor must be a positive int",
        ),
        (lambda b: loader_padding_ratio([], max_batches=-1), ValueError, "max_batches must be"),
    ],
)
def test_bad_input(call, error, match):
    batch = collate([_sample(4, 6)], samples_per_gpu=1)
    with pytest.raises(error, match=match):
        call(batch)


def test_padding_bench_section_quick():
    spec = importlib.util.spec_from_file_location(
        "bench_padding", REPO / "tools" / "bench" / "padding.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.run(quick=True)
    assert text.startswith("## ")
    for row in ("| random batching |", "| orientation grouping", "| size-aware grouping"):
        assert row in text
    assert text.count("(target >=") == 4 and "not met" not in text
