"""Tests of CocoDetection on annotation files and PNG images written here."""

from __future__ import annotations

import copy
from functools import partial

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from mmpar.collate import collate
from mmpar.data.datasets import CocoDetection
from mmpar.registry import DATASETS
from tests._coco_files import write_coco_files

Image = pytest.importorskip("PIL.Image")

SMALL = [
    dict(type="LoadImageFromFile"),
    dict(type="LoadAnnotations"),
    dict(type="Resize", img_scale=(64, 48)),
    dict(type="Normalize", mean=[0, 0, 0], std=[1, 1, 1]),
    dict(type="Pad", size_divisor=16),
    dict(type="DefaultFormatBundle"),
    dict(type="Collect", keys=["img", "gt_bboxes", "gt_labels", "gt_bboxes_ignore"]),
]

IMAGES = [
    dict(id=10, file_name="a.png", width=40, height=30),
    dict(id=20, file_name="sub/b.png", width=30, height=50),
    dict(id=30, file_name="c.png", width=20, height=20),
]
CATEGORIES = [dict(id=1, name="cat"), dict(id=3, name="dog"), dict(id=7, name="bird")]
ANNOTATIONS = [
    dict(id=1, image_id=10, category_id=3, bbox=[2, 3, 10, 8], iscrowd=0),
    dict(id=2, image_id=10, category_id=7, bbox=[20.5, 1.5, 15, 20], iscrowd=0),
    dict(id=3, image_id=10, category_id=1, bbox=[0, 0, 40, 30], iscrowd=1),
    dict(id=4, image_id=20, category_id=1, bbox=[5, 5, 0, 10], iscrowd=0),
    dict(id=5, image_id=20, category_id=1, bbox=[4, 6, 20, 30]),
    dict(id=6, image_id=30, category_id=3, bbox=[25, 2, 4, 4], iscrowd=0),
]


def write_coco(root, data=None, images=True) -> tuple:
    """Write the annotation file and (optionally) the PNG images of IMAGES under ``root``."""
    data = (
        data
        if data is not None
        else dict(images=IMAGES, annotations=ANNOTATIONS, categories=CATEGORIES)
    )
    return write_coco_files(root, data, images=IMAGES if images else ())


@pytest.fixture
def coco(tmp_path):
    return write_coco(tmp_path)


def test_annotations_are_converted(coco):
    ds = CocoDetection(*coco, pipeline=SMALL)
    # Image 30 has only a box outside the image: filtered out in training.
    assert len(ds) == 2 and ds.img_ids == [10, 20] and ds.filtered_img_ids == [30]
    assert ds.CLASSES == ("cat", "dog", "bird") and ds.cat_ids == [1, 3, 7]
    assert ds.cat2label == {1: 0, 3: 1, 7: 2}
    ann = ds.get_ann_info(0)
    np.testing.assert_allclose(ann["bboxes"], [[2, 3, 12, 11], [20.5, 1.5, 35.5, 21.5]])
    assert ann["bboxes"].dtype == np.float32 and ann["labels"].dtype == np.int64
    assert ann["labels"].tolist() == [1, 2]
    np.testing.assert_array_equal(ann["bboxes_ignore"], [[0, 0, 40, 30]])
    ann = ds.get_ann_info(1)
    assert ann["labels"].tolist() == [0] and ann["bboxes_ignore"].shape == (0, 4)
    assert ds.skipped_boxes == dict(degenerate=1, outside=1, other_class=0, crowd=1)
    np.testing.assert_array_equal(ds.ori_img_sizes, [[30, 40], [50, 30]])
    assert ds.flag.tolist() == [1, 0] and ds.flag.dtype == np.uint8
    # img_sizes are the sizes as batched: through the pipeline's Resize and Pad, exactly.
    np.testing.assert_array_equal(ds.img_sizes, [[48, 64], [64, 48]])
    for i in range(len(ds)):
        sample = ds[i]
        assert tuple(sample["img"].data.shape[1:]) == tuple(ds.img_sizes[i])
        assert tuple(sample["img_metas"].data["pad_shape"][:2]) == tuple(ds.img_sizes[i])
    assert ds[1]["img_metas"].data["img_shape"] == (64, 38, 3)
    assert ds.get_img_info(1)["filename"] == "sub/b.png"


