"""Padding once: a size_divisor on the image containers gives the batch of Pad in the workers.

The default pipelines used to pad every image with ``Pad(size_divisor=32)`` in
the DataLoader workers and then again into the batch in ``collate``; they now
give the containers ``size_divisor=32`` and pad once. These tests run the old
and the new pipelines through real DataLoaders with 2 workers and compare the
batches: same shapes, values, padding values, metas.
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import torch

from mmpar.data import SyntheticShapes, build_dataloader
from mmpar.data.datasets.base import IMAGENET_MEAN, IMAGENET_STD
from mmpar.data_container import DataContainer
from mmpar.device_norm import normalize_images

KEYS = ["img", "gt_bboxes", "gt_labels"]


def norm(on_device: bool = False) -> Dict[str, Any]:
    return dict(
        type="Normalize",
        mean=list(IMAGENET_MEAN),
        std=list(IMAGENET_STD),
        to_rgb=True,
        on_device=on_device,
    )


#: SyntheticShapes' default training pipeline before padding once.
OLD_DEFAULT = [
    dict(type="LoadImageFromArray"),
    dict(type="LoadAnnotations"),
    dict(type="RandomFlip", flip_ratio=0.5),
    norm(),
    dict(type="Pad", size_divisor=32),
    dict(type="DefaultFormatBundle"),
    dict(type="Collect", keys=KEYS),
]


def seg_pipeline(tail: List[Dict[str, Any]], on_device: bool = False) -> List[Dict[str, Any]]:
    """Load with the segmentation map, flip, normalize, then ``tail`` and collect."""
    head = [
        dict(type="LoadImageFromArray"),
        dict(type="LoadAnnotations", with_seg=True),
        dict(type="RandomFlip", flip_ratio=0.5),
        norm(on_device),
    ]
    return head + tail + [dict(type="Collect", keys=KEYS + ["gt_semantic_seg"])]


def batches(pipeline: Any, n: int = 12) -> List[Dict[str, Any]]:
    """Every batch of a 2-worker loader: 2 chunks of 2 images, in a fixed order."""
    dataset = SyntheticShapes(num_samples=n, min_size=40, max_size=100, pipeline=pipeline)
    loader = build_dataloader(
        dataset, samples_per_gpu=2, workers_per_gpu=1, num_gpus=2, shuffle=False, seed=0
    )
    assert loader.num_workers == 2
    return list(loader)


def assert_same(a: Any, b: Any, where: str = "batch") -> None:
    """``a`` and ``b`` equal all the way down: tensors bit for bit, with dtypes and shapes."""
    if isinstance(a, DataContainer):
        assert isinstance(b, DataContainer), where
        assert (a.stack, a.cpu_only, a.padding_value, a.pad_dims) == (
            b.stack,
            b.cpu_only,
            b.padding_value,
            b.pad_dims,
        ), where
        assert_same(a.data, b.data, f"{where}.data")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, where
        assert a.shape == b.shape, f"{where}: {tuple(a.shape)} != {tuple(b.shape)}"
        assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
        assert a.dtype == b.dtype, where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_default_pipeline_pads_once_and_gives_the_old_batches() -> None:
    new_ds = SyntheticShapes(num_samples=4)
    assert "Pad" not in repr(new_ds.pipeline)
    assert "DefaultFormatBundle(pad_val={'img': 0, 'seg': 255}, size_divisor=32)" in repr(
        new_ds.pipeline
    )
    old, new = batches(OLD_DEFAULT), batches(None)
    assert len(old) == len(new) == 3
    flips, padded = set(), 0
    for i, (a, b) in enumerate(zip(old, new)):
        assert_same(a, b, f"batch {i}")
        for chunk, metas in zip(b["img"].data, b["img_metas"].data):
            for k, meta in enumerate(metas):
                flips.add(meta["flip"])
                h, w = meta["img_shape"][:2]
                ph, pw = meta["pad_shape"][:2]
                assert (ph, pw) == (-(-h // 32) * 32, -(-w // 32) * 32)
                assert chunk.shape[2] % 32 == 0 and chunk.shape[3] % 32 == 0
                padded += chunk.shape[2] * chunk.shape[3] - h * w
                assert (chunk[k, :, h:] == 0).all() and (chunk[k, :, :, w:] == 0).all()
    assert flips == {False, True} and padded > 0  # both paths exercised


def test_custom_pad_values_and_seg_maps_through_either_path() -> None:
    pad = dict(type="Pad", size_divisor=32, pad_val=7, seg_pad_val=250)
    bundle = dict(type="DefaultFormatBundle", pad_val=dict(img=7, seg=250))
    two_pads = batches(seg_pipeline([pad, bundle]))
    once = batches(seg_pipeline([dict(bundle, size_divisor=32)]))
    # Pad kept in the pipeline, followed by containers with a size_divisor: same batch too.
    pad_then_divisor = batches(seg_pipeline([pad, dict(bundle, size_divisor=32)]))
    for i, (a, b, c) in enumerate(zip(two_pads, once, pad_then_divisor)):
        assert_same(a, b, f"batch {i} (pad once)")
        assert_same(a, c, f"batch {i} (Pad, then size_divisor)")
        for img, seg, metas in zip(b["img"].data, b["gt_semantic_seg"].data, b["img_metas"].data):
            assert seg.shape[2:] == img.shape[2:] and seg.shape[:2] == (2, 1)
            for k, meta in enumerate(metas):
                h, w = meta["img_shape"][:2]
                assert (img[k, :, h:] == 7).all() and (img[k, :, :, w:] == 7).all()
                assert (seg[k, :, h:] == 250).all() and (seg[k, :, :, w:] == 250).all()
                assert seg[k, :, :h, :w].max() < 250  # the map itself is intact


def test_on_device_normalization_fills_the_same_margins() -> None:
    # Worker-side, the margin of a normalized image is pad_val; on the device the raw
    # margin (0) is normalized too and then overwritten: the two paths must agree.
    pad = dict(type="Pad", size_divisor=32, pad_val=-1.5)
    bundle = dict(type="DefaultFormatBundle", pad_val=dict(img=-1.5))
    worker = batches(seg_pipeline([pad, bundle]))
    old = batches(seg_pipeline([pad, bundle], on_device=True))
    new = batches(seg_pipeline([dict(bundle, size_divisor=32)], on_device=True))
    for a, b, ref in zip(old, new, worker):
        for img_a, img_b, img_ref, metas_a, metas_b in zip(
            a["img"].data, b["img"].data, ref["img"].data, a["img_metas"].data, b["img_metas"].data
        ):
            assert img_b.dtype == torch.uint8 and img_a.shape == img_b.shape
            out_a, out_b = normalize_images(img_a, metas_a), normalize_images(img_b, metas_b)
            assert torch.equal(out_a, out_b)
            torch.testing.assert_close(out_b, img_ref, rtol=0, atol=1e-5)
            assert [m["pad_shape"] for m in metas_a] == [m["pad_shape"] for m in metas_b]
