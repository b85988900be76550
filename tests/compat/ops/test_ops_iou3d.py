"""mmpar.compat.ops.iou3d against exact polygon areas, brute-force greedy NMS and mmcv's numbers."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from mmpar.compat.ops.box_iou_rotated import box_iou_rotated
from mmpar.compat.ops.boxes3d import greedy
from mmpar.compat.ops.iou3d import (
    boxes_iou3d,
    boxes_iou_bev,
    boxes_overlap_bev,
    nms3d,
    nms3d_normal,
    nms_bev,
    nms_normal_bev,
)
from mmpar.compat.ops.nms import nms, nms_rotated
from tests.compat.ops._reference import DEVICES, box_corners, clipped_area

# mmcv's own test (tests/test_ops/test_iou3d.py).
MMCV_BOXES1 = [
    [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 0.0],
    [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 0.0],
    [3.0, 3.0, 3.0, 3.0, 2.0, 2.0, 0.0],
]
MMCV_BOXES2 = [
    [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 0.0],
    [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, math.pi / 2],
    [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, math.pi / 4],
]
MMCV_OVERLAPS = [[4.0, 4.0, (8 + 8 * 2**0.5) / (3 + 2 * 2**0.5)], [1.0] * 3, [0.0] * 3]
MMCV_IOUS = [[1.0, 1.0, 1.0 / 2**0.5], [1.0 / 15] * 3, [0.0] * 3]
MMCV_NMS_BOXES = [
    [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 0.0],
    [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 0.0],
    [3.0, 3.0, 3.0, 3.0, 2.0, 2.0, 0.3],
    [3.0, 3.0, 3.0, 3.0, 2.0, 2.0, 0.0],
    [3.0, 3.2, 3.2, 3.0, 2.0, 2.0, 0.3],
]
MMCV_NMS_SCORES = [0.6, 0.9, 0.1, 0.2, 0.15]


def exact_overlap(a: list, b: list) -> float:
    """The area of the intersection of two boxes' rectangles, by polygon clipping."""
    rect = lambda box: box_corners((box[0], box[1], box[3], box[4], box[6]))  # noqa: E731
    return clipped_area(rect(a), rect(b))


