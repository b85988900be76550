"""Tests of SyntheticShapes and the shared dataset behaviour."""

from __future__ import annotations

from functools import partial
from typing import Any, List

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from mmpar.collate import collate
from mmpar.data.datasets import SyntheticShapes
from mmpar.data_container import DataContainer
from mmpar.registry import DATASETS

RAW = [
    dict(type="LoadImageFromArray"),
    dict(type="LoadAnnotations"),
    dict(type="DefaultFormatBundle"),
    dict(type="Collect", keys=["img", "gt_bboxes", "gt_labels"]),
]


def first_item(batch: List[Any]) -> Any:
    return batch[0]


def test_sample_is_a_function_of_seed_and_index():
    a, b = SyntheticShapes(num_samples=6, seed=4), SyntheticShapes(num_samples=50, seed=4)
    for i in range(6):
        x, y, z = a.render(i), a.render(i), b.render(i)
        for key in ("img", "bboxes", "labels", "masks", "seg"):
            np.testing.assert_array_equal(x[key], y[key])
            np.testing.assert_array_equal(x[key], z[key])
    other = SyntheticShapes(num_samples=6, seed=5)
    assert any(a.render(i)["img"].shape != other.render(i)["img"].shape for i in range(6))


def test_samples_equal_in_worker_processes():
    ds = SyntheticShapes(num_samples=6, pipeline=RAW)
    loader = DataLoader(ds, batch_size=1, num_workers=2, collate_fn=first_item, timeout=60)
    for i, sample in enumerate(loader):
        local = ds[i]
        torch.testing.assert_close(sample["img"].data, local["img"].data, rtol=0, atol=0)
        torch.testing.assert_close(
            sample["gt_bboxes"].data, local["gt_bboxes"].data, rtol=0, atol=0
        )
        torch.testing.assert_close(
            sample["gt_labels"].data, local["gt_labels"].data, rtol=0, atol=0
        )


def test_sizes_flags_and_orientations():
    ds = SyntheticShapes(num_samples=40, min_size=32, max_size=96)
    assert ds.img_sizes.shape == (40, 2) and ds.flag.dtype == np.uint8 and len(ds) == 40
    for i in range(40):
        h, w = ds.render(i)["img"].shape[:2]
        assert tuple(ds.img_sizes[i]) == (h, w) and 32 <= min(h, w) and max(h, w) <= 96
        assert ds.flag[i] == (w / h > 1)
        info = ds.get_img_info(i)
        assert (info["height"], info["width"]) == (h, w)
    assert 0 < ds.flag.sum() < 40


