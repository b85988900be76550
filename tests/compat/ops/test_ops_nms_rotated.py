"""nms_rotated (mmcv.ops.nms) against a sequential greedy loop written from mmcv's CPU kernel."""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from pathlib import Path
from typing import List

import pytest
import torch

from mmpar.compat import ops
from mmpar.compat.ops.box_iou_rotated import box_iou_rotated
from mmpar.compat.ops.nms import batched_nms, nms_rotated
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, rotated_overlap

# The module (the package attribute ``rotated_nms`` does not exist; import it by name).
module = importlib.import_module("mmpar.compat.ops.suppression.rotated_nms")

# mmcv's own test input (tests/test_ops/test_nms_rotated.py): boxes and scores.
MMCV_DETS = [
    [6.0, 3.0, 8.0, 7.0, 0.5, 0.7],
    [3.0, 6.0, 9.0, 11.0, 0.6, 0.8],
    [3.0, 7.0, 10.0, 12.0, 0.3, 0.5],
    [1.0, 4.0, 13.0, 7.0, 0.6, 0.9],
]


def greedy(dets: torch.Tensor, scores: torch.Tensor, threshold: float) -> List[int]:
    """mmcv's CPU kernel: visit by ``scores.sort(descending=True)``, drop at IoU >= threshold."""
    order = torch.sort(scores, 0, descending=True).indices.tolist()
    boxes = dets.tolist()
    suppressed, keep = set(), []
    for at, i in enumerate(order):
        if i in suppressed:
            continue
        keep.append(i)
        for j in order[at + 1 :]:
            if j not in suppressed and rotated_overlap(boxes[i], boxes[j]) >= threshold:
                suppressed.add(j)
    return keep


def dense_greedy(iou: torch.Tensor, scores: torch.Tensor, threshold: float) -> List[int]:
    """The same loop on a precomputed ``(N, N)`` IoU matrix, one kept box at a time."""
    order = torch.sort(scores, 0, descending=True).indices
    iou = iou[order][:, order]
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for at in range(len(order)):
        if not suppressed[at]:
            keep.append(int(order[at]))
            suppressed[at + 1 :] |= iou[at, at + 1 :] >= threshold
    return keep


def random_dets(n: int, seed: int, extent: float = 60.0, ties: bool = True):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * extent
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * 15 + 2
    angle = (torch.rand(n, 1, generator=g, dtype=torch.float64) - 0.5) * 2 * math.pi
    dets = torch.cat([xy, wh, angle], 1).float()
    if ties:  # few distinct scores: many ties, ordered as mmcv's unstable sort orders them
        scores = torch.randint(0, 4, (n,), generator=g).float() / 4
    else:
        scores = torch.rand(n, generator=g)
    return dets, scores


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("clockwise", [True, False])
def test_mmcv_numbers(device: str, clockwise: bool) -> None:
    boxes = torch.tensor(MMCV_DETS, device=device)
    if not clockwise:
        boxes[:, 4] *= -1
    dets, keep = nms_rotated(boxes[:, :5], boxes[:, 5], 0.5, clockwise=clockwise)
    assert keep.tolist() == [3, 1, 0] and keep.device.type == device
    assert dets.shape == (3, 6)
    # The input boxes come back (with the ccw angles given), and their scores.
    torch.testing.assert_close(dets, boxes[[3, 1, 0]])


@pytest.mark.parametrize("seed", range(6))
def test_matches_sequential_greedy(seed: int) -> None:
    n = [1, 2, 40, 90, 130, 150][seed]
    dets, scores = random_dets(n, seed, ties=seed % 2 == 0)
    for threshold in (0.05, 0.3, 0.7):
        _, keep = nms_rotated(dets, scores, threshold)
        assert keep.tolist() == greedy(dets, scores, threshold), threshold


def test_chains_need_several_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    # Boxes in a row, each overlapping the next: the greedy choice alternates down the chain.
    n = 40
    x = torch.arange(n, dtype=torch.float32) * 6
    dets = torch.stack([x, x * 0.3, torch.full_like(x, 10), torch.full_like(x, 4), x * 0.01], 1)
    scores = torch.linspace(1, 0.5, n)
    ref = greedy(dets, scores, 0.2)
    assert 10 < len(ref) < n
    assert nms_rotated(dets, scores, 0.2)[1].tolist() == ref
    monkeypatch.setattr(module, "_CHUNK_PAIRS", 3)  # candidate pairs in many chunks
    assert nms_rotated(dets, scores, 0.2)[1].tolist() == ref
    dense, dense_scores = random_dets(60, seed=9, extent=25)
    assert nms_rotated(dense, dense_scores, 0.3)[1].tolist() == greedy(dense, dense_scores, 0.3)


