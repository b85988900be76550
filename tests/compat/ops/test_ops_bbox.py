"""mmpar.compat.ops.bbox.bbox_overlaps against a per-pair loop written from mmcv's kernel."""

from __future__ import annotations

import math

import pytest
import torch

from mmpar.compat.ops.bbox import bbox_overlaps
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, box_overlap


def ref_overlaps(b1: torch.Tensor, b2: torch.Tensor, mode: str, aligned: bool, offset: int):
    l1, l2 = b1.tolist(), b2.tolist()
    if aligned:
        return torch.tensor(
            [box_overlap(a, b, mode, offset) for a, b in zip(l1, l2)], dtype=torch.float64
        )
    return torch.tensor(
        [[box_overlap(a, b, mode, offset) for b in l2] for a in l1], dtype=torch.float64
    )


def random_boxes(n: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * 20
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * 10 + 0.5
    return torch.cat([xy, xy + wh], 1).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_docstring_example(device: str) -> None:
    bboxes1 = torch.tensor([[0, 0, 10, 10], [10, 10, 20, 20], [32, 32, 38, 42]], device=device)
    bboxes2 = torch.tensor([[0, 0, 10, 20], [0, 10, 10, 19], [10, 10, 20, 20]], device=device)
    got = bbox_overlaps(bboxes1.float(), bboxes2.float())
    expected = torch.tensor([[0.5, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    assert got.device.type == device
    torch.testing.assert_close(got.cpu(), expected)


def test_empty_shapes() -> None:
    empty = torch.FloatTensor([])
    nonempty = torch.FloatTensor([[0, 0, 10, 9]])
    assert bbox_overlaps(empty, nonempty).shape == (0, 1)
    assert bbox_overlaps(nonempty, empty).shape == (1, 0)
    assert bbox_overlaps(empty, empty).shape == (0, 0)
    assert bbox_overlaps(torch.zeros(0, 4), torch.zeros(0, 4), aligned=True).shape == (0,)
    assert bbox_overlaps(empty.double(), nonempty).dtype == torch.float64  # bboxes1's dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["iou", "iof"])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("offset", [0, 1])
def test_matches_reference(device: str, mode: str, aligned: bool, offset: int) -> None:
    b1 = random_boxes(7, seed=1)
    b2 = random_boxes(7 if aligned else 5, seed=2)
    b2[0] = b1[0]  # an identical pair
    got = bbox_overlaps(b1.to(device), b2.to(device), mode, aligned, offset)
    assert got.shape == ((7,) if aligned else (7, 5)) and got.dtype == torch.float32
    ref = ref_overlaps(b1, b2, mode, aligned, offset)
    torch.testing.assert_close(got.cpu().double(), ref, rtol=1e-5, atol=1e-6)
    if aligned:
        assert got[0].item() == pytest.approx(1.0)


def test_offset_one_counts_pixels() -> None:
    # Integer pixel boxes: [0, 0, 0, 0] is one pixel with offset=1, empty with offset=0.
    a = torch.tensor([[0.0, 0, 0, 0], [0, 0, 1, 1]])
    b = torch.tensor([[0.0, 0, 0, 0], [1, 1, 2, 2]])
    torch.testing.assert_close(
        bbox_overlaps(a, b, aligned=True, offset=1), torch.tensor([1.0, 1 / 7])
    )
    got = bbox_overlaps(a, b, aligned=True, offset=0)
    assert math.isnan(got[0].item()) and got[1].item() == 0.0  # 0/0 as in mmcv, no epsilon


def test_iof_is_over_the_first_box() -> None:
    big = torch.tensor([[0.0, 0, 10, 10]])
    small = torch.tensor([[0.0, 0, 5, 5]])
    assert bbox_overlaps(small, big, "iof").item() == 1.0
    assert bbox_overlaps(big, small, "iof").item() == 0.25
    assert bbox_overlaps(big, small, "iou").item() == 0.25


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("aligned", [False, True])
def test_half(device: str, dtype: torch.dtype, aligned: bool) -> None:
    b1, b2 = random_boxes(6, seed=3, dtype=dtype), random_boxes(6, seed=4, dtype=dtype)
    got = bbox_overlaps(b1.to(device), b2.to(device), aligned=aligned)
    assert got.dtype == dtype
    ref = bbox_overlaps(b1.float(), b2.float(), aligned=aligned).to(dtype)
    torch.testing.assert_close(got.cpu(), ref)
    # Areas past float16's 65504 do not overflow (computed in float32).
    big = torch.tensor([[0.0, 0, 400, 400]], dtype=dtype, device=device)
    half_big = torch.tensor([[0.0, 0, 400, 200]], dtype=dtype, device=device)
    assert bbox_overlaps(big, half_big).item() == 0.5


@pytest.mark.parametrize("mode", ["iou", "iof"])
@pytest.mark.parametrize("aligned", [False, True])
def test_gradcheck(mode: str, aligned: bool) -> None:
    b1 = random_boxes(4, seed=5, dtype=torch.float64).requires_grad_()
    b2 = random_boxes(4 if aligned else 3, seed=6, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: bbox_overlaps(a, b, mode, aligned), (b1, b2))


def test_bad_input() -> None:
    b = torch.tensor([[0.0, 0, 1, 1]])
    with pytest.raises(ValueError, match="mode must be 'iou' or 'iof', got 'giou'"):
        bbox_overlaps(b, b, mode="giou")
    with pytest.raises(ValueError, match="offset must be 0 or 1, got 2"):
        bbox_overlaps(b, b, offset=2)
    with pytest.raises(
        ValueError, match=r"bboxes2 must have shape \(n, 4\) or be empty, got \(1, 5"
    ):
        bbox_overlaps(b, torch.zeros(1, 5))
    with pytest.raises(ValueError, match="as many boxes, got 1 and 2"):
        bbox_overlaps(b, b.repeat(2, 1), aligned=True)
    with pytest.raises(TypeError, match="bboxes1 must be a torch.Tensor, got list"):
        bbox_overlaps(b.tolist(), b)
    with pytest.raises(TypeError, match="bboxes1 must be a floating-point tensor, got torch.int64"):
        bbox_overlaps(b.long(), b)
    with pytest.raises(TypeError, match="same dtype, got torch.float32 and torch.float64"):
        bbox_overlaps(b, b.double())


def test_asserted_arguments_are_assertion_errors_too() -> None:
    # mmcv asserts mode, offset, the shapes and the aligned counts: code written
    # against it catches AssertionError.
    b = torch.tensor([[0.0, 0, 1, 1]])
    for kwargs in (dict(mode="giou"), dict(offset=2), dict(offset=True), dict(aligned=True)):
        other = b.repeat(2, 1) if kwargs.get("aligned") else b
        with pytest.raises(AssertionError, match=r"mmcv\.ops\.bbox_overlaps: "):
            bbox_overlaps(b, other, **kwargs)
    with pytest.raises(AssertionError, match="bboxes1 must have shape"):
        bbox_overlaps(torch.zeros(2, 3), b)


@pytest.mark.parametrize("device", DEVICES)
def test_non_finite_boxes(device: str) -> None:
    nan, inf = float("nan"), float("inf")
    b1 = torch.tensor([[0.0, 0, 2, 2], [0, 0, nan, 2], [0, 0, inf, 2]], device=device)
    b2 = torch.tensor([[1.0, 1, 3, 3], [0, 0, inf, 2]], device=device)
    got = bbox_overlaps(b1, b2).cpu()
    want = ref_overlaps(b1.cpu(), b2.cpu(), "iou", False, 0).float()
    torch.testing.assert_close(got, want, equal_nan=True)
    assert got[1].isnan().all()  # a NaN coordinate: NaN with every box
    assert got[2, 0] == 0 and got[2, 1].isnan()  # inf: 2 / inf, inf / (inf + inf - inf)


def test_signature_matches_mmcv() -> None:
    import ast
    import inspect
    from pathlib import Path

    mmcv = pytest.importorskip("mmcv")
    tree = ast.parse((Path(mmcv.__file__).parent / "ops" / "bbox.py").read_text())
    (func,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "bbox_overlaps"]
    defaults = [ast.literal_eval(d) for d in func.args.defaults]
    theirs = [a.arg for a in func.args.args], defaults
    params = list(inspect.signature(bbox_overlaps).parameters.values())
    ours = [p.name for p in params], [p.default for p in params if p.default is not p.empty]
    assert ours == theirs


@pytest.mark.parametrize("aligned", [False, True])
def test_empty_backward(aligned: bool) -> None:
    empty = torch.zeros(0, 4, requires_grad=True)
    boxes = torch.rand(0 if aligned else 3, 4, requires_grad=True)
    out = bbox_overlaps(empty, boxes, aligned=aligned)
    assert out.shape == ((0,) if aligned else (0, 3))
    out.sum().backward()
    assert empty.grad.shape == (0, 4) and boxes.grad.eq(0).all()