def test_test_mode_keeps_every_image(coco):
    ds = CocoDetection(*coco, pipeline=SMALL, test_mode=True)
    assert ds.img_ids == [10, 20, 30] and ds.filtered_img_ids == []
    assert ds.get_ann_info(2)["bboxes"].shape == (0, 4)
    kept = CocoDetection(*coco, pipeline=SMALL, filter_empty_gt=False)
    assert len(kept) == 3


def test_classes_subset(coco):
    ds = CocoDetection(*coco, pipeline=SMALL, classes=["bird", "dog"])
    assert ds.CLASSES == ("bird", "dog") and ds.cat2label == {7: 0, 3: 1}
    assert ds.img_ids == [10] and ds.get_ann_info(0)["labels"].tolist() == [1, 0]
    assert ds.skipped_boxes["other_class"] == 2
    with pytest.raises(ValueError, match="'zebra' is not a category name"):
        CocoDetection(*coco, pipeline=SMALL, classes=["zebra"])
    with pytest.raises(TypeError, match="classes"):
        CocoDetection(*coco, pipeline=SMALL, classes="dog")


def test_getitem_loads_the_image_and_moves_the_boxes(coco):
    ann_file, folder = coco
    ds = CocoDetection(ann_file, folder, pipeline=SMALL)
    out = ds[0]
    meta = out["img_metas"].data
    assert meta["ori_shape"] == (30, 40, 3) and meta["img_shape"] == (48, 64, 3)
    assert meta["pad_shape"] == (48, 64, 3) and meta["filename"].endswith("a.png")
    np.testing.assert_allclose(meta["scale_factor"], [1.6] * 4)
    np.testing.assert_allclose(
        out["gt_bboxes"].data, torch.tensor([[3.2, 4.8, 19.2, 17.6], [32.8, 2.4, 56.8, 34.4]])
    )
    assert out["gt_labels"].data.tolist() == [1, 2]
    np.testing.assert_allclose(out["gt_bboxes_ignore"].data, torch.tensor([[0.0, 0.0, 64.0, 48.0]]))
    original = np.asarray(Image.open(f"{folder}/a.png"))
    load_only = SMALL[:1] + [dict(type="DefaultFormatBundle"), dict(type="Collect", keys=["img"])]
    same = CocoDetection(ann_file, folder, pipeline=load_only)
    np.testing.assert_array_equal(same[0]["img"].data.permute(1, 2, 0).numpy(), original)


def test_default_pipeline(coco):
    ds = DATASETS.build(dict(type="CocoDetection", ann_file=coco[0], img_prefix=coco[1]))
    out = ds[1]
    meta = out["img_metas"].data
    # 50x30 portrait into (1333, 800): the long side reaches 1333. The image is not
    # padded in the pipeline (collate pads it into the batch), pad_shape says to what.
    assert meta["img_shape"] == (1333, 800, 3) and out["img"].data.shape == (3, 1333, 800)
    assert meta["pad_shape"] == (1344, 800, 3) and out["img"].size_divisor == 32
    assert tuple(ds.img_sizes[1]) == (1333, 800)
    assert set(out) == {"img_metas", "img", "gt_bboxes", "gt_labels"}
    test = CocoDetection(*coco, test_mode=True)
    assert set(test[2]) == {"img_metas", "img"}