def test_many_boxes_match_dense_greedy() -> None:
    dets, scores = random_dets(1000, seed=10, extent=400, ties=False)
    iou = box_iou_rotated(dets, dets)
    for threshold in (0.1, 0.5):
        expected = dense_greedy(iou, scores, threshold)
        assert nms_rotated(dets, scores, threshold)[1].tolist() == expected


def test_labels_do_not_separate_classes_as_in_mmcv() -> None:
    # mmcv's test_ml_nms_rotated: with labels [1, 0, 1, 0] the result is [3, 1, 0], the
    # class-agnostic one (batched_nms per class keeps box 2 as well).
    boxes = torch.tensor(MMCV_DETS)
    labels = torch.tensor([1.0, 0, 1, 0])
    _, keep = nms_rotated(boxes[:, :5], boxes[:, 5], 0.5, labels)
    assert keep.tolist() == [3, 1, 0]
    with pytest.raises(ValueError, match=r"labels must have shape \(N,\) = \(4,\), got \(3,\)"):
        nms_rotated(boxes[:, :5], boxes[:, 5], 0.5, labels[:3])


def test_batched_nms_keeps_classes_apart() -> None:
    # mmcv's test_batched_nms numbers.
    boxes = torch.tensor(MMCV_DETS)
    labels = torch.tensor([1.0, 0, 1, 0])
    cfg = dict(type="nms_rotated", iou_threshold=0.5)
    _, keep = batched_nms(boxes[:, :5], boxes[:, 5], labels, cfg, class_agnostic=True)
    assert keep.tolist() == [3, 1, 0]
    dets, keep = batched_nms(boxes[:, :5], boxes[:, 5], labels, cfg)
    assert keep.tolist() == [3, 1, 0, 2]
    torch.testing.assert_close(dets, boxes[[3, 1, 0, 2]])
    # Random boxes of three classes, in one call and class by class (split_thr).
    dets, scores = random_dets(80, seed=11, ties=False)
    idxs = torch.randint(0, 3, (80,), generator=torch.Generator().manual_seed(0))
    expected = []
    for cls in range(3):
        members = torch.nonzero(idxs == cls).view(-1)
        expected += members[greedy(dets[members], scores[members], 0.2)].tolist()
    expected.sort(key=lambda i: -scores[i].item())
    for split_thr in (10000, 10):
        cfg = dict(type="nms_rotated", iou_threshold=0.2, split_thr=split_thr)
        assert batched_nms(dets, scores, idxs, cfg)[1].tolist() == expected


def test_mmrotate_multiclass_nms_rotated(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.find_spec("mmrotate")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs mmrotate")
    pytest.importorskip("mmcv")
    path = Path(spec.submodule_search_locations[0]) / "core/post_processing/bbox_nms_rotated.py"
    monkeypatch.setitem(sys.modules, "mmcv.ops", ops)  # the file imports mmcv.ops.nms_rotated
    file_spec = importlib.util.spec_from_file_location("_mmrotate_bbox_nms_rotated", path)
    mmrotate_nms = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(mmrotate_nms)

    dets, _ = random_dets(50, seed=12)
    g = torch.Generator().manual_seed(1)
    multi_scores = torch.rand(50, 4, generator=g)  # 3 classes and the background column
    nms_cfg = type("Cfg", (), {"iou_thr": 0.1})()
    out, labels = mmrotate_nms.multiclass_nms_rotated(dets, multi_scores, 0.3, nms_cfg)
    expected = []
    for cls in range(3):
        members = torch.nonzero(multi_scores[:, cls] > 0.3).view(-1)
        kept = members[greedy(dets[members], multi_scores[members, cls], 0.1)]
        expected += [(multi_scores[i, cls].item(), cls) for i in kept.tolist()]
    expected.sort(key=lambda item: -item[0])
    assert [(round(s, 6), c) for s, c in zip(out[:, 5].tolist(), labels.tolist())] == [
        (round(s, 6), c) for s, c in expected
    ]


def test_empty_one_and_identical_boxes() -> None:
    dets, keep = nms_rotated(torch.zeros(0, 5), torch.zeros(0), 0.5)
    assert dets.shape == (0, 6) and keep.shape == (0,) and keep.dtype == torch.long
    one = torch.tensor([[5.0, 5, 2, 3, 0.4]])
    dets, keep = nms_rotated(one, torch.tensor([0.3]), 0.5)
    assert keep.tolist() == [0]
    torch.testing.assert_close(dets, torch.tensor([[5.0, 5, 2, 3, 0.4, 0.3]]))
    same = one.repeat(5, 1)
    scores = torch.tensor([0.1, 0.9, 0.5, 0.9, 0.2])
    _, keep = nms_rotated(same, scores, 0.99)
    assert keep.tolist() == torch.sort(scores, descending=True).indices[:1].tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_thresholds_at_the_edges(device: str) -> None:
    dets, scores = random_dets(30, seed=13, ties=False)
    dets, scores = dets.to(device), scores.to(device)
    top = [int(torch.argmax(scores))]
    assert nms_rotated(dets, scores, -0.5)[1].tolist() == top
    assert len(nms_rotated(dets, scores, 1.5)[1]) == 30
    # IoU exactly 0.5 (axis-aligned, one box half of the other): mmcv's CPU kernel drops
    # it (>=), its CUDA kernel keeps it (>).
    pair = torch.tensor([[1.0, 0.5, 2, 1, 0], [0.5, 0.5, 1, 1, 0]], device=device)
    assert box_iou_rotated(pair[:1], pair[1:]).item() == 0.5
    keep = nms_rotated(pair, torch.tensor([0.9, 0.8], device=device), 0.5)[1]
    assert keep.tolist() == ([0] if device == "cpu" else [0, 1])
    if device == "cpu":  # threshold 0: every pair's IoU, 0 included, is >= 0
        assert nms_rotated(dets, scores, 0.0)[1].tolist() == top


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, *HALF_DTYPES])
def test_dtypes(device: str, dtype: torch.dtype) -> None:
    dets, scores = random_dets(60, seed=14, ties=False)
    dets, scores = dets.to(device, dtype), scores.to(device, dtype)
    out, keep = nms_rotated(dets, scores, 0.3)
    assert out.dtype == dtype
    ref = greedy(dets.double().cpu(), scores.double().cpu(), 0.3)
    if dtype == torch.float64:
        assert keep.tolist() == ref
    else:  # float32 IoUs of the rounded boxes: at most a near-threshold pair differs
        assert len(set(keep.tolist()) ^ set(ref)) <= 2


