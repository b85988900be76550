"""soft_nms against a literal replay of mmcv's CPU kernel, and its parts.

mmpar computes soft_nms in rounds over the overlapping pairs
(:mod:`mmpar.compat.ops.suppression.soft_nms_rounds`); the result must be the kernel's, step
for step: the boxes taken, their order (equal scores in the kernel's slot order,
after its swaps and refills), their scores and the drops. ``ref_soft_nms`` replays
the kernel one box at a time; :func:`soft_nms_steps` (the step-by-step fallback)
is checked against it too.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import pytest
import torch

from mmpar.compat.ops.nms import soft_nms
from mmpar.compat.ops.suppression import soft_nms_rounds
from mmpar.compat.ops.suppression.box_pairs import RectangleIndex
from mmpar.compat.ops.suppression.soft_nms_kernel import SoftNMSParams, soft_nms_steps
from tests.compat.ops._nms_reference import MMCV_BOXES, MMCV_SCORES, random_boxes, ref_soft_nms
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

pytest.importorskip("torchvision")


MMCV_SOFT = {  # mmcv's test: iou_threshold=0.3, sigma=0.5, min_score=0.01
    "linear": ([1, 0, 2, 3], [0.9, 0.6, 0.29024392, 0.2]),
    "gaussian": ([1, 0, 2, 3], [0.9, 0.59630775, 0.35275510, 0.18650459]),
    "naive": ([1, 0, 3], [0.9, 0.6, 0.2]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", sorted(MMCV_SOFT))
def test_soft_nms_mmcv_case(device: str, method: str) -> None:
    boxes = torch.from_numpy(MMCV_BOXES).to(device)
    scores = torch.from_numpy(MMCV_SCORES).to(device)
    dets, inds = soft_nms(boxes, scores, 0.3, sigma=0.5, min_score=0.01, method=method)
    assert dets.device.type == inds.device.type == device
    want_inds, want_scores = MMCV_SOFT[method]
    assert inds.tolist() == want_inds
    torch.testing.assert_close(dets[:, :4].cpu(), torch.from_numpy(MMCV_BOXES)[want_inds])
    torch.testing.assert_close(dets[:, 4].cpu(), torch.tensor(want_scores))


def test_soft_nms_docstring_example() -> None:
    boxes = np.array(
        [[4, 3, 5, 3], [4, 3, 5, 4], [3, 1, 3, 1], [3, 1, 3, 1], [3, 1, 3, 1], [3, 1, 3, 1]],
        dtype=np.float32,
    )
    scores = np.array([0.9, 0.9, 0.5, 0.5, 0.4, 0.0], dtype=np.float32)
    dets, inds = soft_nms(boxes, scores, 0.6, sigma=0.5)
    assert isinstance(dets, np.ndarray) and len(inds) == len(dets) == 5


@pytest.mark.parametrize("method", ["naive", "linear", "gaussian"])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("min_score", [1e-3, 0.3])
def test_soft_nms_matches_reference(method: str, offset: int, min_score: float) -> None:
    boxes, scores = random_boxes(40, seed=7 + offset)
    dets, inds = soft_nms(boxes, scores, 0.3, 0.5, min_score, method, offset)
    ref_inds, ref_scores = ref_soft_nms(
        boxes.numpy(), scores.numpy(), 0.3, 0.5, min_score, method, offset
    )
    assert inds.tolist() == ref_inds
    torch.testing.assert_close(dets[:, 4], torch.tensor(ref_scores), rtol=1e-5, atol=1e-6)
    assert torch.equal(dets[:, :4], boxes[inds])


def test_soft_nms_ties_follow_the_kernels_refills() -> None:
    # Disjoint boxes. Box 1 drops below min_score when box 0 is taken, and the kernel
    # refills its slot with the last box (4), which then comes first among the 0.5s.
    boxes = torch.tensor([[10.0 * k, 0, 10.0 * k + 5, 5] for k in range(5)])
    scores = torch.tensor([0.9, 1e-4, 0.5, 0.5, 0.5])
    _, inds = soft_nms(boxes, scores)
    ref, _ = ref_soft_nms(boxes.numpy(), scores.numpy(), 0.3, 0.5, 1e-3, "linear")
    assert inds.tolist() == ref == [0, 4, 2, 3]
    # Many equal scores, overlaps and drops.
    boxes, _ = random_boxes(60, seed=8)
    scores = torch.tensor([0.2, 0.5, 0.5, 0.9] * 15)
    for method in ("naive", "linear"):
        _, inds = soft_nms(boxes, scores, 0.2, min_score=0.15, method=method)
        ref, _ = ref_soft_nms(boxes.numpy(), scores.numpy(), 0.2, 0.5, 0.15, method)
        assert inds.tolist() == ref


def test_soft_nms_keeps_the_first_box_whatever_its_score() -> None:
    one = torch.tensor([[0.0, 0, 1, 1]])
    assert soft_nms(one, torch.tensor([1e-5]))[1].tolist() == [0]
    two = torch.tensor([[0.0, 0, 1, 1], [5, 5, 6, 6]])
    assert soft_nms(two, torch.tensor([1e-5, 1e-6]))[1].tolist() == [0]


@pytest.mark.parametrize("device", DEVICES)
def test_soft_nms_empty_and_numpy(device: str) -> None:
    dets, inds = soft_nms(torch.zeros(0, 4, device=device), torch.zeros(0, device=device))
    assert dets.shape == (0, 5) and inds.shape == (0,) and inds.dtype == torch.long
    assert dets.device.type == device
    dets, inds = soft_nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32))
    assert isinstance(dets, np.ndarray) and dets.shape == (0, 5)
    dets, inds = soft_nms(MMCV_BOXES, MMCV_SCORES, 0.3, min_score=0.01)
    assert isinstance(inds, np.ndarray) and inds.tolist() == [1, 0, 2, 3]


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_soft_nms_half(dtype: torch.dtype) -> None:
    boxes, scores = random_boxes(30, seed=9)
    boxes, scores = boxes.to(dtype), scores.to(dtype)
    dets, inds = soft_nms(boxes, scores, method="gaussian")
    assert dets.dtype == dtype
    ref_dets, ref_inds = soft_nms(boxes.float(), scores.float(), method="gaussian")
    assert torch.equal(inds, ref_inds)
    torch.testing.assert_close(dets, ref_dets.to(dtype))


def test_soft_nms_bad_input() -> None:
    boxes, scores = torch.from_numpy(MMCV_BOXES), torch.from_numpy(MMCV_SCORES)
    with pytest.raises(ValueError, match="method must be one of .*got 'hard'"):
        soft_nms(boxes, scores, method="hard")
    with pytest.raises(ValueError, match="offset must be 0 or 1, got -1"):
        soft_nms(boxes, scores, offset=-1)
    with pytest.raises(ValueError, match=r"mmcv\.ops\.soft_nms: boxes must have shape"):
        soft_nms(boxes[:, :3], scores)


# ---------------------------------------------------------------- rounds against the kernel


def hard_case(seed: int, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Clustered boxes with what makes the kernel's order hard: equal scores,
    duplicate boxes, NaN and inf scores, NaN and inf coordinates, empty boxes."""
    g = torch.Generator().manual_seed(seed)
    boxes, scores = random_boxes(n, seed, size=float(torch.randint(5, 120, (1,), generator=g)))
    if seed % 2:
        scores = (scores * [3, 10, 50][seed % 3]).floor() / 10  # ties
    k = torch.randint(0, n, (8,), generator=g)
    if seed % 3 == 0:
        scores[k[:2]] = float("nan")
        scores[k[2]] = float("inf")
    if seed % 4 == 1:
        boxes[k[3], 2] = float("nan")
        boxes[k[4], 3] = float("inf")
        boxes[k[5], 2:] = boxes[k[5], :2]  # zero area
    if seed % 5 == 2:
        boxes[: n // 3] = boxes[n // 3 : 2 * (n // 3)]  # duplicates
        scores[: n // 3] = scores[n // 3 : 2 * (n // 3)]
    return boxes, scores


CASES = [
    ("linear", 0.3, 1e-3, 0),
    ("linear", 0.0, 0.0, 1),
    ("gaussian", 0.5, 0.05, 0),
    ("gaussian", 0.3, 1e-3, 1),
    ("naive", 0.5, 0.0, 0),
    ("naive", 0.7, 0.3, 1),
    ("linear", 1.0, 0.2, 0),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("small_epochs", [False, True])
def test_rounds_are_the_kernel(case: int, small_epochs: bool, monkeypatch) -> None:  # noqa: ANN001
    method, thr, min_score, offset = CASES[case]
    monkeypatch.setattr(soft_nms_rounds, "_FEW_BOXES", 0)
    if small_epochs:  # several epochs, cut by their pair budget: their edges get exercised
        monkeypatch.setattr(soft_nms_rounds, "_EPOCH", 4)
        monkeypatch.setattr(soft_nms_rounds, "_EPOCH_MIN", 2)
        monkeypatch.setattr(soft_nms_rounds, "_EPOCH_PAIRS", 24)
    for seed in range(case * 10, case * 10 + (3 if small_epochs else 6)):
        boxes, scores = hard_case(seed, 40 + (17 * seed) % 60)
        params = SoftNMSParams(thr, 0.5, min_score, method, offset)
        inds, kept = soft_nms_rounds.soft_nms_keep(boxes, scores, params)
        ref_inds, ref_scores = ref_soft_nms(
            boxes.numpy(), scores.numpy(), thr, 0.5, min_score, method, offset
        )
        assert inds.tolist() == ref_inds, seed
        torch.testing.assert_close(
            kept, torch.tensor(ref_scores), rtol=1e-5, atol=1e-6, equal_nan=True
        )
        steps = soft_nms_steps(boxes, scores, params)
        assert torch.equal(steps[0], inds)
        assert torch.equal(steps[1].nan_to_num(-7.0), kept.nan_to_num(-7.0))


@pytest.mark.parametrize("n", [800, 1600])  # more than _FEW_BOXES; a sweep, then strips
def test_rounds_float64_and_many_boxes(n: int) -> None:
    boxes, scores = random_boxes(n, seed=31, size=300.0 * (n / 800) ** 0.5)
    scores = (scores * 40).floor() / 40
    for method in ("linear", "gaussian"):
        params = SoftNMSParams(0.3, 0.5, 1e-3, method, 0)
        inds, kept = soft_nms_rounds.soft_nms_keep(boxes.double(), scores.double(), params)
        steps = soft_nms_steps(boxes.double(), scores.double(), params)
        assert torch.equal(inds, steps[0]) and torch.equal(kept, steps[1])


def test_falls_back_to_the_steps_where_scores_can_rise() -> None:
    # min_score < 0: a negative score rises under a weight below 1.
    boxes, scores = random_boxes(50, seed=32)
    scores = scores - 0.5
    dets, inds = soft_nms(boxes, scores, 0.3, min_score=-0.2)
    ref, ref_scores = ref_soft_nms(boxes.numpy(), scores.numpy(), 0.3, 0.5, -0.2, "linear")
    assert inds.tolist() == ref
    torch.testing.assert_close(dets[:, 4], torch.tensor(ref_scores), rtol=1e-5, atol=1e-6)
    # naive with iou_threshold 0: every pair interacts.
    boxes, scores = random_boxes(30, seed=33)
    _, inds = soft_nms(boxes, scores, 0.0, min_score=0.0, method="naive")
    assert inds.tolist() == ref_soft_nms(boxes.numpy(), scores.numpy(), 0.0, 0.5, 0.0, "naive")[0]


@pytest.mark.parametrize("n", [1, 150, 1500])  # one sweep, then size groups in strips
def test_rectangle_index_finds_every_intersecting_pair(n: int) -> None:
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * 100 * (n / 150) ** 0.5
        wh = torch.rand(n, 2, generator=g, dtype=torch.float64) ** 3 * 80
        if seed % 2:
            xy, wh = xy.round(), (wh * 4).round() / 4  # touching edges, zero sizes
        xl, yl = xy.unbind(1)
        xr, yr = xl + wh[:, 0], yl + wh[:, 1]
        query = torch.randperm(n, generator=g)[: max(1, 2 * n // 5)]
        q, r = RectangleIndex(xl, yl, xr, yr).intersecting(query)
        got = list(zip(q.tolist(), r.tolist()))
        meets = (torch.maximum(xl[:, None], xl) <= torch.minimum(xr[:, None], xr)) & (
            torch.maximum(yl[:, None], yl) <= torch.minimum(yr[:, None], yr)
        )
        meets.fill_diagonal_(False)
        i, j = torch.nonzero(meets[query]).unbind(1)
        want = set(zip(query[i].tolist(), j.tolist()))
        assert len(got) == len(set(got)) and set(got) == want