def test_boxes_are_tight_around_the_drawn_shapes():
    ds = SyntheticShapes(num_samples=30, num_classes=5, max_objects=5, seed=1)
    for i in range(len(ds)):
        s = ds.render(i)
        h, w = s["img"].shape[:2]
        assert s["img"].dtype == np.uint8 and s["img"].shape[2] == 3
        assert 1 <= len(s["bboxes"]) <= 5 and len(s["labels"]) == len(s["bboxes"]) == len(
            s["masks"]
        )
        assert s["bboxes"].dtype == np.float32 and s["labels"].dtype == np.int64
        assert ((s["labels"] >= 0) & (s["labels"] < 5)).all()
        for box, label, mask in zip(s["bboxes"], s["labels"], s["masks"]):
            x1, y1, x2, y2 = box
            assert 0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h
            ys, xs = np.nonzero(mask)
            np.testing.assert_array_equal(box, [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
            colors = np.unique(s["img"][mask], axis=0)
            assert len(colors) == 1 and colors.max() >= 190  # one solid bright colour
            assert (s["seg"][mask] == label + 1).all()
            assert max(x2 - x1, y2 - y1) >= 0.1 * min(h, w)
        # Shapes do not overlap, so each pixel belongs to at most one object.
        assert s["masks"].sum(0).max() <= 1
        assert (s["seg"] > 0).sum() == s["masks"].sum()


def test_classes_have_distinct_fill_ratios():
    ds = SyntheticShapes(num_samples=40, num_classes=5, min_size=96, max_size=160)
    fill = {k: [] for k in range(5)}
    for i in range(len(ds)):
        s = ds.render(i)
        for box, label, mask in zip(s["bboxes"], s["labels"], s["masks"]):
            fill[int(label)].append(mask.sum() / ((box[2] - box[0]) * (box[3] - box[1])))
    assert ds.CLASSES == ("rectangle", "ellipse", "triangle", "cross", "ring")
    means = {ds.CLASSES[k]: float(np.mean(v)) for k, v in fill.items()}
    assert means["rectangle"] == 1.0
    assert abs(means["ellipse"] - np.pi / 4) < 0.05
    assert abs(means["triangle"] - 0.5) < 0.08
    assert abs(means["cross"] - 5 / 9) < 0.08
    assert abs(means["ring"] - 0.64 * np.pi / 4) < 0.08


def test_default_pipelines():
    train = SyntheticShapes(num_samples=4)
    sample = train[0]
    assert set(sample) == {"img_metas", "img", "gt_bboxes", "gt_labels"}
    assert sample["img"].data.dtype == torch.float32 and sample["img"].stack
    meta = sample["img_metas"].data
    assert meta["img_shape"] == tuple(train.img_sizes[0]) + (3,)
    # Not padded in the pipeline: collate pads the image into the batch, to pad_shape.
    h, w = meta["img_shape"][:2]
    assert meta["pad_shape"] == (-(-h // 32) * 32, -(-w // 32) * 32, 3)
    assert tuple(sample["img"].data.shape[1:]) == (h, w) and sample["img"].size_divisor == 32
    test = SyntheticShapes(num_samples=4, test_mode=True)
    assert set(test[1]) == {"img_metas", "img"} and test[1]["img_metas"].data["flip"] is False
    assert repr(test) == "SyntheticShapes(4 images, 3 classes, test mode)"


def test_pipeline_moves_boxes_with_the_rectangles():
    # Rectangles only: after resize and flip every box must still enclose its solid rectangle.
    pipeline = [
        dict(type="LoadImageFromArray"),
        dict(type="LoadAnnotations"),
        dict(type="Resize", img_scale=(150, 90)),
        dict(type="RandomFlip", flip_ratio=1.0),
        dict(type="Pad", size_divisor=32),
        dict(type="DefaultFormatBundle"),
        dict(type="Collect", keys=["img", "gt_bboxes"]),
    ]
    ds = SyntheticShapes(num_samples=10, num_classes=1, pipeline=pipeline)
    for i in range(len(ds)):
        out = ds[i]
        img = out["img"].data.permute(1, 2, 0).numpy().astype(int)
        h, w = out["img_metas"].data["img_shape"][:2]
        raw = ds.render(i)
        colors = raw["img"][raw["masks"].any(0)].astype(int)
        for box in out["gt_bboxes"].data.numpy():
            x1, y1, x2, y2 = box
            assert 0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h
            inner = img[int(np.ceil(y1)) + 1 : int(y2) - 1, int(np.ceil(x1)) + 1 : int(x2) - 1]
            assert inner.size > 0
            # Inside, the pixels are one of the shapes' solid colours.
            assert np.abs(inner - inner[0, 0]).max() <= 1
            assert np.abs(colors - inner[0, 0]).sum(1).min() <= 3
            # Just outside (where inside the image), the background is darker.
            if x2 + 2 < w and y2 - y1 > 4:
                outside = img[int(np.ceil(y1)) + 1 : int(y2) - 1, int(x2) + 1]
                assert (np.abs(outside - inner[0, 0]).sum(1) > 30).any()


def test_dataloader_with_workers_and_collate():
    pipeline = [
        dict(type="LoadImageFromArray"),
        dict(type="LoadAnnotations", with_seg=True),
        dict(type="RandomFlip", flip_ratio=0.5),
        dict(type="DefaultFormatBundle", size_divisor=32),
        dict(type="Collect", keys=["img", "gt_bboxes", "gt_labels", "gt_semantic_seg"]),
    ]
    ds = SyntheticShapes(num_samples=8, min_size=40, max_size=90, pipeline=pipeline)
    loader = DataLoader(
        ds,
        batch_size=4,
        num_workers=2,
        collate_fn=partial(collate, samples_per_gpu=2),
        generator=torch.Generator().manual_seed(0),
        timeout=60,
    )
    seen = 0
    for batch in loader:
        img, metas, boxes, labels, seg = (
            batch[k] for k in ("img", "img_metas", "gt_bboxes", "gt_labels", "gt_semantic_seg")
        )
        assert isinstance(img, DataContainer) and img.stack and len(img.data) == 2
        assert metas.cpu_only and len(metas.data) == 2
        for chunk, chunk_metas, chunk_boxes, chunk_labels, chunk_seg in zip(
            img.data, metas.data, boxes.data, labels.data, seg.data
        ):
            n, c, ph, pw = chunk.shape
            assert (
                n == 2 and c == 3 and ph % 32 == 0 and pw % 32 == 0 and chunk.dtype == torch.uint8
            )
            assert chunk_seg.shape == (2, 1, ph, pw)
            assert len(chunk_boxes) == len(chunk_labels) == len(chunk_metas) == 2
            for k, meta in enumerate(chunk_metas):
                h, w, _ = meta["img_shape"]
                index = seen + k
                assert (h, w) == tuple(ds.img_sizes[index])
                raw = ds.render(index)["img"]
                if meta["flip"]:
                    raw = raw[:, ::-1]
                np.testing.assert_array_equal(chunk[k, :, :h, :w].permute(1, 2, 0).numpy(), raw)
                assert (chunk[k, :, h:, :] == 0).all() and (chunk[k, :, :, w:] == 0).all()
                assert (chunk_seg[k, :, h:, :] == 255).all() and (
                    chunk_seg[k, :, :, w:] == 255
                ).all()
                assert chunk_boxes[k].dtype == torch.float32 and chunk_boxes[k].shape[1] == 4
                assert (chunk_boxes[k][:, 2] <= w).all() and (chunk_boxes[k][:, 3] <= h).all()
            seen += 2
    assert seen == len(ds)


def drop_index_zero(results: dict):
    return None if results["img_info"]["filename"].endswith("000000.png") else results


def test_dropped_sample_is_replaced_in_training_and_raises_in_test_mode():
    pipeline = [drop_index_zero] + RAW
    train = SyntheticShapes(num_samples=10, pipeline=pipeline)
    out = train[0]
    filename = out["img_metas"].data["ori_filename"]
    replaced = int(filename[-10:-4])
    assert replaced != 0 and train.flag[replaced] == train.flag[0]
    test = SyntheticShapes(num_samples=10, pipeline=pipeline, test_mode=True)
    with pytest.raises(RuntimeError, match="dropped test sample 0"):
        test[0]
    always_none = SyntheticShapes(num_samples=3, pipeline=[lambda r: None])
    with pytest.raises(RuntimeError, match="in a row"):
        always_none[1]


def test_indexing_and_arguments():
    ds = SyntheticShapes(num_samples=3, pipeline=RAW)
    torch.testing.assert_close(ds[-1]["img"].data, ds[2]["img"].data)
    assert ds.get_img_info(-1)["filename"] == ds.get_img_info(2)["filename"]
    with pytest.raises(IndexError, match="out of range"):
        ds[3]
    with pytest.raises(TypeError, match="index"):
        ds["0"]
    ann = ds.get_ann_info(1)
    assert ann["bboxes"].dtype == np.float32 and ann["labels"].dtype == np.int64
    assert ann["bboxes_ignore"].shape == (0, 4)
    for kwargs, field in [
        (dict(min_size=8), "min_size"),
        (dict(min_size=64, max_size=32), "max_size"),
        (dict(num_classes=6), "num_classes"),
        (dict(max_objects=0), "max_objects"),
        (dict(seed=-1), "seed"),
        (dict(num_samples=2.5), "num_samples"),
    ]:
        with pytest.raises(ValueError, match=field):
            SyntheticShapes(**kwargs)


def test_registry_build():
    ds = DATASETS.build(dict(type="SyntheticShapes", num_samples=5, num_classes=2))
    assert (
        isinstance(ds, SyntheticShapes) and len(ds) == 5 and ds.CLASSES == ("rectangle", "ellipse")
    )


def flips_of_one_epoch(ds: SyntheticShapes, seed: int) -> List[bool]:
    loader = DataLoader(
        ds,
        batch_size=2,
        num_workers=2,
        collate_fn=partial(collate, samples_per_gpu=2),
        generator=torch.Generator().manual_seed(seed),
        timeout=60,
    )
    return [meta["flip"] for batch in loader for meta in batch["img_metas"].data[0]]


def test_random_flip_is_reproducible_through_worker_seeding():
    ds = SyntheticShapes(num_samples=12, min_size=32, max_size=48)
    first = flips_of_one_epoch(ds, seed=0)
    assert first == flips_of_one_epoch(ds, seed=0)
    assert 0 < sum(first) < len(first)
