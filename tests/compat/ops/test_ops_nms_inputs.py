"""nms, soft_nms, batched_nms and nms_match: bad input, and non-finite values.

Bad input is one ``TypeError`` or ``ValueError`` naming the op and the parameter
(an ``ArgumentError``, an ``AssertionError`` too, where mmcv asserts). Non-finite
values get the documented result: a NaN score ranks as ``-inf``, a box with a NaN
or infinite coordinate neither suppresses nor is suppressed, soft_nms counts a
NaN IoU as 0.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.nms import batched_nms, nms, nms_match, soft_nms
from tests.compat.ops._nms_reference import (
    MMCV_BOXES,
    MMCV_SCORES,
    random_boxes,
    ref_nms,
    ref_nms_match,
    ref_soft_nms,
)
from tests.compat.ops._reference import DEVICES

pytest.importorskip("torchvision")

NAN, INF = float("nan"), float("inf")


def mmcv_case():
    return torch.from_numpy(MMCV_BOXES), torch.from_numpy(MMCV_SCORES)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("thr", [1.5, -0.1, NAN])
def test_iou_threshold_out_of_range(thr: float) -> None:
    boxes, scores = mmcv_case()
    match = r"iou_threshold must be in \[0, 1\]"
    with pytest.raises(ValueError, match=r"mmcv\.ops\.nms: " + match):
        nms(boxes, scores, thr)
    with pytest.raises(ValueError, match=r"mmcv\.ops\.soft_nms: " + match):
        soft_nms(boxes, scores, thr)
    with pytest.raises(ValueError, match=r"mmcv\.ops\.nms_match: " + match):
        nms_match(torch.cat([boxes, scores[:, None]], 1), thr)
    idxs = torch.zeros(4, dtype=torch.long)
    for split_thr in (10000, 1):  # one nms, and nms class by class
        with pytest.raises(ValueError, match=r"mmcv\.ops\.nms: " + match):
            batched_nms(boxes, scores, idxs, dict(iou_threshold=thr, split_thr=split_thr))


@pytest.mark.parametrize("thr", ["0.5", True, None, [0.5]])
def test_iou_threshold_not_a_number(thr) -> None:  # noqa: ANN001
    boxes, scores = mmcv_case()
    with pytest.raises(TypeError, match=r"mmcv\.ops\.nms: iou_threshold must be a real number"):
        nms(boxes, scores, thr)
    with pytest.raises(TypeError, match=r"soft_nms: iou_threshold must be a real number"):
        soft_nms(boxes, scores, thr)


def test_nms_score_threshold_and_max_num() -> None:
    boxes, scores = mmcv_case()
    with pytest.raises(ValueError, match=r"mmcv\.ops\.nms: score_threshold must be a number"):
        nms(boxes, scores, 0.5, score_threshold=NAN)
    with pytest.raises(TypeError, match=r"score_threshold must be a real number, got str"):
        nms(boxes, scores, 0.5, score_threshold="0.1")
    for bad in (2.5, True, "3"):
        with pytest.raises(TypeError, match=r"mmcv\.ops\.nms: max_num must be an int"):
            nms(boxes, scores, 0.5, max_num=bad)
    # numpy scalars are numbers
    assert nms(boxes, scores, np.float32(0.3), max_num=np.int64(2))[1].tolist() == [1, 0]


@pytest.mark.parametrize("sigma", [0.0, -0.5, INF, NAN])
def test_soft_nms_gaussian_sigma(sigma: float) -> None:
    boxes, scores = mmcv_case()
    with pytest.raises(ValueError, match=r"mmcv\.ops\.soft_nms: sigma must be above 0"):
        soft_nms(boxes, scores, sigma=sigma, method="gaussian")
    # linear and naive do not use sigma: mmcv takes any number there.
    assert soft_nms(boxes, scores, sigma=sigma, method="linear")[1].numel() == 4


def test_soft_nms_min_score_and_method() -> None:
    boxes, scores = mmcv_case()
    for bad in (NAN, INF, -INF):
        with pytest.raises(ValueError, match=r"mmcv\.ops\.soft_nms: min_score must be finite"):
            soft_nms(boxes, scores, min_score=bad)
    with pytest.raises(TypeError, match=r"soft_nms: sigma must be a real number, got NoneType"):
        soft_nms(boxes, scores, sigma=None)
    for bad in ("hard", ["linear"], None):
        with pytest.raises(ArgumentError, match=r"soft_nms: method must be one of .*got"):
            soft_nms(boxes, scores, method=bad)
    # mmcv asserts the method: code written against it catches AssertionError.
    with pytest.raises(AssertionError):
        soft_nms(boxes, scores, method="hard")


def test_shapes_and_offset_are_assertion_errors_too() -> None:
    boxes, scores = mmcv_case()
    for op in (nms, soft_nms):
        name = op.__name__
        with pytest.raises(ArgumentError, match=rf"{name}: boxes must have shape \(N, 4\)"):
            op(boxes[:, :3], scores, 0.3)
        with pytest.raises(AssertionError, match=rf"{name}: scores must have shape \(N,\)"):
            op(boxes, scores[:2], 0.3)
        with pytest.raises(AssertionError, match=rf"{name}: offset must be 0 or 1, got 2"):
            op(boxes, scores, 0.3, offset=2)
        with pytest.raises(TypeError, match=rf"{name}: boxes must be floating point, got torch"):
            op(boxes.long(), scores, 0.3)
        with pytest.raises(TypeError, match=rf"{name}: scores must be a torch.Tensor or a numpy"):
            op(boxes, scores.tolist(), 0.3)
    with pytest.raises(AssertionError, match=r"nms_match: dets must have shape \(N, 5\)"):
        nms_match(np.zeros((2, 3)), 0.5)
    with pytest.raises(TypeError, match=r"nms_match: dets must be floating point"):
        nms_match(torch.ones(2, 5, dtype=torch.long), 0.5)


def test_batched_nms_bad_input() -> None:
    boxes, scores = mmcv_case()
    idxs = torch.tensor([0, 1, 0, 1])
    cfg = dict(iou_threshold=0.5)
    with pytest.raises(TypeError, match=r"batched_nms: idxs must be class indices .*torch.bool"):
        batched_nms(boxes, scores, idxs.bool(), cfg)
    with pytest.raises(TypeError, match=r"batched_nms: scores must be floating point"):
        batched_nms(boxes, idxs, idxs, cfg)
    with pytest.raises(TypeError, match=r"batched_nms: nms_cfg must be a dict or None, got list"):
        batched_nms(boxes, scores, idxs, [("iou_threshold", 0.5)])
    with pytest.raises(ValueError, match=r"batched_nms: nms_cfg must give iou_threshold"):
        batched_nms(boxes, scores, idxs, dict(type="nms"))
    with pytest.raises(TypeError, match=r"batched_nms: nms_cfg has \['iou'\], which .*'nms'"):
        batched_nms(boxes, scores, idxs, dict(iou=0.5))
    with pytest.raises(TypeError, match=r"nms_cfg has \['max_num'\], which .*'soft_nms'"):
        batched_nms(boxes, scores, idxs, dict(type="soft_nms", max_num=3))
    with pytest.raises(TypeError, match=r"batched_nms: nms_cfg\['split_thr'\] must be a real"):
        batched_nms(boxes, scores, idxs, dict(cfg, split_thr="10"))
    with pytest.raises(TypeError, match=r"batched_nms: nms_cfg\['max_num'\] must be an int"):
        batched_nms(boxes, scores, idxs, dict(cfg, split_thr=1, max_num=2.0))
    with pytest.raises(ValueError, match=r"batched_nms: boxes must have shape \(N, C\)"):
        batched_nms(boxes[0], scores, idxs, None)
    # Class indices as floats are what mmcv takes too.
    assert torch.equal(
        batched_nms(boxes, scores, idxs.float(), cfg)[1], batched_nms(boxes, scores, idxs, cfg)[1]
    )


@pytest.mark.parametrize("device", DEVICES)
def test_empty_inputs(device: str) -> None:
    none = torch.zeros(0, 4, device=device)
    for op in (nms, soft_nms):
        dets, inds = op(none, torch.zeros(0, device=device), 0.5)
        assert dets.shape == (0, 5) and inds.shape == (0,) and inds.device.type == device
    idxs = torch.zeros(0, dtype=torch.long, device=device)
    for cfg in (None, dict(iou_threshold=0.5), dict(type="soft_nms", iou_threshold=0.5)):
        dets, keep = batched_nms(none, torch.zeros(0, device=device), idxs, cfg)
        assert dets.shape == (0, 5) and keep.shape == (0,)
    assert nms_match(torch.zeros(0, 5, device=device), 0.5) == []


# ---------------------------------------------------------------- non-finite values


@pytest.mark.parametrize("device", DEVICES)
def test_nan_score_ranks_last_and_suppresses_nothing(device: str) -> None:
    # Box 0 (NaN) overlaps box 1; box 2 is apart.
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 10, 10], [50, 50, 60, 60], [51, 51, 60, 60]])
    scores = torch.tensor([NAN, 0.5, 0.7, NAN])
    _, inds = nms(boxes.to(device), scores.to(device), 0.5)
    # mmcv-full would visit box 0 first and drop box 1.
    assert inds.tolist() == [2, 1] == ref_nms(boxes.tolist(), scores.tolist(), 0.5)
    apart = boxes + torch.arange(4.0)[:, None] * 100
    dets, inds = nms(apart.to(device), scores.to(device), 0.5)
    assert inds.tolist() == [2, 1, 0, 3]  # NaN scores last, in input order
    assert math.isnan(dets[2, 4]) and math.isnan(dets[3, 4])
    assert nms(apart.to(device), scores.to(device), 0.5, score_threshold=0.1)[1].tolist() == [2, 1]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_non_finite_box_neither_suppresses_nor_is_suppressed(device: str, bad: float) -> None:
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 10, 10], [0, 0, 9, 9]])
    boxes[0, 2 if bad > 0 or math.isnan(bad) else 0] = bad
    for scores in ([0.9, 0.8, 0.7], [0.1, 0.8, 0.7]):
        _, inds = nms(boxes.to(device), torch.tensor(scores, device=device), 0.5)
        assert sorted(inds.tolist()) == [0, 1]  # box 2 falls to box 1, not to box 0
        assert inds.tolist() == ref_nms(boxes.tolist(), scores, 0.5)


def test_soft_nms_non_finite() -> None:
    boxes, scores = random_boxes(30, seed=40)
    scores[[3, 11]] = NAN
    boxes[5, 0] = NAN
    for method in ("linear", "gaussian", "naive"):
        dets, inds = soft_nms(boxes, scores, 0.3, method=method, min_score=0.01)
        ref, ref_scores = ref_soft_nms(boxes.numpy(), scores.numpy(), 0.3, 0.5, 0.01, method)
        assert inds.tolist() == ref
        assert inds[-2:].tolist() in ([3, 11], [11, 3])  # NaN scores last, kept
        assert dets[:-2, 4].isfinite().all()
        torch.testing.assert_close(dets[:, 4], torch.tensor(ref_scores), equal_nan=True)
    # Box 5 (NaN coordinate) has the top score: it lowers no score, and keeps its own.
    scores[5] = 2.0
    dets, inds = soft_nms(boxes, scores, method="gaussian", min_score=0.01)
    assert inds[0] == 5 and dets[0, 4] == 2.0
    others = torch.arange(30) != 5
    without, _ = soft_nms(boxes[others], scores[others], method="gaussian", min_score=0.01)
    assert torch.equal(dets[1:, 4].nan_to_num(-1.0), without[:, 4].nan_to_num(-1.0))


def test_soft_nms_gaussian_zero_area_boxes_keep_finite_scores() -> None:
    # IoU 0 / 0 (mmcv's docstring boxes): mmcv's gaussian turns the scores NaN.
    boxes = torch.tensor([[4.0, 3, 5, 3], [4, 3, 5, 4], [3, 1, 3, 1], [3, 1, 3, 1], [3, 1, 3, 1]])
    dets, inds = soft_nms(boxes, torch.tensor([0.9, 0.9, 0.5, 0.5, 0.4]), method="gaussian")
    assert inds.tolist() == [0, 1, 2, 3, 4]
    assert dets[:, 4].isfinite().all()


def test_soft_nms_inf_score_times_zero_is_nan_and_ranks_last() -> None:
    boxes = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 10], [20, 20, 30, 30]])
    scores = torch.tensor([0.9, INF, 0.5])
    dets, inds = soft_nms(boxes, scores, 0.5, method="naive", min_score=0.01)
    # inf is taken first; box 0 overlaps it: 0.9 * 0 is 0, dropped.
    assert inds.tolist() == [1, 2]
    scores = torch.tensor([INF, INF, 0.5])
    dets, inds = soft_nms(boxes, scores, 0.5, method="naive", min_score=0.01)
    assert inds.tolist() == [0, 2, 1] and math.isnan(dets[2, 4])  # inf * 0


@pytest.mark.parametrize("split_thr", [10000, 1])
def test_batched_nms_non_finite(split_thr: int) -> None:
    boxes, scores = random_boxes(60, seed=41)
    idxs = torch.arange(60) % 3
    cfg = dict(iou_threshold=0.5, split_thr=split_thr)
    _, want = batched_nms(boxes, scores, idxs, cfg)
    # A NaN coordinate (mmcv: boxes.max() is NaN, every offset NaN, nothing suppressed)
    # or an infinite one leaves the other boxes' result as it was.
    for bad in (NAN, INF):
        moved = boxes.clone()
        moved[7, 2] = bad
        _, keep = batched_nms(moved, scores, idxs, cfg)
        assert set(keep.tolist()) - {7} == set(want.tolist()) - {7}
    # NaN scores come last.
    nan_scores = scores.clone()
    nan_scores[[4, 9]] = NAN
    _, keep = batched_nms(boxes, nan_scores, idxs, cfg)
    assert set(keep[-2:].tolist()) <= {4, 9} and not nan_scores[keep[:-2]].isnan().any()
    dets, keep = batched_nms(boxes, nan_scores, idxs, None)
    assert keep[-2:].tolist() == [4, 9] and dets[:-2, 4].isfinite().all()


def test_nms_match_nan_score_and_box() -> None:
    boxes, scores = random_boxes(40, seed=42)
    dets = torch.cat([boxes, scores[:, None]], 1)
    dets[[2, 5], 4] = NAN
    dets[8, 1] = NAN
    groups = [g.tolist() for g in nms_match(dets, 0.4)]
    assert groups == ref_nms_match(dets.tolist(), 0.4)
    assert [8] in groups
    assert groups[-1][0] in (2, 5) or groups[-2][0] in (2, 5)
