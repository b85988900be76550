"""COCO box AP (``bbox``) against pycocotools' own evaluation of the same detections."""

from __future__ import annotations

import copy
import json
from typing import Dict, List, Sequence

import numpy as np
import pytest

from mmpar.data.datasets import CocoDetection, SyntheticShapes
from mmpar.evaluation import BBOX_KEYS, results_to_coco
from mmpar.runner.inference import check_metrics, evaluate_coco_bbox, evaluate_results
from tests._coco_files import write_coco_files

COCO = pytest.importorskip("pycocotools.coco").COCO
COCOeval = pytest.importorskip("pycocotools.cocoeval").COCOeval

# Image ids out of file order, category ids with gaps: the conversion must use both.
IMAGES = [
    dict(id=7, file_name="a.png", width=200, height=160),
    dict(id=3, file_name="b.png", width=240, height=200),
    dict(id=12, file_name="c.png", width=120, height=100),
]
CATEGORIES = [dict(id=2, name="cat"), dict(id=5, name="dog"), dict(id=9, name="bird")]
# Small (< 32²), medium and large (> 96²) boxes of every category, and one crowd.
BOXES = [
    (7, 2, [10, 12, 12, 10]),
    (7, 5, [40, 30, 50, 40]),
    (7, 9, [60, 50, 130, 100]),
    (7, 2, [150, 20, 20, 24]),
    (3, 5, [5, 5, 110, 120]),
    (3, 9, [130, 140, 20, 18]),
    (3, 2, [150, 30, 60, 70]),
    (3, 5, [200, 170, 16, 14]),
    (12, 9, [20, 20, 40, 40]),
    (12, 2, [70, 60, 30, 25]),
]
ANNOTATIONS = [
    dict(id=k + 1, image_id=i, category_id=c, bbox=box, area=box[2] * box[3], iscrowd=0)
    for k, (i, c, box) in enumerate(BOXES)
] + [dict(id=100, image_id=3, category_id=9, bbox=[0, 150, 100, 50], area=5000, iscrowd=1)]
DATA = dict(images=IMAGES, annotations=ANNOTATIONS, categories=CATEGORIES)


def quarter(x: np.ndarray) -> np.ndarray:
    """Values on a 0.25 grid: exact in float32, so both paths see the same numbers."""
    return np.round(np.asarray(x) * 4) / 4


def make_detections(seed: int = 0) -> List[Dict]:
    """COCO results: every box found with jitter (some poorly), duplicates, false alarms."""
    rng = np.random.default_rng(seed)
    dets = []
    for image_id, cat_id, (x, y, w, h) in BOXES:
        jitter = rng.normal(0, 0.08 * max(w, h), 4) * [1, 1, 0.5, 0.5]
        box = quarter([x + jitter[0], y + jitter[1], max(w + jitter[2], 2), max(h + jitter[3], 2)])
        dets.append(
            dict(image_id=image_id, category_id=cat_id, bbox=box.tolist(), score=rng.random())
        )
        if rng.random() < 0.5:  # a duplicate, lower
            dets.append(dict(dets[-1], score=float(quarter(rng.random() / 2))))
    for image in IMAGES:  # false alarms, some of the wrong category
        for _ in range(3):
            w, h = quarter(rng.uniform(8, 60, 2))
            x, y = quarter(rng.uniform(0, [image["width"] - w, image["height"] - h]))
            cat_id = int(rng.choice([2, 5, 9]))
            box = [float(x), float(y), float(w), float(h)]
            dets.append(
                dict(image_id=image["id"], category_id=cat_id, bbox=box, score=rng.random())
            )
    for det in dets:
        det["score"] = float(quarter(det["score"]))
    return dets


def to_results(dets: List[Dict], dataset: CocoDetection) -> List[List[np.ndarray]]:
    """COCO results as mmpar's: per dataset image, per label, float32 ``(k, 5)`` x1y1x2y2."""
    per = [[[] for _ in dataset.cat_ids] for _ in dataset.img_ids]
    for det in dets:
        if det["category_id"] not in dataset.cat2label:
            continue
        x, y, w, h = det["bbox"]
        i = dataset.img_ids.index(det["image_id"])
        per[i][dataset.cat2label[det["category_id"]]].append([x, y, x + w, y + h, det["score"]])
    return [[np.array(b, np.float32).reshape(-1, 5) for b in image] for image in per]


def pycocotools_stats(
    ann_file: str, dets: List[Dict], cat_ids: Sequence[int] = (), img_ids: Sequence[int] = ()
) -> List[float]:
    gt = COCO(ann_file)
    evaluator = COCOeval(gt, gt.loadRes(copy.deepcopy(dets)), "bbox")
    if cat_ids:
        evaluator.params.catIds = list(cat_ids)
    if img_ids:
        evaluator.params.imgIds = list(img_ids)
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    return [float(s) for s in evaluator.stats[:6]]


def dataset_of(tmp_path, data=DATA, **kwargs) -> CocoDetection:
    ann_file, folder = write_coco_files(tmp_path, data, images=())
    return CocoDetection(ann_file, folder, pipeline=[], test_mode=True, **kwargs)


