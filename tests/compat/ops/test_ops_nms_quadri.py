"""nms_quadri (mmcv.ops.nms) against a sequential greedy loop written from mmcv's CPU kernel."""

from __future__ import annotations

import importlib
from typing import List

import pytest
import torch

from mmpar.compat.ops.box_iou_quadri import box_iou_quadri
from mmpar.compat.ops.nms import batched_nms, nms_quadri, nms_rotated
from tests.compat.ops._convex_reference import mmcv_signature
from tests.compat.ops._quadri_reference import quadri_overlap
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, box_corners

module = importlib.import_module("mmpar.compat.ops.suppression.rotated_nms")

# mmcv's own test input (tests/test_ops/test_nms_quadri.py): quadrilaterals and scores.
MMCV_DETS = [
    [1.0, 1.0, 3.0, 4.0, 4.0, 4.0, 4.0, 1.0, 0.7],
    [2.0, 2.0, 3.0, 4.0, 4.0, 2.0, 3.0, 1.0, 0.8],
    [7.0, 7.0, 8.0, 8.0, 9.0, 7.0, 8.0, 6.0, 0.5],
    [0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 0.0, 0.9],
]
# mmcv's IoU of these two is negative (see test_ops_box_iou_quadri.py).
NEGATIVE = [[9.0, -6, -8, -7, 2, -8, -5, -6], [-9.0, 9, -3, 9, 4, -6, 9, -10]]


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
            if j not in suppressed and quadri_overlap(boxes[i], boxes[j]) >= threshold:
                suppressed.add(j)
    return keep


def random_dets(n: int, seed: int, extent: float = 40.0, ties: bool = True):
    """Convex quadrilaterals (a vertex on each side of a rotated box) and scores."""
    g = torch.Generator().manual_seed(seed)
    centre = torch.rand(n, 1, 2, generator=g, dtype=torch.float64) * extent
    angle = torch.rand(n, 1, generator=g, dtype=torch.float64) * 6.3
    turn = angle + torch.arange(4) * 1.5708 + torch.rand(n, 4, generator=g) - 0.5
    radius = torch.rand(n, 4, generator=g, dtype=torch.float64) * 6 + 2
    dets = centre + torch.stack((radius * torch.cos(turn), radius * torch.sin(turn)), -1)
    if ties:  # few distinct scores: many ties, ordered as mmcv's unstable sort orders them
        scores = torch.randint(0, 4, (n,), generator=g).double() / 4
    else:
        scores = torch.rand(n, generator=g, dtype=torch.float64)
    return dets.flatten(1), scores


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    boxes = torch.tensor(MMCV_DETS, device=device)
    labels = torch.tensor([1.0, 0, 1, 0], device=device)
    for given in (None, labels):  # labels do not keep classes apart (test_ml_nms_quadri)
        dets, keep = nms_quadri(boxes[:, :8], boxes[:, 8], 0.3, given)
        assert keep.tolist() == [3, 1, 2] and keep.device.type == device
        torch.testing.assert_close(dets, boxes[[3, 1, 2]])
    cfg = dict(type="nms_quadri", iou_threshold=0.3)
    dets, keep = batched_nms(boxes[:, :8], boxes[:, 8], labels, cfg, class_agnostic=True)
    assert keep.tolist() == [3, 1, 2]
    dets, keep = batched_nms(boxes[:, :8], boxes[:, 8], labels, cfg)
    assert keep.tolist() == [3, 1, 0, 2]
    torch.testing.assert_close(dets, boxes[[3, 1, 0, 2]])


@pytest.mark.parametrize("seed", range(4))
def test_matches_sequential_greedy(seed: int) -> None:
    n = [1, 2, 40, 90][seed]
    dets, scores = random_dets(n, seed, ties=seed % 2 == 0)
    for threshold in (0.05, 0.3, 0.7):
        _, keep = nms_quadri(dets, scores, threshold)
        assert keep.tolist() == greedy(dets, scores, threshold), threshold


def test_chains_and_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Squares in a row, each overlapping the next: the greedy choice alternates down it.
    x = torch.arange(30, dtype=torch.float64)[:, None] * 4
    dets = torch.cat([x, x * 0.3, x + 10, x * 0.3, x + 10, x * 0.3 + 4, x, x * 0.3 + 4], 1)
    scores = torch.linspace(1, 0.5, 30, dtype=torch.float64)
    ref = greedy(dets, scores, 0.2)
    assert 8 < len(ref) < 30
    assert nms_quadri(dets, scores, 0.2)[1].tolist() == ref
    monkeypatch.setattr(module, "_CHUNK_PAIRS", 3)  # candidate pairs in many chunks
    assert nms_quadri(dets, scores, 0.2)[1].tolist() == ref