def random_boxes(n: int, seed: int, spread: float = 6.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    xyz = torch.rand(n, 3, generator=gen) * spread
    size = torch.rand(n, 3, generator=gen) * 3 + 0.5
    yaw = (torch.rand(n, 1, generator=gen) - 0.5) * 2 * math.pi
    return torch.cat((xyz, size, yaw), 1)


def greedy_reference(boxes: torch.Tensor, scores: torch.Tensor, iou: torch.Tensor, thr: float):
    """Sequential greedy NMS: visit by mmcv's sort, drop on IoU strictly above ``thr``."""
    order = scores.sort(0, descending=True)[1].tolist()
    thr = float(np.float32(thr))
    keep: list = []
    for i in order:
        if all(not iou[k, i].item() > thr for k in keep):
            keep.append(i)
    return keep


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    boxes1 = torch.tensor(MMCV_BOXES1, device=device)
    boxes2 = torch.tensor(MMCV_BOXES2, device=device)
    want = torch.tensor(MMCV_OVERLAPS)
    torch.testing.assert_close(boxes_overlap_bev(boxes1, boxes2).cpu(), want, atol=1e-4, rtol=0)
    many = boxes_overlap_bev(boxes1, boxes2.repeat_interleave(555, 0)).cpu()
    torch.testing.assert_close(many, want.repeat_interleave(555, 1), atol=1e-4, rtol=0)
    ious = boxes_iou3d(boxes1, boxes2).cpu()
    torch.testing.assert_close(ious, torch.tensor(MMCV_IOUS), atol=1e-4, rtol=0)
    boxes = torch.tensor(MMCV_NMS_BOXES, device=device)
    scores = torch.tensor(MMCV_NMS_SCORES, device=device)
    for fn in (nms3d, nms3d_normal):
        keep = fn(boxes, scores, iou_threshold=0.3)
        assert keep.dtype == torch.long and keep.cpu().tolist() == [1, 0, 3]
    rng = np.random.RandomState(42)
    boxes = torch.from_numpy(rng.rand(555, 7).astype(np.float32)).to(device)
    scores = torch.from_numpy(rng.rand(555).astype(np.float32)).to(device)
    # 176 pins mmcv's kernel's overlap (its 1e-2 corner margin): the exact one keeps 179.
    assert len(nms3d(boxes, scores, iou_threshold=0.3)) == 176
    assert len(nms3d_normal(boxes, scores, iou_threshold=0.3)) == 148


def test_overlap_is_exact_away_from_the_margin() -> None:
    a, b = random_boxes(40, 1), random_boxes(30, 2)
    got = boxes_overlap_bev(a.double(), b.double())
    want = [[exact_overlap(p, q) for q in b.tolist()] for p in a.tolist()]
    want = torch.tensor(want, dtype=torch.float64)
    close = (got - want).abs() <= 1e-9 + 1e-9 * want
    # The rest have a corner within the kernel's margin outside the other rectangle:
    # counted, the area grows by at most about 1e-2 of a side.
    assert close.float().mean() > 0.9 and (want > 0).sum() > 100
    assert ((got - want)[~close] > 0).all() and ((got - want)[~close] < 0.2).all()
    torch.testing.assert_close(boxes_overlap_bev(a, b), got.float(), atol=1e-4, rtol=1e-5)


def test_margin_counts_near_corners() -> None:
    # 2 x 2 squares 0.005 apart: no overlap, but each one's corners are within the
    # kernel's 1e-2 margin of the other, which it counts: a 0.005 x 2 sliver.
    a = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0.0]], dtype=torch.float64)
    b = torch.tensor([[2.005, 0.0, 0.0, 2.0, 2.0, 1.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(boxes_overlap_bev(a, b), torch.tensor([[0.01]], dtype=torch.float64))
    far = b.clone()
    far[0, 0] = 2.05
    assert boxes_overlap_bev(a, far).item() == 0


def test_yaw_half_and_quarter_turns() -> None:
    box = [0.0, 0.0, 0.0, 4.0, 2.0, 1.0]
    turned = torch.tensor([box + [yaw] for yaw in (0.0, math.pi, -math.pi, math.pi / 2)])
    got = boxes_overlap_bev(turned, turned)
    want = torch.tensor([[8.0, 8.0, 8.0, 4.0]] * 3 + [[4.0, 4.0, 4.0, 8.0]])
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_iou3d_matches_definition(device: str) -> None:
    a, b = random_boxes(9, 3, spread=3.0), random_boxes(7, 4, spread=3.0)
    got = boxes_iou3d(a.double().to(device), b.double().to(device)).cpu()
    bev = boxes_overlap_bev(a.double(), b.double())
    for i, p in enumerate(a.tolist()):
        for j, q in enumerate(b.tolist()):
            h = max(
                0.0, min(p[2] + p[5] / 2, q[2] + q[5] / 2) - max(p[2] - p[5] / 2, q[2] - q[5] / 2)
            )
            inter = bev[i, j].item() * h
            union = p[3] * p[4] * p[5] + q[3] * q[4] * q[5] - inter
            assert got[i, j].item() == pytest.approx(inter / max(union, 1e-6), abs=1e-12)
    assert (got > 0).sum() > 10


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", [nms3d, nms3d_normal])
def test_nms_matches_greedy_reference(device: str, fn) -> None:
    boxes = random_boxes(70, 5, spread=6.0)
    gen = torch.Generator().manual_seed(6)
    scores = torch.rand(70, generator=gen)
    scores[::7] = scores[3]  # ties: visited in the sort's order
    if fn is nms3d:
        iou = kernel_ious(boxes)
    else:
        flat = boxes.clone()
        flat[:, 6] = 0
        iou = kernel_ious(flat)
    for thr in (0.0, 0.1, 0.3, 0.7):
        keep = fn(boxes.to(device), scores.to(device), thr).cpu().tolist()
        assert keep == greedy_reference(boxes, scores, iou, thr)


def kernel_ious(boxes: torch.Tensor) -> torch.Tensor:
    """``(N, N)`` float32 BEV IoUs from the op's overlap: ``overlap / fmax(union, 1e-8)``."""
    overlap = boxes_overlap_bev(boxes, boxes)
    area = boxes[:, 3] * boxes[:, 4]
    union = area[:, None] + area[None] - overlap
    return overlap / torch.fmax(union, torch.tensor(1e-8))


def test_nms_threshold_is_strict() -> None:
    # Two 4 x 1 boxes sharing 3 x 1: IoU 3 / 5.
    boxes = torch.tensor([[2.0, 0.5, 0, 4.0, 1.0, 1, 0], [3.0, 0.5, 0, 4.0, 1.0, 1, 0]])
    scores = torch.tensor([0.9, 0.8])
    for fn in (nms3d, nms3d_normal):
        iou = kernel_ious(boxes)[0, 1].item() if fn is nms3d else float(np.float32(3) / 5)
        assert fn(boxes, scores, iou).tolist() == [0, 1]
        below = float(np.nextafter(np.float32(iou), np.float32(0)))
        assert fn(boxes, scores, below).tolist() == [0]
        assert fn(boxes, scores, -0.5).tolist() == [0]


def test_nms_candidate_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    boxes = random_boxes(300, 8, spread=10.0)
    scores = torch.rand(300, generator=torch.Generator().manual_seed(9))
    whole = nms3d(boxes, scores, 0.2)
    monkeypatch.setattr(greedy, "_CHUNK_PAIRS", 5)
    assert torch.equal(nms3d(boxes, scores, 0.2), whole)


def test_non_finite() -> None:
    boxes = random_boxes(6, 10, spread=1.0)
    boxes[2, 0] = math.nan
    boxes[4, 3] = math.inf
    overlaps = boxes_overlap_bev(boxes, boxes)
    assert (overlaps[2] == 0).all() and (overlaps[:, 4] == 0).all()
    scores = torch.arange(6, 0, -1).float()
    for fn in (nms3d, nms3d_normal):
        keep = fn(boxes, scores, 0.0).tolist()
        assert 2 in keep and 4 in keep  # IoU 0 with every box: never dropped at 0
    # A NaN score sorts first, as mmcv's sort.
    scores[5] = math.nan
    assert nms3d(boxes, scores, 0.5)[0].item() == 5


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device: str) -> None:
    none, some = torch.zeros(0, 7, device=device), torch.rand(3, 7, device=device)
    assert boxes_overlap_bev(none, some).shape == (0, 3)
    assert boxes_iou3d(some, none).shape == (3, 0)
    for fn in (nms3d, nms3d_normal):
        keep = fn(none, torch.zeros(0, device=device), 0.5)
        assert keep.shape == (0,) and keep.dtype == torch.long


def test_dtypes() -> None:
    a, b = random_boxes(5, 11, spread=2.0), random_boxes(4, 12, spread=2.0)
    ref = boxes_overlap_bev(a, b)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        got = boxes_overlap_bev(a.to(dtype), b.to(dtype))
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), ref, atol=0.1, rtol=0.05)
    keep = nms3d(a.double(), torch.rand(5, dtype=torch.float64), 0.1)
    assert keep.dtype == torch.long