def test_figures_equal_pycocotools_own(tmp_path) -> None:
    dataset = dataset_of(tmp_path)
    dets = make_detections()
    expected = pycocotools_stats(dataset.ann_file, dets)
    metrics = evaluate_coco_bbox(dataset, to_results(dets, dataset))
    assert [metrics[key] for key in BBOX_KEYS] == expected
    # Not a trivial case: every figure is strictly between 0 and 1, and they differ.
    assert all(0 < s < 1 for s in expected) and len(set(expected)) == 6
    assert metrics["bbox_mAP_copypaste"] == " ".join(f"{s:.3f}" for s in expected)
    table = metrics["bbox_summary"].splitlines()
    assert len(table) == 12 and table[0].startswith(" Average Precision  (AP) @[ IoU=0.50:0.95")
    assert table[0].endswith(f"= {expected[0]:.3f}")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_figures_equal_pycocotools_own_other_detections(tmp_path, seed: int) -> None:
    dataset = dataset_of(tmp_path)
    dets = make_detections(seed)
    metrics = evaluate_coco_bbox(dataset, to_results(dets, dataset))
    assert [metrics[key] for key in BBOX_KEYS] == pycocotools_stats(dataset.ann_file, dets)


def test_classes_subset_maps_labels_back_to_category_ids(tmp_path) -> None:
    # Labels in the order of `classes`: label 0 is bird (id 9), label 1 cat (id 2).
    dataset = dataset_of(tmp_path, classes=["bird", "cat"])
    assert dataset.cat_ids == [9, 2]
    dets = make_detections()
    results = to_results(dets, dataset)
    assert all(len(per_image) == 2 for per_image in results)
    kept = [d for d in dets if d["category_id"] in (9, 2)]
    metrics = evaluate_coco_bbox(dataset, results)
    assert [metrics[key] for key in BBOX_KEYS] == pycocotools_stats(
        dataset.ann_file, kept, cat_ids=[2, 9]
    )


def test_missing_area_iscrowd_and_id_are_filled_in(tmp_path) -> None:
    bare = copy.deepcopy(DATA)
    bare["annotations"] = [
        {k: v for k, v in ann.items() if k not in ("area", "iscrowd", "id")}
        for ann in bare["annotations"]
        if not ann["iscrowd"]
    ]
    dataset = dataset_of(tmp_path / "bare", bare)
    # What pycocotools would need written out: area w*h, iscrowd 0, an id each.
    full = copy.deepcopy(bare)
    for k, ann in enumerate(full["annotations"]):
        ann.update(area=ann["bbox"][2] * ann["bbox"][3], iscrowd=0, id=k + 1)
    full_file = tmp_path / "full.json"
    full_file.write_text(json.dumps(full))
    dets = make_detections()
    metrics = evaluate_coco_bbox(dataset, to_results(dets, dataset))
    assert [metrics[key] for key in BBOX_KEYS] == pycocotools_stats(str(full_file), dets)


def test_results_to_coco_converts_boxes_and_ids() -> None:
    results = [
        [np.array([[1.5, 2.0, 11.5, 7.0, 0.9]], np.float32), np.zeros((0, 5), np.float32)],
        [np.zeros((0, 5)), np.array([[0, 0, 4, 3, 0.5], [2, 2, 3, 3, 0.25]])],
    ]
    dets = results_to_coco(results, img_ids=[42, 8], cat_ids=[3, 1])
    assert dets == [
        dict(image_id=42, category_id=3, bbox=[1.5, 2.0, 10.0, 5.0], score=pytest.approx(0.9)),
        dict(image_id=8, category_id=1, bbox=[0.0, 0.0, 4.0, 3.0], score=0.5),
        dict(image_id=8, category_id=1, bbox=[2.0, 2.0, 1.0, 1.0], score=0.25),
    ]
    assert all(type(v) is float for d in dets for v in [*d["bbox"], d["score"]])
    with pytest.raises(ValueError, match=r"results\[0\] has 2 labels, the dataset 3"):
        results_to_coco(results, [42, 8], [3, 1, 5])
    with pytest.raises(ValueError, match="2 results for 1 image ids"):
        results_to_coco(results, [42], [3, 1])


def test_no_detections_score_zero(tmp_path) -> None:
    dataset = dataset_of(tmp_path)
    empty = [[np.zeros((0, 5), np.float32) for _ in range(3)] for _ in range(3)]
    metrics = evaluate_coco_bbox(dataset, empty)
    assert [metrics[key] for key in BBOX_KEYS] == [0.0] * 6


def test_both_metrics_together(tmp_path) -> None:
    dataset = dataset_of(tmp_path)
    results = to_results(make_detections(), dataset)
    both = evaluate_results(dataset, results, ["mAP", "bbox"])
    assert {"mAP", "per_class", *BBOX_KEYS} <= set(both)
    assert both["bbox_mAP_50"] > 0 and 0 < both["mAP"] < 1


def test_bbox_on_a_dataset_without_coco_annotations_is_refused(tmp_path) -> None:
    synthetic = SyntheticShapes(num_samples=2)
    with pytest.raises(ValueError, match="needs a COCO-format dataset.*SyntheticShapes has no"):
        check_metrics(["bbox"], synthetic)
    check_metrics(["mAP"], synthetic)  # mAP@0.5 needs only get_ann_info
    no_annotations = {k: v for k, v in DATA.items() if k != "annotations"}
    dataset = dataset_of(tmp_path, no_annotations)
    with pytest.raises(ValueError, match="ann.json' has no 'annotations'"):
        check_metrics(["bbox"], dataset)