@pytest.mark.parametrize("reverse", [False, True])
def test_rectangles_as_nms_rotated(reverse: bool) -> None:
    g = torch.Generator().manual_seed(5)
    boxes = torch.cat(
        [
            torch.rand(300, 2, generator=g, dtype=torch.float64) * 100,
            torch.rand(300, 2, generator=g, dtype=torch.float64) * 15 + 2,
            torch.rand(300, 1, generator=g, dtype=torch.float64) * 6 - 3,
        ],
        1,
    )
    scores = torch.rand(300, generator=g, dtype=torch.float64)
    corners = [box_corners(b)[::-1] if reverse else box_corners(b) for b in boxes.tolist()]
    quads = torch.tensor([[c for v in q for c in v] for q in corners], dtype=torch.float64)
    for threshold in (0.1, 0.5):
        expected = nms_rotated(boxes, scores, threshold)[1]
        assert torch.equal(nms_quadri(quads, scores, threshold)[1], expected)


def test_empty_one_and_identical_boxes() -> None:
    dets, keep = nms_quadri(torch.zeros(0, 8), torch.zeros(0), 0.5)
    assert dets.shape == (0, 9) and keep.shape == (0,) and keep.dtype == torch.long
    one = torch.tensor([[0.0, 0, 2, 0, 2, 1, 0, 1]])
    dets, keep = nms_quadri(one, torch.tensor([0.3]), 0.5)
    assert keep.tolist() == [0]
    torch.testing.assert_close(dets, torch.tensor([[0.0, 0, 2, 0, 2, 1, 0, 1, 0.3]]))
    same = one.repeat(5, 1)
    scores = torch.tensor([0.1, 0.9, 0.5, 0.9, 0.2])
    _, keep = nms_quadri(same, scores, 0.99)
    assert keep.tolist() == torch.sort(scores, descending=True).indices[:1].tolist()
    # Zero-area quadrilaterals overlap nothing: all kept.
    flat = torch.tensor([[0.0, 0, 1, 1, 2, 2, 3, 3], [0.0, 0, 0, 0, 0, 0, 0, 0]])
    assert nms_quadri(flat, torch.tensor([0.5, 0.4]), 0.1)[1].tolist() == [0, 1]


@pytest.mark.parametrize("device", DEVICES)
def test_thresholds_at_the_edges(device: str) -> None:
    dets, scores = random_dets(30, seed=13, ties=False)
    dets, scores = dets.to(device), scores.to(device)
    top = [int(torch.argmax(scores))]
    assert nms_quadri(dets, scores, -0.5)[1].tolist() == top
    assert len(nms_quadri(dets, scores, 1.5)[1]) == 30
    # IoU exactly 0.5: mmcv's CPU kernel drops it (>=), its CUDA kernel keeps it (>).
    pair = torch.tensor([[0.0, 0, 2, 0, 2, 1, 0, 1], [0.0, 0, 1, 0, 1, 1, 0, 1]], device=device)
    assert box_iou_quadri(pair[:1], pair[1:]).item() == 0.5
    keep = nms_quadri(pair, torch.tensor([0.9, 0.8], device=device), 0.5)[1]
    assert keep.tolist() == ([0] if device == "cpu" else [0, 1])
    if device == "cpu":  # threshold 0: every IoU of 0 or more is >= 0 ...
        assert nms_quadri(dets, scores, 0.0)[1].tolist() == top
        # ... but not mmcv's negative IoU: both kept, as in mmcv's CPU kernel.
        negative = torch.tensor(NEGATIVE + [[50.0, 50, 51, 50, 51, 51, 50, 51]])
        keep = nms_quadri(negative, torch.tensor([0.9, 0.8, 0.7]), 0.0)[1]
        assert keep.tolist() == greedy(negative, torch.tensor([0.9, 0.8, 0.7]), 0.0) == [0, 1]


