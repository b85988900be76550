"""mmpar.compat.ops.box_iou_quadri against mmcv's definition, one pair at a time in Python."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from mmpar.compat.ops.box_iou_quadri import box_iou_quadri
from mmpar.compat.ops.box_iou_rotated import box_iou_rotated
from tests.compat.ops._convex_reference import mmcv_signature
from tests.compat.ops._quadri_reference import quadri_overlap
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, box_corners, clipped_area

# The module (the package attribute of the same name is the function).
module = importlib.import_module("mmpar.compat.ops.geometry.quadri_iou")

# mmcv's own test inputs and expected values (tests/test_ops/test_box_iou_quadri.py).
MMCV_BOXES1 = [
    [1.0, 1.0, 3.0, 4.0, 4.0, 4.0, 4.0, 1.0],
    [2.0, 2.0, 3.0, 4.0, 4.0, 2.0, 3.0, 1.0],
    [7.0, 7.0, 8.0, 8.0, 9.0, 7.0, 8.0, 6.0],
]
MMCV_BOXES2 = [
    [0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 0.0],
    [2.0, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 1.0],
    [7.0, 6.0, 7.0, 8.0, 9.0, 8.0, 9.0, 6.0],
]
MMCV_IOU = [[0.0714, 1.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.5]]
MMCV_IOF = [[0.1111, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
# A pair whose collected points span more than both areas: mmcv's IoU is negative.
NEGATIVE = ([9.0, -6, -8, -7, 2, -8, -5, -6], [-9.0, 9, -3, 9, 4, -6, 9, -10])


def ref_overlaps(b1, b2, mode="iou", aligned=False) -> torch.Tensor:
    l1, l2 = b1.tolist(), b2.tolist()
    if aligned:
        values = [quadri_overlap(a, b, mode) for a, b in zip(l1, l2)]
    else:
        values = [[quadri_overlap(a, b, mode) for b in l2] for a in l1]
    return torch.tensor(values, dtype=torch.float64)


def random_quads(n: int, seed: int, convex: bool = True) -> torch.Tensor:
    """Convex quadrilaterals (a vertex on each side of a rotated box), or any 4 points."""
    g = torch.Generator().manual_seed(seed)
    centre = torch.rand(n, 1, 2, generator=g, dtype=torch.float64) * 12
    if not convex:
        return (centre + torch.randn(n, 4, 2, generator=g, dtype=torch.float64) * 3).flatten(1)
    angle = torch.rand(n, 1, generator=g, dtype=torch.float64) * 2 * math.pi
    turn = angle + torch.arange(4) * math.pi / 2 + torch.rand(n, 4, generator=g) - 0.5
    radius = torch.rand(n, 4, generator=g, dtype=torch.float64) * 4 + 1
    offsets = torch.stack((radius * torch.cos(turn), radius * torch.sin(turn)), -1)
    return (centre + offsets).flatten(1)


def rectangles(boxes: torch.Tensor, start: int = 0, reverse: bool = False) -> torch.Tensor:
    """``(n, 5)`` rotated boxes as ``(n, 8)`` corners, from corner ``start``, either way round."""
    out = []
    for box in boxes.tolist():
        corners = box_corners(box)
        corners = corners[start:] + corners[:start]
        out.append([c for v in (corners[::-1] if reverse else corners) for c in v])
    return torch.tensor(out, dtype=boxes.dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode, expected", [("iou", MMCV_IOU), ("iof", MMCV_IOF)])
def test_mmcv_numbers(device: str, mode: str, expected: list) -> None:
    b1, b2 = torch.tensor(MMCV_BOXES1, device=device), torch.tensor(MMCV_BOXES2, device=device)
    expected_t = torch.tensor(expected)
    got = box_iou_quadri(b1, b2, mode)
    assert got.device.type == device and got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), expected_t, atol=1e-4, rtol=0)
    aligned = box_iou_quadri(b1, b2, mode, aligned=True)
    torch.testing.assert_close(aligned.cpu(), expected_t.diagonal(), atol=1e-4, rtol=0)
    assert (got.cpu()[expected_t == 0] == 0).all()  # disjoint pairs: exactly 0, as mmcv


def test_non_rectangles_are_mmcvs_value_not_the_exact_overlap() -> None:
    # mmcv's test expects IoU 1 for a trapezoid and a rectangle that overlap by 5.25 of 6.
    trapezoid, rectangle = MMCV_BOXES1[0], MMCV_BOXES2[1]
    exact = clipped_area(
        list(zip(trapezoid[::2], trapezoid[1::2])), [(2, 1), (2, 4), (4, 4), (4, 1)]
    )
    assert exact == pytest.approx(5.25)
    got = box_iou_quadri(torch.tensor([trapezoid]), torch.tensor([rectangle])).item()
    assert got == pytest.approx(1.0) == quadri_overlap(trapezoid, rectangle)
    # Nor is it clamped: collected points can span more than both areas, as in mmcv.
    negative = box_iou_quadri(torch.tensor([NEGATIVE[0]]), torch.tensor([NEGATIVE[1]])).item()
    assert negative == pytest.approx(quadri_overlap(*NEGATIVE)) and negative < 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["iou", "iof"])
@pytest.mark.parametrize("aligned", [False, True])
def test_matches_reference(device: str, mode: str, aligned: bool) -> None:
    for convex, seed in ((True, 1), (False, 2)):
        b1 = random_quads(10, seed, convex)
        b2 = random_quads(10 if aligned else 7, seed + 10, convex)
        b2[0] = b1[0]
        ref = ref_overlaps(b1, b2, mode, aligned)
        got64 = box_iou_quadri(b1.to(device), b2.to(device), mode, aligned)
        assert got64.shape == ((10,) if aligned else (10, 7)) and got64.dtype == torch.float64
        torch.testing.assert_close(got64.cpu(), ref, rtol=1e-9, atol=1e-10)
        if convex:  # any 4 points can make an IoU ill-conditioned (a union near 0)
            got = box_iou_quadri(b1.float().to(device), b2.float().to(device), mode, aligned)
            torch.testing.assert_close(got.cpu().double(), ref, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("start", [0, 1, 3])
def test_rectangles_give_their_exact_overlap(start: int, reverse: bool) -> None:
    g = torch.Generator().manual_seed(3)
    boxes = torch.cat(
        [
            torch.rand(12, 2, generator=g, dtype=torch.float64) * 8,
            torch.rand(12, 2, generator=g, dtype=torch.float64) * 6 + 1,
            torch.rand(12, 1, generator=g, dtype=torch.float64) * 6 - 3,
        ],
        1,
    )
    quads = rectangles(boxes, start, reverse)
    got = box_iou_quadri(quads, rectangles(boxes.flip(0)))
    exact = box_iou_rotated(boxes, boxes.flip(0))  # itself tested against clipping
    torch.testing.assert_close(got, exact, rtol=1e-9, atol=1e-12)
    assert (got > 0).float().mean() > 0.3  # the case is not vacuous


SQUARE = [0.0, 0, 2, 0, 2, 2, 0, 2]
DEGENERATE = [
    # (quad1, quad2, iou, iof)
    (SQUARE, SQUARE, 1.0, 1.0),  # identical
    (SQUARE, [2.0, 2, 0, 2, 0, 0, 2, 0], 1.0, 1.0),  # another first vertex
    (SQUARE, [0.0, 0, 0, 2, 2, 2, 2, 0], 1.0, 1.0),  # the other way round
    (SQUARE, [2.0, 0, 4, 0, 4, 2, 2, 2], 0.0, 0.0),  # touching along an edge
    (SQUARE, [2.0, 2, 4, 2, 4, 4, 2, 4], 0.0, 0.0),  # touching at a corner
    (SQUARE, [1.0, 0, 3, 0, 3, 2, 1, 2], 1 / 3, 0.5),  # collinear edges
    ([-1.0, -1, 3, -1, 3, 3, -1, 3], [0.5, 0.5, 1.5, 0.5, 1.5, 1.5, 0.5, 1.5], 1 / 16, 1 / 16),
    ([0.5, 0.5, 1.5, 0.5, 1.5, 1.5, 0.5, 1.5], [-1.0, -1, 3, -1, 3, 3, -1, 3], 1 / 16, 1.0),
    ([1.0, 1, 1, 1, 1, 1, 1, 1], SQUARE, 0.0, 0.0),  # a point
    (SQUARE, [0.0, 0, 1, 1, 2, 2, 3, 3], 0.0, 0.0),  # collinear vertices
    ([0.0, 0, 1, 0, 2, 0, 2, 0], [0.0, 0, 1, 0, 2, 0, 2, 0], 0.0, 0.0),  # flat: 0, not NaN
    ([0.0, 0, 0, 0, 0, 0, 0, 0], [0.0, 0, 0, 0, 0, 0, 0, 0], 0.0, 0.0),  # padding
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_degenerate_quads(device: str, dtype: torch.dtype) -> None:
    b1 = torch.tensor([c[0] for c in DEGENERATE], dtype=dtype, device=device)
    b2 = torch.tensor([c[1] for c in DEGENERATE], dtype=dtype, device=device)
    for mode, column in (("iou", 2), ("iof", 3)):
        expected = torch.tensor([c[column] for c in DEGENERATE], dtype=dtype)
        reference = torch.tensor([quadri_overlap(c[0], c[1], mode) for c in DEGENERATE])
        torch.testing.assert_close(expected, reference.to(dtype))  # the table is mmcv's
        got = box_iou_quadri(b1, b2, mode, aligned=True).cpu()
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
        full = box_iou_quadri(b1, b2, mode).cpu()
        assert torch.isfinite(full).all()
        torch.testing.assert_close(full.diagonal(), got)


def test_pairs_far_apart_still_collect_points() -> None:
    # A skewed quadrilateral's region (AP.AB, AP.AD in range) reaches far past it: a
    # square 10 away lies in it, and mmcv counts the square whole; no screen drops it.
    skewed = [0.0, 0, 10, 1, 11, 2, 1, 1]
    square = [10.0, -9.5, 10.5, -9.5, 10.5, -9, 10, -9]
    ref = quadri_overlap(skewed, square)
    assert ref == pytest.approx(0.25 / 9)
    b1, b2 = (
        torch.tensor([skewed, SQUARE]),
        torch.tensor([square, [50.0, 50, 51, 50, 51, 51, 50, 51]]),
    )
    got = box_iou_quadri(b1, b2)
    assert got[0, 0].item() == pytest.approx(ref, rel=1e-5)
    assert got[1].tolist() == [0.0, 0.0]


def test_chunks_give_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    b1, b2 = random_quads(23, seed=3), random_quads(17, seed=4)
    whole = box_iou_quadri(b1, b2)
    aligned = box_iou_quadri(b1, b1.flip(0), aligned=True)
    monkeypatch.setattr(module, "_CHUNK_PAIRS", 5)  # several chunks, rows split across them
    torch.testing.assert_close(box_iou_quadri(b1, b2), whole)
    torch.testing.assert_close(box_iou_quadri(b1, b1.flip(0), aligned=True), aligned)


def test_far_from_the_origin() -> None:
    # Centred on each pair: a small overlap far from the origin keeps its precision.
    b1 = torch.tensor([[1e5, 1e5, 1e5 + 4, 1e5, 1e5 + 4, 1e5 + 2, 1e5, 1e5 + 2]])
    b2 = b1 + torch.tensor([1.0, 0] * 4)
    assert box_iou_quadri(b1, b2).item() == pytest.approx(0.6, rel=1e-6)


def test_empty_and_one_box() -> None:
    empty = torch.FloatTensor([])
    one = torch.tensor([SQUARE])
    assert box_iou_quadri(empty, one).shape == (0, 1)
    assert box_iou_quadri(one, torch.zeros(0, 8)).shape == (1, 0)
    assert box_iou_quadri(torch.zeros(0, 8), torch.zeros(0, 8), aligned=True).shape == (0,)
    assert box_iou_quadri(torch.zeros(0, 8).double(), one).dtype == torch.float64
    assert box_iou_quadri(one, one).tolist() == [[1.0]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(device: str, dtype: torch.dtype) -> None:
    b1, b2 = random_quads(8, seed=5).to(dtype), random_quads(8, seed=6).to(dtype)
    for aligned in (False, True):
        got = box_iou_quadri(b1.to(device), b2.to(device), aligned=aligned)
        assert got.dtype == dtype
        ref = box_iou_quadri(b1.float(), b2.float(), aligned=aligned).to(dtype)
        torch.testing.assert_close(got.cpu(), ref)
    # Areas past float16's 65504 do not overflow (computed in float32).
    big = torch.tensor([[100.0, 100, 500, 100, 500, 500, 100, 500]], dtype=dtype, device=device)
    half_big = torch.tensor(
        [[100.0, 100, 500, 100, 500, 300, 100, 300]], dtype=dtype, device=device
    )
    assert box_iou_quadri(big, half_big).item() == pytest.approx(0.5, abs=1e-2)


@pytest.mark.parametrize("mode, aligned", [("iou", False), ("iof", True)])
def test_gradcheck(mode: str, aligned: bool) -> None:
    b1 = [[0.0, 0, 3, 0.2, 3.1, 2, -0.2, 2.3], [5, 5, 6, 5, 6, 6, 5, 6], [0, 0, 2, 0, 2, 1, 0, 1]]
    b2 = [
        [1.1, 0.7, 4, 1, 3.6, 3, 1.3, 2.6],
        [0.3, -1, 2.4, -1, 2.4, 3, 0.3, 3],
        [9, 9, 10, 9, 10, 10, 9, 10],
    ]
    b1 = torch.tensor(b1, dtype=torch.float64, requires_grad=True)
    b2 = torch.tensor(b2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: box_iou_quadri(a, b, mode, aligned), (b1, b2))
    empty = torch.zeros(0, 8, requires_grad=True)
    box_iou_quadri(empty, empty).sum().backward()
    assert empty.grad.shape == (0, 8)


def test_bad_input() -> None:
    b = torch.tensor([SQUARE])
    with pytest.raises(ValueError, match="quadri: mode must be 'iou' or 'iof', got 'giou'"):
        box_iou_quadri(b, b, mode="giou")
    with pytest.raises(ValueError, match=r"bboxes2 must have shape \(n, 8\).*got \(1, 5\)"):
        box_iou_quadri(b, torch.zeros(1, 5))
    with pytest.raises(ValueError, match="as many boxes, got 1 and 2"):
        box_iou_quadri(b, b.repeat(2, 1), aligned=True)
    with pytest.raises(TypeError, match="box_iou_quadri: bboxes1 must be a torch.Tensor, got list"):
        box_iou_quadri(b.tolist(), b)
    with pytest.raises(TypeError, match="bboxes1 must be a floating-point tensor, got torch.int64"):
        box_iou_quadri(b.long(), b)
    with pytest.raises(TypeError, match="same dtype, got torch.float32 and torch.float64"):
        box_iou_quadri(b, b.double())


def test_signature_matches_mmcv() -> None:
    import inspect

    params = list(inspect.signature(box_iou_quadri).parameters.values())
    ours = [p.name for p in params], [p.default for p in params if p.default is not p.empty]
    assert ours == mmcv_signature("box_iou_quadri", "box_iou_quadri")
