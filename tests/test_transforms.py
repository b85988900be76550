"""Tests of the pipeline steps in mmpar.data.transforms."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mmpar.data.transforms import (
    Collect,
    Compose,
    DefaultFormatBundle,
    LoadAnnotations,
    LoadImageFromArray,
    LoadImageFromFile,
    Normalize,
    Pad,
    RandomFlip,
    Resize,
)
from mmpar.data.transforms.resize import rescale_size
from mmpar.data_container import DataContainer
from mmpar.registry import TRANSFORMS


def box_image(h: int, w: int, box, value: int = 200) -> np.ndarray:
    """A black HWC uint8 image with a filled box (x1y1x2y2, integer pixels)."""
    img = np.zeros((h, w, 3), dtype=np.uint8)
    x1, y1, x2, y2 = (int(v) for v in box)
    img[y1:y2, x1:x2] = value
    return img


def tight_box(img: np.ndarray, threshold: int = 100) -> np.ndarray:
    ys, xs = np.nonzero(img[..., 0] > threshold)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=np.float32)


def make_results(img: np.ndarray, boxes=None, labels=None, seg=None) -> dict:
    results = {"img": img, "img_info": {"filename": "x.png"}}
    ann = {}
    if boxes is not None:
        ann["bboxes"] = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        ann["labels"] = np.asarray(
            labels if labels is not None else [0] * len(ann["bboxes"]), dtype=np.int64
        )
    if seg is not None:
        ann["seg"] = seg
    results["ann_info"] = ann
    results = LoadImageFromArray()(results)
    if boxes is not None:
        results = LoadAnnotations(with_seg=seg is not None)(results)
    return results


# ---------------------------------------------------------------- loading


@pytest.fixture
def png(tmp_path):
    image_mod = pytest.importorskip("PIL.Image")
    arr = np.random.default_rng(0).integers(0, 256, size=(12, 17, 3), dtype=np.uint8)
    image_mod.fromarray(arr).save(tmp_path / "a.png")
    return tmp_path, arr


def test_load_image_from_file_rgb(png):
    folder, arr = png
    out = LoadImageFromFile()(dict(img_prefix=str(folder), img_info=dict(filename="a.png")))
    np.testing.assert_array_equal(out["img"], arr)
    assert out["img"].dtype == np.uint8
    assert out["img_shape"] == out["ori_shape"] == (12, 17, 3)
    assert out["filename"] == str(folder / "a.png") and out["ori_filename"] == "a.png"
    assert out["img_fields"] == ["img"] and out["channel_order"] == "rgb"


def test_load_image_from_file_variants(png):
    folder, arr = png
    info = dict(img_prefix=str(folder), img_info=dict(filename="a.png"))
    bgr = LoadImageFromFile(channel_order="bgr")(dict(info))
    np.testing.assert_array_equal(bgr["img"], arr[:, :, ::-1])
    assert bgr["channel_order"] == "bgr"
    gray = LoadImageFromFile(color_type="grayscale")(dict(info))
    assert gray["img"].shape == (12, 17, 1)
    flt = LoadImageFromFile(to_float32=True)(dict(info))
    assert flt["img"].dtype == np.float32
    np.testing.assert_array_equal(flt["img"], arr.astype(np.float32))
    assert "color_type='color'" in repr(LoadImageFromFile())


def test_load_image_from_file_errors(png):
    folder, _ = png
    with pytest.raises(FileNotFoundError, match="missing.png"):
        LoadImageFromFile()(dict(img_prefix=str(folder), img_info=dict(filename="missing.png")))
    (folder / "bad.png").write_bytes(b"this is not an image")
    with pytest.raises(ValueError, match="bad.png"):
        LoadImageFromFile()(dict(img_prefix=str(folder), img_info=dict(filename="bad.png")))
    with pytest.raises(KeyError, match="img_info"):
        LoadImageFromFile()(dict(img_prefix=str(folder)))
    with pytest.raises(ValueError, match="color_type"):
        LoadImageFromFile(color_type="unchanged")


def test_load_image_without_pillow(png, monkeypatch):
    folder, _ = png
    for name in ("PIL", "PIL.Image", "PIL.ImageOps"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"pip install -e .\.\[images\]."):
        LoadImageFromFile(backend="pillow")(
            dict(img_prefix=str(folder), img_info=dict(filename="a.png"))
        )


def test_load_image_from_array():
    out = LoadImageFromArray()(
        dict(img=np.zeros((5, 6), np.uint8), img_info=dict(filename="s.png"))
    )
    assert out["img"].shape == (5, 6, 1) and out["img_shape"] == (5, 6, 1)
    assert out["ori_filename"] == "s.png" and out["filename"] == "s.png"
    with pytest.raises(KeyError, match="'img'"):
        LoadImageFromArray()({})
    with pytest.raises(TypeError, match="numpy array"):
        LoadImageFromArray()(dict(img=[[1, 2]]))
    with pytest.raises(ValueError, match="shape"):
        LoadImageFromArray()(dict(img=np.zeros((2, 2, 2, 2))))


def test_load_annotations():
    ann = dict(
        bboxes=[[1, 2, 3, 4]],
        labels=[5],
        bboxes_ignore=np.zeros((0, 4)),
        seg=np.ones((4, 4), np.uint8),
    )
    out = LoadAnnotations(with_seg=True)(dict(ann_info=ann))
    assert out["gt_bboxes"].dtype == np.float32 and out["gt_bboxes"].shape == (1, 4)
    assert out["gt_labels"].dtype == np.int64 and out["gt_labels"].tolist() == [5]
    assert out["gt_bboxes_ignore"].shape == (0, 4)
    assert out["bbox_fields"] == ["gt_bboxes", "gt_bboxes_ignore"] and out["seg_fields"] == [
        "gt_semantic_seg"
    ]
    empty = LoadAnnotations()(dict(ann_info=dict(bboxes=np.zeros((0, 4)), labels=[])))
    assert empty["gt_bboxes"].shape == (0, 4) and empty["gt_labels"].shape == (0,)
    assert empty["gt_labels"].dtype == np.int64


def test_load_annotations_seg_file(tmp_path):
    image_mod = pytest.importorskip("PIL.Image")
    seg = np.arange(20, dtype=np.uint8).reshape(4, 5)
    image_mod.fromarray(seg).save(tmp_path / "s.png")
    out = LoadAnnotations(with_bbox=False, with_label=False, with_seg=True)(
        dict(seg_prefix=str(tmp_path), ann_info=dict(seg_map="s.png"))
    )
    np.testing.assert_array_equal(out["gt_semantic_seg"], seg)
    with pytest.raises(FileNotFoundError, match="nope.png"):
        LoadAnnotations(with_seg=True, with_bbox=False, with_label=False)(
            dict(seg_prefix=str(tmp_path), ann_info=dict(seg_map="nope.png"))
        )


def test_load_annotations_errors():
    with pytest.raises(KeyError, match="ann_info"):
        LoadAnnotations()({})
    with pytest.raises(KeyError, match="'bboxes'"):
        LoadAnnotations()(dict(ann_info=dict(labels=[1])))
    with pytest.raises(ValueError, match=r"\(K, 4\)"):
        LoadAnnotations()(dict(ann_info=dict(bboxes=[[1, 2, 3]], labels=[1])))
    with pytest.raises(ValueError, match="1 bboxes but 2 labels"):
        LoadAnnotations()(dict(ann_info=dict(bboxes=[[1, 2, 3, 4]], labels=[1, 2])))
    with pytest.raises(ValueError, match="integer"):
        LoadAnnotations()(dict(ann_info=dict(bboxes=[[1, 2, 3, 4]], labels=[1.5])))


# ---------------------------------------------------------------- resize


def test_resize_keep_ratio_mmdet_semantics():
    # Landscape 100x200 into (1333, 800): the long side is the limit.
    res = Resize((1333, 800))(make_results(np.zeros((100, 200, 3), np.uint8)))
    assert res["img"].shape == (667, 1333, 3) and res["img_shape"] == (667, 1333, 3)
    # Portrait 300x100: the short side fills 800 would make the long side 2400 > 1333.
    res = Resize((1333, 800))(make_results(np.zeros((300, 100, 3), np.uint8)))
    assert res["img"].shape == (1333, 444, 3)
    assert res["scale_factor"].dtype == np.float32
    np.testing.assert_allclose(res["scale_factor"], [4.44, 1333 / 300, 4.44, 1333 / 300], rtol=1e-6)
    assert res["keep_ratio"] is True and res["pad_shape"] == res["img_shape"]


@settings(max_examples=60, deadline=None)
@given(
    w=st.integers(1, 3000),
    h=st.integers(1, 3000),
    a=st.integers(16, 2000),
    b=st.integers(16, 2000),
)
def test_rescale_size_fits_scale(w, h, a, b):
    new_w, new_h = rescale_size(w, h, (a, b))
    long_side, short_side = max(new_w, new_h), min(new_w, new_h)
    assert long_side <= max(a, b) + 1 and short_side <= min(a, b) + 1
    assert long_side >= max(a, b) - 1 or short_side >= min(a, b) - 1
    # The aspect ratio is kept up to rounding (a side clamped to 1 pixel is not rounding).
    assume(min(w, h) * min(max(a, b) / max(w, h), min(a, b) / min(w, h)) >= 1)
    assert abs(new_w / max(new_h, 1) - w / h) <= (w / h) * (
        1.5 / min(new_w, new_h) + 1.5 / max(new_h, 1)
    )


def test_resize_boxes_follow_content():
    img = box_image(40, 60, (10, 8, 30, 20))
    res = Resize((120, 80))(make_results(img, boxes=[[10, 8, 30, 20]]))
    assert res["img"].shape == (80, 120, 3)
    np.testing.assert_array_equal(res["gt_bboxes"], [[20, 16, 60, 40]])
    np.testing.assert_allclose(tight_box(res["img"]), res["gt_bboxes"][0], atol=1)
    assert res["img"].dtype == np.uint8


def test_resize_exact_size_and_clip():
    img = np.zeros((40, 60, 3), np.uint8)
    res = Resize((30, 50), keep_ratio=False)(
        make_results(img, boxes=[[0, 0, 60, 40], [50, 30, 70, 50]])
    )
    assert res["img"].shape == (50, 30, 3)
    np.testing.assert_allclose(res["scale_factor"], [0.5, 1.25, 0.5, 1.25])
    np.testing.assert_allclose(res["gt_bboxes"], [[0, 0, 30, 50], [25, 37.5, 30, 50]])


def test_resize_seg_nearest_and_float():
    seg = np.zeros((20, 30), np.uint8)
    seg[5:10, 6:12] = 3
    seg[12:, 20:] = 7
    img = np.random.default_rng(0).random((20, 30, 3)).astype(np.float32)
    res = Resize((45, 45))(make_results(img, boxes=np.zeros((0, 4)), seg=seg))
    assert res["img"].dtype == np.float32 and res["img"].shape == (30, 45, 3)
    assert res["gt_semantic_seg"].shape == (30, 45) and res["gt_semantic_seg"].dtype == np.uint8
    assert set(np.unique(res["gt_semantic_seg"])) == {0, 3, 7}
    assert res["gt_semantic_seg"][7:15, 9:18].min() == 3


def test_resize_multiscale_is_seeded():
    scales = [(100, 50), (200, 100), (300, 150)]
    resize = Resize(scales)

    def run() -> list:
        random.seed(3)
        return [resize(make_results(np.zeros((10, 20, 3), np.uint8)))["scale"] for _ in range(8)]

    first = run()
    assert first == run() and set(first) <= set(scales) and len(set(first)) > 1


def test_resize_errors():
    with pytest.raises(ValueError, match="img_scale"):
        Resize((0, 10))
    with pytest.raises(ValueError, match=r"img_scale\[1\]"):
        Resize([(10, 10), (5,)])
    assert repr(Resize(backend="torch")) == (
        "Resize(img_scale=(1333, 800), keep_ratio=True, backend='torch')"
    )


# ---------------------------------------------------------------- flip


@pytest.mark.parametrize("direction", ["horizontal", "vertical", "diagonal"])
def test_flip_boxes_follow_content(direction):
    box = [3, 5, 11, 9]
    seg = box_image(16, 20, box)[..., 0]
    res = RandomFlip(1.0, direction)(make_results(box_image(16, 20, box), boxes=[box], seg=seg))
    assert res["flip"] is True and res["flip_direction"] == direction
    np.testing.assert_array_equal(tight_box(res["img"]), res["gt_bboxes"][0])
    np.testing.assert_array_equal(tight_box(res["gt_semantic_seg"][..., None]), res["gt_bboxes"][0])
    expected = {
        "horizontal": [9, 5, 17, 9],
        "vertical": [3, 7, 11, 11],
        "diagonal": [9, 7, 17, 11],
    }[direction]
    np.testing.assert_array_equal(res["gt_bboxes"], [expected])


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 30), st.integers(1, 30), st.sampled_from(["horizontal", "vertical", "diagonal"])
)
def test_flip_twice_is_identity(h, w, direction):
    rng = np.random.default_rng(h * 31 + w)
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    x = np.sort(rng.uniform(0, w, 2))
    y = np.sort(rng.uniform(0, h, 2))
    boxes = np.array([[x[0], y[0], x[1], y[1]]], np.float32)
    res = make_results(img.copy(), boxes=boxes)
    flip = RandomFlip(1.0, direction)
    res = flip(res)
    res.pop("flip")
    res = flip(res)
    np.testing.assert_array_equal(res["img"], img)
    np.testing.assert_allclose(res["gt_bboxes"], boxes, atol=1e-5)


def test_flip_ratio_zero_and_seeding():
    res = RandomFlip(0.0)(make_results(box_image(8, 8, (0, 0, 2, 2)), boxes=[[0, 0, 2, 2]]))
    assert res["flip"] is False and res["flip_direction"] is None
    np.testing.assert_array_equal(res["gt_bboxes"], [[0, 0, 2, 2]])
    flip = RandomFlip(0.5)

    def run() -> list:
        random.seed(11)
        return [flip(make_results(np.zeros((4, 4, 3), np.uint8)))["flip"] for _ in range(20)]

    first = run()
    assert first == run() and 0 < sum(first) < 20


def test_flip_errors():
    with pytest.raises(ValueError, match="flip_ratio"):
        RandomFlip(1.5)
    with pytest.raises(ValueError, match="direction"):
        RandomFlip(0.5, "sideways")
    padded = Pad(size_divisor=8)(make_results(np.zeros((5, 5, 3), np.uint8)))
    with pytest.raises(ValueError, match="before padding"):
        RandomFlip(1.0)(padded)


# ---------------------------------------------------------------- normalize


def test_normalize_values():
    img = np.random.default_rng(1).integers(0, 256, (4, 5, 3), dtype=np.uint8)
    mean, std = [10.0, 20.0, 30.0], [2.0, 4.0, 5.0]
    res = Normalize(mean, std)(make_results(img))
    assert res["img"].dtype == np.float32
    np.testing.assert_allclose(res["img"], (img - np.array(mean)) / np.array(std), rtol=1e-6)
    cfg = res["img_norm_cfg"]
    assert cfg["to_rgb"] is True and cfg["mean"].dtype == np.float32
    np.testing.assert_array_equal(cfg["mean"], mean)
    np.testing.assert_array_equal(cfg["std"], std)


def test_normalize_bgr_to_rgb():
    img = np.random.default_rng(2).integers(0, 256, (4, 5, 3), dtype=np.uint8)
    res = make_results(img)
    res["channel_order"] = "bgr"
    out = Normalize([0, 0, 0], [1, 1, 1], to_rgb=True)(res)
    np.testing.assert_array_equal(out["img"], img[..., ::-1].astype(np.float32))
    assert out["channel_order"] == "rgb"
    kept = Normalize([0, 0, 0], [1, 1, 1], to_rgb=False)(
        dict(make_results(img), channel_order="bgr")
    )
    np.testing.assert_array_equal(kept["img"], img.astype(np.float32))


def test_normalize_errors():
    with pytest.raises(ValueError, match="std"):
        Normalize([0, 0, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="same length"):
        Normalize([0, 0, 0], [1, 1])
    with pytest.raises(ValueError, match="1 channels"):
        Normalize([0, 0, 0], [1, 1, 1])(make_results(np.zeros((2, 2), np.uint8)))


# ---------------------------------------------------------------- pad


def test_pad_size_divisor():
    img = box_image(50, 70, (0, 0, 70, 50), value=9)
    seg = np.ones((50, 70), np.uint8)
    res = Pad(size_divisor=32, pad_val=3)(make_results(img, boxes=[[1, 2, 3, 4]], seg=seg))
    assert res["img"].shape == (64, 96, 3) and res["pad_shape"] == (64, 96, 3)
    assert res["img_shape"] == (50, 70, 3)
    assert (
        (res["img"][:50, :70] == 9).all()
        and (res["img"][50:] == 3).all()
        and (res["img"][:, 70:] == 3).all()
    )
    assert (res["gt_semantic_seg"][50:] == 255).all() and (
        res["gt_semantic_seg"][:50, :70] == 1
    ).all()
    assert res["pad_size_divisor"] == 32 and res["pad_fixed_size"] is None
    np.testing.assert_array_equal(res["gt_bboxes"], [[1, 2, 3, 4]])
    assert res["img"].dtype == np.uint8


def test_pad_fixed_size_and_errors():
    res = Pad(size=(20, 30))(make_results(np.ones((10, 10, 3), np.float32)))
    assert res["img"].shape == (20, 30, 3) and res["pad_fixed_size"] == (20, 30)
    with pytest.raises(ValueError, match="larger than size"):
        Pad(size=(5, 30))(make_results(np.ones((10, 10, 3), np.float32)))
    with pytest.raises(ValueError, match="exactly one"):
        Pad()
    with pytest.raises(ValueError, match="exactly one"):
        Pad(size=(4, 4), size_divisor=2)
    with pytest.raises(TypeError, match="pad_val"):
        Pad(size_divisor=2, pad_val="0")


# ---------------------------------------------------------------- formatting


def test_default_format_bundle_containers():
    img = np.random.default_rng(0).integers(0, 256, (6, 7, 3), dtype=np.uint8)
    res = make_results(img, boxes=np.zeros((0, 4)), seg=np.zeros((6, 7), np.uint8))
    out = DefaultFormatBundle(pad_val=dict(img=1, seg=254), size_divisor=32)(res)
    dc = out["img"]
    assert isinstance(dc, DataContainer) and dc.stack and not dc.cpu_only
    assert dc.padding_value == 1 and dc.size_divisor == 32 and dc.pad_dims == 2
    assert dc.data.dtype == torch.uint8 and dc.data.shape == (3, 6, 7)
    torch.testing.assert_close(dc.data, torch.from_numpy(img).permute(2, 0, 1))
    boxes, labels = out["gt_bboxes"], out["gt_labels"]
    assert boxes.data.shape == (0, 4) and boxes.data.dtype == torch.float32
    assert labels.data.shape == (0,) and labels.data.dtype == torch.int64
    assert not boxes.stack and not boxes.cpu_only and not labels.stack and not labels.cpu_only
    seg = out["gt_semantic_seg"]
    assert (
        seg.stack
        and seg.padding_value == 254
        and seg.size_divisor == 32
        and seg.data.shape == (1, 6, 7)
    )
    # pad_shape is the image's own shape rounded up to size_divisor (mmdet's meaning);
    # the other meta keys that no step set get identity values.
    assert out["pad_shape"] == (32, 32, 3)
    assert out["flip"] is False and out["flip_direction"] is None
    np.testing.assert_array_equal(out["scale_factor"], np.ones(4))


def test_default_format_bundle_float_and_errors():
    out = DefaultFormatBundle()(dict(img=np.zeros((2, 3), np.float32), gt_bboxes=[[0, 0, 1, 1]]))
    assert out["img"].data.shape == (1, 2, 3) and out["img"].data.dtype == torch.float32
    assert out["img"].size_divisor is None and out["img"].padding_value == 0
    assert out["pad_shape"] == out["img_shape"] == (2, 3, 1)  # no size_divisor: no padding
    assert out["gt_bboxes"].data.dtype == torch.float32
    with pytest.raises(ValueError, match="pad_val keys"):
        DefaultFormatBundle(pad_val=dict(image=0))
    with pytest.raises(ValueError, match="size_divisor"):
        DefaultFormatBundle(size_divisor=0)
    with pytest.raises(ValueError, match="img must be"):
        DefaultFormatBundle()(dict(img=np.zeros((1, 2, 3, 4))))


def test_collect():
    res = DefaultFormatBundle()(make_results(np.zeros((4, 4, 3), np.uint8), boxes=[[0, 0, 1, 1]]))
    out = Collect(["img", "gt_bboxes"])(res)
    assert list(out) == ["img_metas", "img", "gt_bboxes"]
    metas = out["img_metas"]
    assert (
        metas.cpu_only
        and metas.data["img_shape"] == (4, 4, 3)
        and metas.data["ori_filename"] == "x.png"
    )
    with pytest.raises(KeyError, match="gt_masks"):
        Collect(["img", "gt_masks"])(res)
    with pytest.raises(KeyError, match="custom_meta"):
        Collect(["img"], meta_keys=["img_shape", "custom_meta"])(res)
    with pytest.raises(TypeError, match="keys"):
        Collect("img")


# ---------------------------------------------------------------- compose


def test_compose_dicts_objects_callables():
    def tag(results: dict) -> dict:
        results["tagged"] = True
        return results

    pipeline = Compose(
        [
            dict(type="LoadImageFromArray"),
            Resize((32, 32)),
            tag,
            dict(type="Pad", size_divisor=16),
            dict(type="DefaultFormatBundle"),
            dict(type="Collect", keys=["img"], meta_keys=["img_shape", "pad_shape"]),
        ]
    )
    assert len(pipeline) == 6 and isinstance(pipeline.transforms[0], LoadImageFromArray)
    out = pipeline(dict(img=np.zeros((10, 20, 3), np.uint8)))
    assert out["img"].data.shape == (3, 16, 32)
    assert out["img_metas"].data == {"img_shape": (16, 32, 3), "pad_shape": (16, 32, 3)}
    assert "Resize(img_scale=(32, 32)" in repr(pipeline)


def test_compose_none_drops_and_errors():
    calls = []
    pipeline = Compose([lambda r: None, lambda r: calls.append(r) or r])
    assert pipeline({"a": 1}) is None and calls == []
    with pytest.raises(TypeError, match=r"transforms\[1\]"):
        Compose([Resize(), 3])
    with pytest.raises(TypeError, match="list of steps"):
        Compose(dict(type="Resize"))
    with pytest.raises(KeyError, match="NoSuchStep"):
        Compose([dict(type="NoSuchStep")])


def test_registry_has_every_step():
    for name in [
        "Compose",
        "LoadImageFromFile",
        "LoadImageFromArray",
        "LoadAnnotations",
        "Resize",
        "RandomFlip",
        "Normalize",
        "Pad",
        "DefaultFormatBundle",
        "Collect",
    ]:
        assert name in TRANSFORMS
    assert isinstance(TRANSFORMS.build(dict(type="Pad", size_divisor=4)), Pad)