def test_batched_nms_keeps_classes_apart() -> None:
    dets, scores = random_dets(70, seed=11, ties=False)
    idxs = torch.randint(0, 3, (70,), generator=torch.Generator().manual_seed(0))
    expected = []
    for cls in range(3):
        members = torch.nonzero(idxs == cls).view(-1)
        expected += members[greedy(dets[members], scores[members], 0.2)].tolist()
    expected.sort(key=lambda i: -scores[i].item())
    for split_thr in (10000, 10):
        cfg = dict(type="nms_quadri", iou_threshold=0.2, split_thr=split_thr)
        out, keep = batched_nms(dets, scores, idxs, cfg)
        assert keep.tolist() == expected
        torch.testing.assert_close(out, torch.cat([dets[keep], scores[keep, None]], 1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, *HALF_DTYPES])
def test_dtypes(device: str, dtype: torch.dtype) -> None:
    dets, scores = random_dets(60, seed=14, ties=False)
    dets, scores = dets.to(device, dtype), scores.to(device, dtype)
    out, keep = nms_quadri(dets, scores, 0.3)
    assert out.dtype == dtype and out.shape == (len(keep), 9)
    ref = greedy(dets.double().cpu(), scores.double().cpu(), 0.3)
    # float32 IoUs of the rounded boxes: at most a near-threshold pair differs
    assert len(set(keep.tolist()) ^ set(ref)) <= 2


@pytest.mark.parametrize("device", DEVICES)
def test_nan_scores_rank_last(device: str) -> None:
    nan, inf = float("nan"), float("inf")
    square = [0.0, 0, 10, 0, 10, 10, 0, 10]
    far = [50.0, 50, 54, 50, 54, 54, 50, 54]
    boxes = torch.tensor([square, square, far], device=device)
    for finite in (0.5, -inf):
        scores = torch.tensor([nan, finite, nan], device=device)
        dets, keep = nms_quadri(boxes, scores, 0.5)
        assert keep.tolist() == [1, 2] and dets[0, 8].item() == finite
    dets, keep = batched_nms(
        boxes[:2],
        torch.tensor([0.5, nan], device=device),
        torch.tensor([0, 0], device=device),
        dict(type="nms_quadri", iou_threshold=0.5),
    )
    assert keep.tolist() == [0] and dets[0, 8].item() == 0.5


def test_gradient_flows_to_kept_boxes() -> None:
    dets, scores = random_dets(20, seed=15, ties=False)
    dets.requires_grad_()
    scores.requires_grad_()
    out, keep = nms_quadri(dets, scores, 0.3)
    out.sum().backward()
    assert dets.grad[keep].eq(1).all() and dets.grad.sum() == 8 * len(keep)
    assert scores.grad[keep].eq(1).all() and scores.grad.sum() == len(keep)


def test_bad_input() -> None:
    dets, scores = random_dets(4, seed=16)
    with pytest.raises(ValueError, match=r"nms_quadri: dets must have shape \(N, 8\).*\(4, 5\)"):
        nms_quadri(dets[:, :5], scores, 0.5)
    with pytest.raises(ValueError, match=r"scores must have shape \(N,\) = \(4,\), got \(3,\)"):
        nms_quadri(dets, scores[:3], 0.5)
    with pytest.raises(ValueError, match=r"labels must have shape \(N,\) = \(4,\), got \(3,\)"):
        nms_quadri(dets, scores, 0.5, torch.zeros(3))
    with pytest.raises(TypeError, match="nms_quadri: dets must be a torch.Tensor, got list"):
        nms_quadri(dets.tolist(), scores, 0.5)
    with pytest.raises(TypeError, match="scores must be floating point, got torch.int64"):
        nms_quadri(dets, scores.long(), 0.5)
    with pytest.raises(ValueError, match=r"boxes must have shape \(N, 8\) for nms_cfg type"):
        batched_nms(dets[:, :5], scores, torch.zeros(4), dict(type="nms_quadri"))


def test_signature_matches_mmcv() -> None:
    import inspect

    params = list(inspect.signature(nms_quadri).parameters.values())
    ours = [p.name for p in params], [p.default for p in params if p.default is not p.empty]
    assert ours == mmcv_signature("nms", "nms_quadri")


def test_iou_threshold_not_a_number() -> None:
    dets, scores = random_dets(4, seed=17)
    with pytest.raises(TypeError, match="nms_quadri: iou_threshold must be a real number"):
        nms_quadri(dets, scores, "0.5")
    with pytest.raises(ValueError, match="nms_quadri: iou_threshold must be a number, got nan"):
        nms_quadri(dets, scores, float("nan"))