def test_dataloader_with_workers(coco):
    ds = CocoDetection(*coco, pipeline=SMALL, test_mode=True)
    loader = DataLoader(
        ds, batch_size=3, num_workers=2, collate_fn=partial(collate, samples_per_gpu=2), timeout=60
    )
    (batch,) = list(loader)
    assert [tuple(t.shape) for t in batch["img"].data] == [(2, 3, 64, 64), (1, 3, 48, 48)]
    metas = batch["img_metas"].data
    assert [[m["ori_filename"] for m in chunk] for chunk in metas] == [
        ["a.png", "sub/b.png"],
        ["c.png"],
    ]
    assert [len(chunk) for chunk in batch["gt_bboxes"].data] == [2, 1]
    assert batch["gt_bboxes"].data[1][0].shape == (0, 4)


def test_missing_image_file(tmp_path):
    ds = CocoDetection(*write_coco(tmp_path, images=False), pipeline=SMALL)
    with pytest.raises(FileNotFoundError, match="a.png"):
        ds[0]


def test_missing_files_and_folders(tmp_path):
    ann_file, folder = write_coco(tmp_path, images=False)
    with pytest.raises(FileNotFoundError, match="nope.json"):
        CocoDetection(str(tmp_path / "nope.json"), folder)
    with pytest.raises(FileNotFoundError, match="img_prefix"):
        CocoDetection(ann_file, str(tmp_path / "no_folder"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json.*not valid JSON"):
        CocoDetection(str(tmp_path / "bad.json"), folder)
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ValueError, match="JSON object"):
        CocoDetection(str(tmp_path / "list.json"), folder)


def base():
    return copy.deepcopy(dict(images=IMAGES, annotations=ANNOTATIONS, categories=CATEGORIES))


def edit(fn):
    data = base()
    fn(data)
    return data


MALFORMED = [
    (lambda d: d.pop("images"), r"has no 'images' key"),
    (lambda d: d.pop("categories"), r"has no 'categories' key"),
    (lambda d: d.pop("annotations"), r"has no 'annotations' key"),
    (lambda d: d.update(images={}), r"'images' must be a list"),
    (lambda d: d["annotations"][3].pop("bbox"), r"annotations\[3\] has no 'bbox'"),
    (
        lambda d: d["annotations"][2].update(bbox=[1, 2, 3]),
        r"annotations\[2\]\.bbox must be 4 finite numbers",
    ),
    (lambda d: d["annotations"][1].update(bbox=[1, "2", 3, 4]), r"annotations\[1\]\.bbox"),
    (
        lambda d: d["annotations"][0].update(category_id=99),
        r"annotations\[0\]\.category_id 99 is not the id of any",
    ),
    (
        lambda d: d["annotations"][5].update(image_id=4),
        r"annotations\[5\]\.image_id 4 is not the id of any image",
    ),
    (lambda d: d["annotations"][0].pop("image_id"), r"annotations\[0\] has no 'image_id'"),
    (lambda d: d["annotations"][0].update(iscrowd=2), r"annotations\[0\]\.iscrowd must be 0 or 1"),
    (lambda d: d["images"][1].pop("file_name"), r"images\[1\] has no 'file_name'"),
    (lambda d: d["images"][0].update(width=0), r"images\[0\]\.width must be a positive int"),
    (lambda d: d["images"][2].update(id=10), r"images\[2\]\.id 10 repeats the id of images\[0\]"),
    (lambda d: d["categories"][1].update(id=1), r"categories\[1\]\.id 1 is used by two categories"),
    (lambda d: d["categories"][0].pop("name"), r"categories\[0\] has no 'name'"),
    (lambda d: d["annotations"].append("oops"), r"annotations\[6\] must be an object"),
]


@pytest.mark.parametrize("change, message", MALFORMED)
def test_malformed_annotation_file(tmp_path, change, message):
    ann_file, folder = write_coco(tmp_path, data=edit(change), images=False)
    with pytest.raises(ValueError, match=message):
        CocoDetection(ann_file, folder)


def test_annotations_optional_in_test_mode(tmp_path):
    data = base()
    data.pop("annotations")
    ds = CocoDetection(*write_coco(tmp_path, data=data), pipeline=SMALL[:1], test_mode=True)
    assert len(ds) == 3 and ds.get_ann_info(0)["bboxes"].shape == (0, 4)
