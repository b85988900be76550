"""mean AP at IoU 0.5: hand-computed cases and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpar.evaluation.mean_ap import average_precision, box_iou, eval_map


def dets(*rows):
    return np.array(rows, dtype=np.float32).reshape(-1, 5)


def ann(boxes, labels, ignore=None):
    out = dict(bboxes=np.array(boxes, np.float32).reshape(-1, 4), labels=np.array(labels, np.int64))
    if ignore is not None:
        out["bboxes_ignore"] = np.array(ignore, np.float32).reshape(-1, 4)
    return out


def test_box_iou_hand_computed() -> None:
    a = np.array([[0, 0, 10, 10]])
    b = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30]])
    assert box_iou(a, b)[0] == pytest.approx([1.0, 50 / 150, 0.0])


def test_average_precision_all_points() -> None:
    # TP, FP, TP over 2 gts: recall .5 .5 1, precision 1 .5 2/3 -> interpolated 1, 2/3, 2/3
    assert average_precision(
        np.array([0.5, 0.5, 1.0]), np.array([1.0, 0.5, 2 / 3])
    ) == pytest.approx(0.5 + 0.5 * 2 / 3)
    assert average_precision(np.array([]), np.array([])) == 0.0


def test_perfect_detections_give_one() -> None:
    results = [[dets([0, 0, 10, 10, 0.9])], [dets([5, 5, 20, 20, 0.8])]]
    annotations = [ann([[0, 0, 10, 10]], [0]), ann([[5, 5, 20, 20]], [0])]
    mean_ap, per_class = eval_map(results, annotations)
    assert mean_ap == pytest.approx(1.0)
    assert per_class[0]["num_gts"] == 2 and per_class[0]["recall"] == 1.0


def test_ranking_over_images_hand_computed() -> None:
    # Scores .9 (hit, image 0), .8 (miss, image 1), .7 (hit, image 1): AP = .5 * 1 + .5 * 2/3.
    results = [[dets([0, 0, 10, 10, 0.9])], [dets([50, 50, 60, 60, 0.8], [0, 0, 10, 10, 0.7])]]
    annotations = [ann([[0, 0, 10, 10]], [0]), ann([[1, 1, 10, 10]], [0])]
    mean_ap, _ = eval_map(results, annotations)
    assert mean_ap == pytest.approx(0.5 + 0.5 * 2 / 3)


def test_second_detection_of_one_box_is_a_false_positive() -> None:
    results = [[dets([0, 0, 10, 10, 0.9], [0, 0, 10, 10, 0.8])]]
    # One of two gts found, by the top detection: recall .5 at precision 1 -> AP .5.
    mean_ap, per_class = eval_map(results, [ann([[0, 0, 10, 10], [30, 30, 40, 40]], [0, 0])])
    assert mean_ap == pytest.approx(0.5)
    assert per_class[0]["recall"] == pytest.approx(0.5)


def test_iou_threshold_is_inclusive() -> None:
    # IoU exactly 0.5: [0,0,10,10] vs [0,0,10,20] -> 100 / 200.
    mean_ap, _ = eval_map([[dets([0, 0, 10, 20, 0.9])]], [ann([[0, 0, 10, 10]], [0])])
    assert mean_ap == pytest.approx(1.0)
    mean_ap, _ = eval_map([[dets([0, 0, 10, 21, 0.9])]], [ann([[0, 0, 10, 10]], [0])])
    assert mean_ap == 0.0


def test_classes_without_gt_are_skipped() -> None:
    results = [[dets([0, 0, 10, 10, 0.9]), dets([0, 0, 5, 5, 0.99])]]
    mean_ap, per_class = eval_map(results, [ann([[0, 0, 10, 10]], [0])], class_names=["a", "b"])
    assert mean_ap == pytest.approx(1.0)
    assert (
        per_class[1]["class"] == "b"
        and per_class[1]["num_gts"] == 0
        and math.isnan(per_class[1]["ap"])
    )
    assert math.isnan(eval_map([[dets()]], [ann([], [])])[0])


def test_detections_on_ignore_boxes_count_neither_way() -> None:
    results = [[dets([40, 40, 50, 50, 0.95], [0, 0, 10, 10, 0.9])]]
    mean_ap, _ = eval_map(results, [ann([[0, 0, 10, 10]], [0], ignore=[[40, 40, 50, 50]])])
    assert mean_ap == pytest.approx(1.0)
    mean_ap, _ = eval_map(results, [ann([[0, 0, 10, 10]], [0])])
    assert mean_ap == pytest.approx(
        0.5
    )  # without the ignore box the top detection is a false positive


def test_bad_inputs_name_the_problem() -> None:
    with pytest.raises(ValueError, match="2 det_results for 1 annotations"):
        eval_map([[dets()], [dets()]], [ann([], [])])
    with pytest.raises(ValueError, match=r"annotations\[0\]"):
        eval_map([[dets()]], [dict(boxes=[])])
    with pytest.raises(ValueError, match="iou_thr"):
        eval_map([[dets()]], [ann([], [])], iou_thr=0)
    with pytest.raises(TypeError, match="must be lists"):
        eval_map(np.zeros(3), [])


boxes = st.tuples(
    st.integers(0, 50), st.integers(0, 50), st.integers(1, 30), st.integers(1, 30)
).map(lambda t: [t[0], t[1], t[0] + t[2], t[1] + t[3]])


@settings(max_examples=40, deadline=None)
@given(
    gts=st.lists(boxes, min_size=1, max_size=5),
    noise=st.lists(boxes, max_size=5),
    scores=st.lists(st.floats(0.2, 1.0), min_size=10, max_size=10),
)
def test_ap_bounds_and_low_scored_false_positives_change_nothing(gts, noise, scores) -> None:
    candidates = gts + noise
    results = [[dets(*[b + [s] for b, s in zip(candidates, scores)])]]
    annotations = [ann(gts, [0] * len(gts))]
    mean_ap, _ = eval_map(results, annotations)
    assert 0.0 <= mean_ap <= 1.0
    # Every gt is detected by a box equal to it, so recall reaches 1 and precision > 0.
    assert mean_ap > 0
    far = dets(*[b + [s] for b, s in zip(candidates, scores)], [200, 200, 210, 210, 0.1])
    assert eval_map([[far]], annotations)[0] == pytest.approx(mean_ap)


def test_a_detection_whose_best_ground_truth_is_taken_is_a_false_positive() -> None:
    # VOC rule: each detection is compared with its highest-IoU ground truth only;
    # if that one is already matched, the detection is a false positive, even when
    # another ground truth (here B, IoU 0.9) is still free.
    gts = dict(
        bboxes=np.array([[0, 0, 10, 10], [0, 0, 10, 9]], np.float32), labels=np.array([0, 0])
    )
    dets = [[np.array([[0, 0, 10, 10, 0.9], [0, 0, 10, 10, 0.8]], np.float32)]]
    mean, per_class = eval_map(dets, [gts])
    assert mean == pytest.approx(0.5)


def test_labels_outside_the_classes_are_an_error() -> None:
    gts = dict(bboxes=np.zeros((1, 4), np.float32), labels=np.array([3]))
    with pytest.raises(ValueError, match=r"annotations\[0\]: labels \[3\] outside the 2 classes"):
        eval_map([[np.zeros((0, 5)), np.zeros((0, 5))]], [gts])