@pytest.mark.parametrize("device", DEVICES)
def test_nan_scores_rank_last(device: str) -> None:
    nan, inf = float("nan"), float("inf")
    box = torch.tensor([[5.0, 5, 10, 10, 0]], device=device)
    # A NaN-scored twin never suppresses the finite one, -inf included, nor comes first.
    for finite in (0.5, -inf):
        dets, keep = nms_rotated(box.repeat(2, 1), torch.tensor([nan, finite], device=device), 0.5)
        assert keep.tolist() == [1] and dets[0, 5].item() == finite
    boxes = torch.tensor(
        [[5.0, 5, 10, 10, 0], [5, 5, 10, 10, 0], [40, 40, 4, 4, 0], [80, 80, 4, 4, 0]],
        device=device,
    )
    _, keep = nms_rotated(boxes, torch.tensor([0.5, nan, nan, -inf], device=device), 0.5)
    assert keep.tolist() == [0, 3, 2]
    dets, keep = batched_nms(
        boxes[:2],
        torch.tensor([0.5, nan], device=device),
        torch.tensor([0, 0], device=device),
        dict(type="nms_rotated", iou_threshold=0.5),
    )
    assert keep.tolist() == [0] and dets[0, 5].item() == 0.5


def test_gradient_flows_to_kept_boxes() -> None:
    dets, scores = random_dets(20, seed=15, ties=False)
    dets.requires_grad_()
    out, keep = nms_rotated(dets, scores, 0.3)
    out[:, :5].sum().backward()
    assert dets.grad[keep].eq(1).all() and dets.grad.sum() == 5 * len(keep)


def test_bad_input() -> None:
    dets, scores = random_dets(4, seed=16)
    with pytest.raises(ValueError, match=r"nms_rotated: dets must have shape \(N, 5\).*\(4, 4\)"):
        nms_rotated(dets[:, :4], scores, 0.5)
    with pytest.raises(ValueError, match=r"scores must have shape \(N,\) = \(4,\), got \(3,\)"):
        nms_rotated(dets, scores[:3], 0.5)
    with pytest.raises(TypeError, match="dets must be a torch.Tensor, got list"):
        nms_rotated(dets.tolist(), scores, 0.5)
    with pytest.raises(TypeError, match="scores must be floating point, got torch.int64"):
        nms_rotated(dets, scores.long(), 0.5)
    with pytest.raises(ValueError, match=r"boxes must have shape \(N, 5\) for nms_cfg type"):
        batched_nms(dets[:, :4], scores, torch.zeros(4), dict(type="nms_rotated"))


def test_iou_threshold_not_a_number() -> None:
    dets, scores = random_dets(4, seed=17)
    with pytest.raises(TypeError, match="nms_rotated: iou_threshold must be a real number"):
        nms_rotated(dets, scores, None)
    with pytest.raises(ValueError, match="nms_rotated: iou_threshold must be a number, got nan"):
        nms_rotated(dets, scores, math.nan)
    cfg = dict(type="nms_rotated", iou_threshold=math.nan)
    with pytest.raises(ValueError, match="nms_rotated: iou_threshold must be a number"):
        batched_nms(dets, scores, torch.zeros(4), cfg)
