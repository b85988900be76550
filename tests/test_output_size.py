"""Steps declare the size of the image they output; Compose chains it; datasets use it."""

from __future__ import annotations

from typing import Tuple

import numpy as np
import pytest

from mmpar.data import SyntheticShapes
from mmpar.data.transforms import (
    Collect,
    Compose,
    DefaultFormatBundle,
    KeepsSize,
    LoadAnnotations,
    LoadImageFromArray,
    LoadImageFromFile,
    Normalize,
    Pad,
    RandomFlip,
    Resize,
    step_output_size,
)
from mmpar.data_container import DataContainer

SIZES = [(37, 61), (61, 37), (64, 64), (1, 5), (800, 1333), (333, 1000)]


def results_of(h: int, w: int) -> dict:
    """A loaded sample: an ``h x w`` RGB image with one box and a segmentation map."""
    img = np.random.default_rng(h * 10_000 + w).integers(0, 256, (h, w, 3), dtype=np.uint8)
    ann = dict(
        bboxes=np.array([[0, 0, w, h]], np.float32),
        labels=np.array([0]),
        seg=np.zeros((h, w), np.uint8),
    )
    results = dict(img=img, img_info=dict(filename="x.png"), ann_info=ann)
    return LoadAnnotations(with_seg=True)(LoadImageFromArray()(results))


def out_hw(results: dict) -> Tuple[int, int]:
    img = results["img"]
    shape = img.data.shape[1:] if isinstance(img, DataContainer) else img.shape[:2]
    return int(shape[0]), int(shape[1])


@pytest.mark.parametrize("h, w", SIZES)
@pytest.mark.parametrize(
    "step",
    [
        Resize((1333, 800)),
        Resize((120, 90)),
        Resize((50, 70), keep_ratio=False),
        RandomFlip(1.0),
        RandomFlip(1.0, "diagonal"),
        Normalize([1, 2, 3], [4, 5, 6]),
        Normalize([1, 2, 3], [4, 5, 6], on_device=True),
        Pad(size_divisor=32),
        Pad(size_divisor=7),
        Pad(size=(1400, 1400)),
        DefaultFormatBundle(),
        DefaultFormatBundle(size_divisor=32),
        LoadAnnotations(),
    ],
    ids=repr,
)
def test_each_step_declares_the_shape_it_outputs(step, h: int, w: int) -> None:
    results = results_of(h, w)
    assert out_hw(results) == (h, w)
    declared = step.output_size(h, w)
    assert isinstance(declared, tuple) and all(type(s) is int for s in declared)
    out = step(results)
    assert out_hw(out) == declared
    if "gt_semantic_seg" in out and isinstance(out["gt_semantic_seg"], np.ndarray):
        assert out["gt_semantic_seg"].shape == declared  # maps follow the image


def test_loading_steps_keep_the_size_they_are_given(tmp_path) -> None:
    image = pytest.importorskip("PIL.Image")
    arr = np.random.default_rng(0).integers(0, 256, (23, 41, 3), dtype=np.uint8)
    image.fromarray(arr).save(tmp_path / "a.png")
    for step in (LoadImageFromFile(), LoadImageFromFile(color_type="grayscale")):
        out = step(dict(img_info=dict(filename="a.png"), img_prefix=str(tmp_path)))
        assert out_hw(out) == step.output_size(23, 41) == (23, 41)
    assert LoadImageFromArray().output_size(23, 41) == (23, 41)
    assert Collect(["img"]).output_size(23, 41) == (23, 41)


def test_resize_with_several_scales_declares_the_largest() -> None:
    step = Resize([(100, 60), (200, 120)])
    assert step.output_size(30, 50) == (120, 200)
    for scale in step.img_scale:
        out = step(dict(results_of(30, 50), scale=scale))
        assert all(a <= b for a, b in zip(out_hw(out), step.output_size(30, 50)))
    assert out_hw(step(dict(results_of(30, 50), scale=(200, 120)))) == (120, 200)


def test_pad_to_a_fixed_size_refuses_larger_images_up_front() -> None:
    with pytest.raises(ValueError, match=r"Pad: the image is \(h, w\) = \(20, 10\), larger"):
        Pad(size=(16, 16)).output_size(20, 10)


