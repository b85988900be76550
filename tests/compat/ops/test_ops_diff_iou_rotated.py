"""mmpar.compat.ops.diff_iou_rotated against per-pair polygon clipping in Python floats."""

from __future__ import annotations

import math

import pytest
import torch

from mmpar.compat.ops.diff_iou_rotated import diff_iou_rotated_2d, diff_iou_rotated_3d
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, box_corners, clipped_area

# mmcv's own test inputs and expected values (tests/test_ops/test_diff_iou_rotated.py).
MMCV_2D = (
    [[0.5, 0.5, 1.0, 1.0, 0.0]] * 5,
    [
        [0.5, 0.5, 1.0, 1.0, 0.0],
        [0.5, 0.5, 1.0, 1.0, math.pi / 2],
        [0.5, 0.5, 1.0, 1.0, math.pi / 4],
        [1.0, 1.0, 1.0, 1.0, 0.0],
        [1.5, 1.5, 1.0, 1.0, 0.0],
    ],
    [1.0, 1.0, 0.7071, 1 / 7, 0.0],
)
MMCV_3D = (
    [[0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 0.0]] * 5,
    [
        [0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 0.0],
        [0.5, 0.5, 0.5, 1.0, 1.0, 2.0, math.pi / 2],
        [0.5, 0.5, 0.5, 1.0, 1.0, 1.0, math.pi / 4],
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        [-1.5, -1.5, -1.5, 2.5, 2.5, 2.5, 0.0],
    ],
    [1.0, 0.5, 0.7071, 1 / 15, 0.0],
)


def ref_iou_2d(a, b) -> float:
    inter = clipped_area(box_corners(a), box_corners(b))
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def ref_iou_3d(a, b) -> float:
    plane = [0, 1, 3, 4, 6]
    inter = clipped_area(box_corners([a[i] for i in plane]), box_corners([b[i] for i in plane]))
    top, bottom = min(a[2] + a[5] / 2, b[2] + b[5] / 2), max(a[2] - a[5] / 2, b[2] - b[5] / 2)
    inter *= max(top - bottom, 0.0)
    return inter / (a[3] * a[4] * a[5] + b[3] * b[4] * b[5] - inter)