def test_gradient_flows() -> None:
    a = random_boxes(3, 13, spread=1.0).double().requires_grad_()
    b = random_boxes(3, 14, spread=1.0).double()
    boxes_iou3d(a, b).sum().backward()
    assert torch.isfinite(a.grad).all() and a.grad.abs().sum() > 0


def xyxyr(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    lo = torch.rand(n, 2, generator=gen) * 10
    return torch.cat((lo, lo + torch.rand(n, 2, generator=gen) * 3 + 0.5, torch.rand(n, 1)), 1)


def test_deprecated_bev_wrappers() -> None:
    a, b = xyxyr(8, 20), xyxyr(6, 21)

    def xywhr(t: torch.Tensor) -> torch.Tensor:
        return torch.stack(
            ((t[:, 0] + t[:, 2]) / 2, (t[:, 1] + t[:, 3]) / 2, t[:, 2] - t[:, 0],
             t[:, 3] - t[:, 1], t[:, 4]), 1,
        )  # fmt: skip

    with pytest.warns(DeprecationWarning, match="boxes_iou_bev"):
        got = boxes_iou_bev(a, b)
    assert torch.equal(got, box_iou_rotated(xywhr(a), xywhr(b)))
    boxes = xyxyr(80, 22)
    scores = torch.rand(80, generator=torch.Generator().manual_seed(23))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        order = scores.sort(0, descending=True)[1][:30]
        want = order[nms_rotated(xywhr(boxes)[order], scores[order], 0.2)[1]]
        assert torch.equal(nms_bev(boxes, scores, 0.2, pre_max_size=30), want)
        assert torch.equal(nms_bev(boxes, scores, 0.2, 30, post_max_size=3), want[:3])
        full = nms_bev(boxes, scores, 0.2)
        assert len(full) >= len(want)
        assert torch.equal(nms_normal_bev(boxes, scores, 0.2), nms(boxes[:, :4], scores, 0.2)[1])
    with pytest.warns(DeprecationWarning, match="nms_normal_bev"):
        nms_normal_bev(boxes, scores, 0.2)


def test_bad_input() -> None:
    boxes, scores = torch.rand(4, 7), torch.rand(4)
    with pytest.raises(ValueError, match=r"mmcv.ops.nms3d: boxes must have shape \(N, 7\)"):
        nms3d(torch.rand(4, 5), scores, 0.5)
    with pytest.raises(ValueError, match=r"mmcv.ops.boxes_overlap_bev: boxes_b must have shape"):
        boxes_overlap_bev(boxes, torch.rand(4, 5))
    with pytest.raises(ValueError, match="boxes_iou3d: boxes_a must have shape"):
        boxes_iou3d(torch.rand(4), boxes)
    with pytest.raises(ValueError, match="scores must have shape"):
        nms3d_normal(boxes, torch.rand(4, 1), 0.5)
    with pytest.raises(ValueError, match="boxes .4. and scores .3. must have the same"):
        nms3d(boxes, torch.rand(3), 0.5)
    with pytest.raises(ValueError, match="iou_threshold must be a number, found nan"):
        nms3d(boxes, scores, math.nan)
    with pytest.raises(TypeError, match="iou_threshold must be a real number"):
        nms3d_normal(boxes, scores, "0.5")
    with pytest.raises(TypeError, match="boxes_a must be floating point"):
        boxes_overlap_bev(boxes.long(), boxes)
    with pytest.raises(TypeError, match="same dtype"):
        boxes_overlap_bev(boxes, boxes.double())
    with pytest.raises(ValueError, match=r"nms_bev: boxes must have shape \(N, 5\)"):
        nms_bev(boxes, scores, 0.5)
    with pytest.raises(ValueError, match="pre_max_size must be an int >= 0"):
        nms_bev(torch.rand(4, 5), scores, 0.5, pre_max_size=-1)