@pytest.mark.parametrize("h, w", SIZES)
def test_compose_chains_the_declarations_of_a_whole_pipeline(h: int, w: int) -> None:
    pipeline = Compose(
        [
            dict(type="LoadImageFromArray"),
            dict(type="LoadAnnotations", with_seg=True),
            dict(type="Resize", img_scale=(150, 100)),
            dict(type="RandomFlip", flip_ratio=1.0),
            dict(type="Normalize", mean=[0, 0, 0], std=[1, 1, 1]),
            dict(type="Pad", size_divisor=16),
            dict(type="DefaultFormatBundle", size_divisor=32),
            dict(type="Collect", keys=["img", "gt_semantic_seg"]),
        ]
    )
    img = np.zeros((h, w, 3), np.uint8)
    out = pipeline(
        dict(img=img, ann_info=dict(bboxes=np.zeros((0, 4)), labels=[], seg=img[..., 0]))
    )
    assert out_hw(out) == pipeline.output_size(h, w)
    assert tuple(out["gt_semantic_seg"].data.shape[1:]) == pipeline.output_size(h, w)
    # Nested pipelines chain too.
    assert Compose([pipeline, Pad(size_divisor=64)]).output_size(h, w) == Pad(
        size_divisor=64
    ).output_size(*pipeline.output_size(h, w))


class Halve:
    """A user transform that changes the size and says so."""

    def __call__(self, results: dict) -> dict:
        results["img"] = results["img"][::2, ::2]
        return results

    def output_size(self, height: int, width: int) -> Tuple[int, int]:
        return (height + 1) // 2, (width + 1) // 2


def test_undeclared_steps_are_taken_to_keep_the_size() -> None:
    def tag(results: dict) -> dict:
        results["tagged"] = True
        return results

    assert step_output_size(tag, 7, 9) == (7, 9)
    assert Compose([tag, Halve(), tag]).output_size(7, 9) == (4, 5)
    assert KeepsSize().output_size(3, 4) == (3, 4)


def test_datasets_batch_sizes_come_from_the_declarations() -> None:
    load = [dict(type="LoadImageFromArray"), dict(type="LoadAnnotations")]
    tail = [dict(type="DefaultFormatBundle"), dict(type="Collect", keys=["img"])]
    halved = SyntheticShapes(num_samples=6, pipeline=load + [Halve()] + tail)
    for i in range(len(halved)):
        h, w = halved.ori_img_sizes[i]
        assert tuple(halved.img_sizes[i]) == ((h + 1) // 2, (w + 1) // 2)
        assert tuple(halved[i]["img"].data.shape[1:]) == tuple(halved.img_sizes[i])
        assert halved.flag[i] == (halved.img_sizes[i][1] > halved.img_sizes[i][0])
    # An undeclared step that changes the size: img_sizes stay the original sizes.
    undeclared = SyntheticShapes(num_samples=6, pipeline=load + [Halve().__call__] + tail)
    np.testing.assert_array_equal(undeclared.img_sizes, undeclared.ori_img_sizes)
    # The default pipeline keeps the size in the workers; collate rounds it up to 32.
    default = SyntheticShapes(num_samples=6)
    np.testing.assert_array_equal(default.img_sizes, default.ori_img_sizes)


class Broken:
    def __init__(self, size) -> None:
        self.size = size

    def __call__(self, results: dict) -> dict:
        return results

    def output_size(self, height: int, width: int):
        return self.size


@pytest.mark.parametrize(
    "size, error, match",
    [
        ("64x64", TypeError, r"Broken.output_size\(5, 6\): expected an \(h, w\) pair of ints"),
        ((5.0, 6), TypeError, "pair of ints, got"),
        ((5, 6, 7), TypeError, r"got \(5, 6, 7\)"),
        ((0, 6), ValueError, r"Broken.output_size\(5, 6\): expected sizes >= 1, got \(0, 6\)"),
    ],
)
def test_a_bad_declaration_is_reported_with_the_step(size, error, match) -> None:
    with pytest.raises(error, match=match):
        Compose([RandomFlip(), Broken(size)]).output_size(5, 6)