def random_boxes(shape: tuple, seed: int, size: int = 5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centre = torch.rand(*shape, size - 3 if size == 5 else 3, generator=g, dtype=torch.float64)
    extent = torch.rand(*shape, 2 if size == 5 else 3, generator=g, dtype=torch.float64) * 3 + 0.5
    angle = (torch.rand(*shape, 1, generator=g, dtype=torch.float64) - 0.5) * 2 * math.pi
    return torch.cat([centre * 4, extent, angle], -1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["2d", "3d"])
def test_mmcv_numbers(device: str, case: str) -> None:
    first, second, expected = MMCV_2D if case == "2d" else MMCV_3D
    op = diff_iou_rotated_2d if case == "2d" else diff_iou_rotated_3d
    got = op(torch.tensor([first], device=device), torch.tensor([second], device=device))
    assert got.shape == (1, 5) and got.dtype == torch.float32 and got.device.type == device
    torch.testing.assert_close(got.cpu(), torch.tensor([expected]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_2d_matches_reference(device: str) -> None:
    b1, b2 = random_boxes((3, 8), seed=0), random_boxes((3, 8), seed=1)
    b2[0, 0] = b1[0, 0]
    ref = [[ref_iou_2d(a, b) for a, b in zip(r1, r2)] for r1, r2 in zip(b1.tolist(), b2.tolist())]
    ref = torch.tensor(ref, dtype=torch.float64)
    assert (ref > 0).sum() > 8 and (ref == 0).sum() > 2
    got = diff_iou_rotated_2d(b1.to(device), b2.to(device)).cpu()
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-10)
    got32 = diff_iou_rotated_2d(b1.float().to(device), b2.float().to(device)).cpu()
    torch.testing.assert_close(got32.double(), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_3d_matches_reference(device: str) -> None:
    b1, b2 = random_boxes((2, 10), seed=2, size=7), random_boxes((2, 10), seed=3, size=7)
    ref = [[ref_iou_3d(a, b) for a, b in zip(r1, r2)] for r1, r2 in zip(b1.tolist(), b2.tolist())]
    ref = torch.tensor(ref, dtype=torch.float64)
    assert (ref > 0).sum() > 5
    got = diff_iou_rotated_3d(b1.to(device), b2.to(device)).cpu()
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-10)


def test_gradcheck_2d_and_3d() -> None:
    b1 = torch.tensor([[[1.0, 1, 2, 3, 0.3], [0, 0, 4, 1, 1.2]]], dtype=torch.float64)
    b2 = torch.tensor([[[1.5, 1.2, 2, 2, 0.9], [0.5, 0.2, 3, 2, 0.1]]], dtype=torch.float64)
    assert torch.autograd.gradcheck(diff_iou_rotated_2d, (b1.requires_grad_(), b2.requires_grad_()))
    z1 = torch.tensor([[[0.5], [0.0]]], dtype=torch.float64)
    z2 = torch.tensor([[[0.2], [0.7]]], dtype=torch.float64)
    length1 = torch.tensor([[[2.0], [1.5]]], dtype=torch.float64)
    length2 = torch.tensor([[[1.0], [2.5]]], dtype=torch.float64)
    d1 = torch.cat([b1[..., :2], z1, b1[..., 2:4], length1, b1[..., 4:]], -1).detach()
    d2 = torch.cat([b2[..., :2], z2, b2[..., 2:4], length2, b2[..., 4:]], -1).detach()
    assert torch.autograd.gradcheck(diff_iou_rotated_3d, (d1.requires_grad_(), d2.requires_grad_()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_degenerate_pairs_give_finite_gradients(dtype: torch.dtype) -> None:
    box = [3.0, 3, 2, 1, 0.4]
    pairs = [
        (box, box),  # identical
        (box, [3.0, 3, 1, 2, 0.4 + math.pi / 2]),  # the same box, turned
        (box, [30.0, 30, 2, 1, 0.0]),  # far apart
        ([0.0, 0, 2, 2, 0], [2.0, 0, 2, 2, 0]),  # touching
        ([0.0, 0, 2, 2, 0], [1.0, 0, 2, 2, 0]),  # collinear edges
        ([0.0, 0, 4, 4, 0], [0.5, 0.5, 1, 1, 0.3]),  # contained
    ]
    b1 = torch.tensor([[p[0] for p in pairs]], dtype=dtype, requires_grad=True)
    b2 = torch.tensor([[p[1] for p in pairs]], dtype=dtype, requires_grad=True)
    iou = diff_iou_rotated_2d(b1, b2)
    expected = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1 / 3, 1 / 16]], dtype=dtype)
    torch.testing.assert_close(iou.detach(), expected, atol=1e-5, rtol=0)
    (1 - iou).sum().backward()
    assert torch.isfinite(b1.grad).all() and torch.isfinite(b2.grad).all()


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(dtype: torch.dtype) -> None:
    b1, b2 = random_boxes((2, 6), seed=4).to(dtype), random_boxes((2, 6), seed=5).to(dtype)
    got = diff_iou_rotated_2d(b1, b2)
    assert got.dtype == dtype
    torch.testing.assert_close(got, diff_iou_rotated_2d(b1.float(), b2.float()).to(dtype))


def test_empty_forward_and_backward() -> None:
    b1 = torch.zeros(2, 0, 5, requires_grad=True)
    got = diff_iou_rotated_2d(b1, torch.zeros(2, 0, 5))
    assert got.shape == (2, 0)
    got.sum().backward()
    assert b1.grad.shape == (2, 0, 5)
    assert diff_iou_rotated_3d(torch.zeros(0, 3, 7), torch.zeros(0, 3, 7)).shape == (0, 3)


def test_bad_input() -> None:
    b = torch.zeros(1, 2, 5)
    with pytest.raises(ValueError, match=r"diff_iou_rotated_2d: box2 must have shape \(B, N, 5\)"):
        diff_iou_rotated_2d(b, torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"box3d1 must have shape \(B, N, 7\).*got \(1, 2, 5\)"):
        diff_iou_rotated_3d(b, b)
    with pytest.raises(ValueError, match=r"same shape and device, got \(1, 2, 5\) on cpu and"):
        diff_iou_rotated_2d(b, torch.zeros(1, 3, 5))
    with pytest.raises(TypeError, match="box1 must be a floating-point tensor, got torch.int64"):
        diff_iou_rotated_2d(b.long(), b)
