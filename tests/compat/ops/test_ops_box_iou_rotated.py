"""mmpar.compat.ops.box_iou_rotated against per-pair clipping written from mmcv's kernel."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from mmpar.compat.ops.box_iou_rotated import box_iou_rotated
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, rotated_overlap

# mmcv's own test inputs and expected values (tests/test_ops/test_box_iou_rotated.py).
# The module (the package attribute of the same name is the function).
module = importlib.import_module("mmpar.compat.ops.geometry.rotated_iou")

MMCV_BOXES1 = [[1.0, 1.0, 3.0, 4.0, 0.5], [2.0, 2.0, 3.0, 4.0, 0.6], [7.0, 7.0, 8.0, 8.0, 0.4]]
MMCV_BOXES2 = [[0.0, 2.0, 2.0, 5.0, 0.3], [2.0, 1.0, 3.0, 3.0, 0.5], [5.0, 5.0, 6.0, 7.0, 0.4]]
MMCV_IOU = [[0.3708, 0.4351, 0.0], [0.1104, 0.4487, 0.0424], [0.0, 0.0, 0.3622]]
MMCV_IOF = [[0.4959, 0.5306, 0.0], [0.1823, 0.5420, 0.1832], [0.0, 0.0, 0.4404]]


def ref_overlaps(b1, b2, mode="iou", aligned=False, clockwise=True) -> torch.Tensor:
    l1, l2 = b1.tolist(), b2.tolist()
    if aligned:
        values = [rotated_overlap(a, b, mode, clockwise) for a, b in zip(l1, l2)]
    else:
        values = [[rotated_overlap(a, b, mode, clockwise) for b in l2] for a in l1]
    return torch.tensor(values, dtype=torch.float64)


def random_boxes(n: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * 20
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * 10 + 0.5
    angle = (torch.rand(n, 1, generator=g, dtype=torch.float64) - 0.5) * 2 * math.pi
    return torch.cat([xy, wh, angle], 1).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode, expected", [("iou", MMCV_IOU), ("iof", MMCV_IOF)])
@pytest.mark.parametrize("clockwise", [True, False])
def test_mmcv_numbers(device: str, mode: str, expected: list, clockwise: bool) -> None:
    b1, b2 = torch.tensor(MMCV_BOXES1, device=device), torch.tensor(MMCV_BOXES2, device=device)
    if not clockwise:  # mmcv's test: the same boxes with the angles negated
        b1[:, -1] *= -1
        b2[:, -1] *= -1
    expected_t = torch.tensor(expected)
    got = box_iou_rotated(b1, b2, mode, clockwise=clockwise)
    assert got.device.type == device and got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), expected_t, atol=1e-4, rtol=0)
    aligned = box_iou_rotated(b1, b2, mode, aligned=True, clockwise=clockwise)
    torch.testing.assert_close(aligned.cpu(), expected_t.diagonal(), atol=1e-4, rtol=0)
    assert (got.cpu()[expected_t == 0] == 0).all()  # disjoint pairs: exactly 0, as mmcv


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["iou", "iof"])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("clockwise", [True, False])
def test_matches_reference(device: str, mode: str, aligned: bool, clockwise: bool) -> None:
    b1 = random_boxes(9, seed=1)
    b2 = random_boxes(9 if aligned else 7, seed=2)
    b2[0] = b1[0]
    got = box_iou_rotated(b1.to(device), b2.to(device), mode, aligned, clockwise)
    assert got.shape == ((9,) if aligned else (9, 7))
    ref = ref_overlaps(b1, b2, mode, aligned, clockwise)
    torch.testing.assert_close(got.cpu().double(), ref, rtol=1e-4, atol=1e-5)
    b1, b2 = b1.double().to(device), b2.double().to(device)
    got64 = box_iou_rotated(b1, b2, mode, aligned, clockwise)
    assert got64.dtype == torch.float64
    torch.testing.assert_close(got64.cpu(), ref, rtol=1e-9, atol=1e-10)


def test_chunks_give_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    b1, b2 = random_boxes(23, seed=3), random_boxes(17, seed=4)
    whole = box_iou_rotated(b1, b2)
    aligned = box_iou_rotated(b1, b1.flip(0), aligned=True)
    monkeypatch.setattr(module, "_CHUNK_PAIRS", 5)  # several chunks, rows split across them
    torch.testing.assert_close(box_iou_rotated(b1, b2), whole)
    torch.testing.assert_close(box_iou_rotated(b1, b1.flip(0), aligned=True), aligned)


DEGENERATE = [
    # (box1, box2, iou, iof)
    ([5.0, 5, 4, 2, 0.3], [5.0, 5, 4, 2, 0.3], 1.0, 1.0),  # identical
    ([5.0, 5, 4, 2, 0.0], [5.0, 5, 2, 4, math.pi / 2], 1.0, 1.0),  # the same box, turned
    ([5.0, 5, 4, 2, 0.0], [5.0, 5, 2, 4, -math.pi / 2], 1.0, 1.0),
    ([5.0, 5, 4, 4, 0.0], [5.0, 5, 2, 2, 0.7], 0.25, 0.25),  # containing
    ([5.0, 5, 2, 2, 0.7], [5.0, 5, 4, 4, 0.0], 0.25, 1.0),  # contained
    ([0.0, 0, 2, 2, 0.0], [2.0, 0, 2, 2, 0.0], 0.0, 0.0),  # touching along an edge
    ([0.0, 0, 2, 2, 0.0], [1.0, 0, 2, 2, 0.0], 1 / 3, 0.5),  # collinear edges
    ([0.0, 0, 2, 2, 0.0], [2.0, 2, 2, 2, 0.0], 0.0, 0.0),  # touching at a corner
    ([5.0, 5, 0, 4, 0.2], [5.0, 5, 4, 4, 0.0], 0.0, 0.0),  # zero width
    ([5.0, 5, 4, 4, 0.0], [5.0, 5, 4, 0, 0.2], 0.0, 0.0),
    ([5.0, 5, 0, 0, 0.0], [5.0, 5, 0, 0, 0.0], 0.0, 0.0),  # two points: 0, not NaN
    ([5.0, 5, -4, 2, 0.0], [5.0, 5, 4, 2, 0.0], 0.0, 0.0),  # negative area: 0, as mmcv
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_degenerate_boxes(device: str, dtype: torch.dtype) -> None:
    b1 = torch.tensor([c[0] for c in DEGENERATE], dtype=dtype, device=device)
    b2 = torch.tensor([c[1] for c in DEGENERATE], dtype=dtype, device=device)
    for mode, column in (("iou", 2), ("iof", 3)):
        expected = torch.tensor([c[column] for c in DEGENERATE], dtype=dtype)
        got = box_iou_rotated(b1, b2, mode, aligned=True).cpu()
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
        full = box_iou_rotated(b1, b2, mode).cpu()
        assert torch.isfinite(full).all()
        torch.testing.assert_close(full.diagonal(), got)


def test_far_apart_large_coordinates() -> None:
    # Centred on each pair: a small overlap far from the origin keeps its precision.
    b1 = torch.tensor([[100000.0, 100000, 4, 2, 0.3]])
    b2 = torch.tensor([[100001.0, 100000, 4, 2, 0.3]])
    ref = rotated_overlap([0, 0, 4, 2, 0.3], [1, 0, 4, 2, 0.3])
    assert box_iou_rotated(b1, b2).item() == pytest.approx(ref, rel=1e-5)


def test_empty_shapes() -> None:
    empty = torch.FloatTensor([])
    one = torch.tensor([[0.0, 0, 1, 1, 0]])
    assert box_iou_rotated(empty, one).shape == (0, 1)
    assert box_iou_rotated(one, torch.zeros(0, 5)).shape == (1, 0)
    assert box_iou_rotated(torch.zeros(0, 5), torch.zeros(0, 5), aligned=True).shape == (0,)
    assert box_iou_rotated(torch.zeros(0, 5).double(), one).dtype == torch.float64


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(device: str, dtype: torch.dtype) -> None:
    b1, b2 = random_boxes(8, seed=5, dtype=dtype), random_boxes(8, seed=6, dtype=dtype)
    for aligned in (False, True):
        got = box_iou_rotated(b1.to(device), b2.to(device), aligned=aligned)
        assert got.dtype == dtype
        ref = box_iou_rotated(b1.float(), b2.float(), aligned=aligned).to(dtype)
        torch.testing.assert_close(got.cpu(), ref)
    # Areas past float16's 65504 do not overflow (computed in float32).
    big = torch.tensor([[500.0, 500, 400, 400, 0.2]], dtype=dtype, device=device)
    half_big = torch.tensor([[500.0, 500, 400, 200, 0.2]], dtype=dtype, device=device)
    assert box_iou_rotated(big, half_big).item() == pytest.approx(0.5, abs=1e-2)


@pytest.mark.parametrize("mode", ["iou", "iof"])
@pytest.mark.parametrize("aligned", [False, True])
def test_gradcheck(mode: str, aligned: bool) -> None:
    b1 = [[1.0, 1, 2, 3, 0.3], [0, 0, 4, 1, 1.2], [9, 9, 1, 1, 0]]
    b2 = [[1.5, 1.2, 2, 2, 0.9], [0.5, 0.2, 3, 2, 0.1], [2.4, 1.7, 1, 5, -0.7]]
    b1 = torch.tensor(b1, dtype=torch.float64, requires_grad=True)
    b2 = torch.tensor(b2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: box_iou_rotated(a, b, mode, aligned), (b1, b2))


def test_columns_past_the_fifth_are_ignored_as_by_mmcvs_kernel() -> None:
    # mmrotate's eval_map passes detections with their score: (n, 6).
    dets = torch.tensor([[10.0, 10, 8, 4, 0.1, 0.9], [30, 30, 4, 4, 0, 0.2]])
    gts = torch.tensor([[10.0, 10, 8, 4, 0.1], [31, 30, 4, 4, 0]])
    torch.testing.assert_close(box_iou_rotated(dets, gts), box_iou_rotated(dets[:, :5], gts))
    assert box_iou_rotated(dets, gts)[0, 0].item() == pytest.approx(1.0)


def test_bad_input() -> None:
    b = torch.tensor([[0.0, 0, 1, 1, 0]])
    with pytest.raises(ValueError, match="rotated: mode must be 'iou' or 'iof', got 'giou'"):
        box_iou_rotated(b, b, mode="giou")
    with pytest.raises(ValueError, match=r"bboxes2 must have shape \(n, 5\).*got \(1, 4\)"):
        box_iou_rotated(b, torch.zeros(1, 4))
    with pytest.raises(ValueError, match="as many boxes, got 1 and 2"):
        box_iou_rotated(b, b.repeat(2, 1), aligned=True)
    with pytest.raises(TypeError, match="bboxes1 must be a torch.Tensor, got list"):
        box_iou_rotated(b.tolist(), b)
    with pytest.raises(TypeError, match="bboxes1 must be a floating-point tensor, got torch.int64"):
        box_iou_rotated(b.long(), b)
    with pytest.raises(TypeError, match="same dtype, got torch.float32 and torch.float64"):
        box_iou_rotated(b, b.double())


def test_signature_matches_mmcv() -> None:
    import ast
    import inspect
    from pathlib import Path

    mmcv = pytest.importorskip("mmcv")
    path = Path(mmcv.__file__).parent / "ops" / "box_iou_rotated.py"
    tree = ast.parse(path.read_text())
    (func,) = [n for n in tree.body if getattr(n, "name", "") == "box_iou_rotated"]
    theirs = [a.arg for a in func.args.args], [ast.literal_eval(d) for d in func.args.defaults]
    params = list(inspect.signature(box_iou_rotated).parameters.values())
    ours = [p.name for p in params], [p.default for p in params if p.default is not p.empty]
    assert ours == theirs
