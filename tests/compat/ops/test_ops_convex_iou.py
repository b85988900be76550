"""mmpar.compat.ops.convex_iou against hulls and polygon clipping in plain Python."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from mmpar.compat.ops.convex_iou import convex_giou, convex_iou
from tests.compat.ops import _convex_reference as ref
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

# mmcv's own test (tests/test_ops/test_convex_iou.py, CUDA-only there). The hulls'
# edges run along the polygons' edges: the GIoU has no derivative there, and
# mmcv's gradient is the one its kernel's way of summing the area gives.
MMCV_POINTSETS = [
    [1.0, 1.0, 2.0, 2.0, 1.0, 2.0, 2.0, 1.0, 1.0, 3.0, 3.0, 1.0, 2.0, 3.0, 3.0, 2.0, 1.5, 1.5],
    [1.5, 1.5, 2.5, 2.5, 1.5, 2.5, 2.5, 1.5, 1.5, 3.5, 3.5, 1.5, 2.5, 3.5, 3.5, 2.5, 2.0, 2.0],
]
MMCV_POLYGONS = [[1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 1.0], [1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0, 1.0]]
MMCV_IOU = [[0.2857, 0.8750], [0.0588, 0.4286]]
MMCV_GIOU = [0.2857, 0.3831]
MMCV_GRAD = [
    [0.0204, 0.0408, 0, 0, 0, 0, 0, 0, 0.0612, -0.0408, -0.0408, 0.0816]
    + [-0.0408, -0.0816, -0.0816, -0.0408, 0, 0],
    [-0.1848, -0.1848, 0, 0, 0, 0, 0, 0, -0.1076, -0.0801, -0.0801, -0.1076]
    + [-0.0367, -0.0734, -0.0734, -0.0367, 0, 0],
]


def random_inputs(n: int, seed: int) -> tuple:
    """``(n, 18)`` point sets and ``(n, 8)`` convex quads (rotated rectangles and general
    ones, half of them clockwise) around the same places, in float64."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.rand(n, 1, 2, generator=gen, dtype=torch.float64) * 20
    points = centres + torch.randn(n, 9, 2, generator=gen, dtype=torch.float64) * 3
    angles = torch.sort(torch.rand(n, 4, generator=gen, dtype=torch.float64), 1).values
    angles = angles * 2 * math.pi
    # The first half: squares (corners a quarter turn apart on a circle).
    turn = torch.rand(n // 2, 1, generator=gen, dtype=torch.float64)
    angles[: n // 2] = turn + torch.arange(4, dtype=torch.float64) * (math.pi / 2)
    radii = torch.rand(n, 1, generator=gen, dtype=torch.float64) * 4 + 1
    quads = centres + 1.5 + radii[..., None] * torch.stack((angles.cos(), angles.sin()), -1)
    quads[::2] = quads[::2].flip(1)
    return points.reshape(n, 18), quads.reshape(n, 8)


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    points = torch.tensor(MMCV_POINTSETS, device=device)
    polygons = torch.tensor(MMCV_POLYGONS, device=device)
    iou = convex_iou(points, polygons)
    assert iou.dtype == torch.float32 and iou.device.type == device
    torch.testing.assert_close(iou.cpu(), torch.tensor(MMCV_IOU), atol=1e-3, rtol=0)
    giou, grad = convex_giou(points, polygons)
    assert giou.dtype == grad.dtype == torch.float32 and grad.shape == (2, 18)
    torch.testing.assert_close(giou.cpu(), torch.tensor(MMCV_GIOU), atol=1e-3, rtol=0)
    torch.testing.assert_close(grad.cpu(), torch.tensor(MMCV_GRAD), atol=1e-3, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_iou_matches_reference(device: str) -> None:
    points, quads = random_inputs(12, seed=0)
    quads[-1] += 100  # far from every point set
    got = convex_iou(points.float().to(device), quads.float().to(device)).cpu()
    expected = [[ref.iou(p, q) for q in quads.tolist()] for p in points.tolist()]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float32), atol=1e-5, rtol=0)
    assert (got[:, -1] == 0).all() and (got > 0).sum() > 12
    got64 = convex_iou(points, quads)
    assert got64.dtype == torch.float64
    torch.testing.assert_close(got64, torch.tensor(expected, dtype=torch.float64))


def test_iou_where_clipping_leaves_several_vertices_outside() -> None:
    # Two hull vertices outside one of the quad's edges, far along it: their
    # projections onto that edge once reached past the clipped polygon.
    points = [[8.8507, 1.8183], [17.5295, 5.6408], [9.6904, 13.4819], [5.5533, 3.7157]]
    quad = [13.1085, 12.5307, 8.8231, 12.1702, 10.2631, 7.4826, 11.8126, 7.4289]
    flat = [v for p in points + points[:1] * 5 for v in p]
    got = convex_iou(torch.tensor([flat], dtype=torch.float64), torch.tensor([quad]).double())
    assert got.item() == pytest.approx(ref.iou(flat, quad))


@pytest.mark.parametrize("device", DEVICES)
def test_giou_and_gradient_in_general_position(device: str) -> None:
    points, quads = random_inputs(8, seed=1)
    giou, grad = convex_giou(points.to(device), quads.to(device))
    expected = [ref.giou(p, q) for p, q in zip(points.tolist(), quads.tolist())]
    torch.testing.assert_close(giou.cpu(), torch.tensor(expected, dtype=torch.float64))
    # Where the GIoU is differentiable: central differences of the reference.
    step = 1e-6
    for row in range(8):
        flat, quad = points[row].tolist(), quads[row].tolist()
        numeric = []
        for i in range(18):
            hi, lo = list(flat), list(flat)
            hi[i] += step
            lo[i] -= step
            numeric.append((ref.giou(hi, quad) - ref.giou(lo, quad)) / (2 * step))
        torch.testing.assert_close(grad[row].cpu(), torch.tensor(numeric, dtype=torch.float64))
    # Only hull vertices move the hull: the others get 0.
    hull_sizes = [len(ref.hull(ref.pairs(p))) for p in points.tolist()]
    assert (grad.reshape(8, 9, 2).abs().sum(-1) > 0).sum(1).tolist() == hull_sizes


def test_float32_giou_matches_float64() -> None:
    points, quads = random_inputs(6, seed=2)
    giou, grad = convex_giou(points.float(), quads.float())
    ref_giou, ref_grad = convex_giou(points, quads)
    assert giou.dtype == grad.dtype == torch.float32
    torch.testing.assert_close(giou, ref_giou.float(), atol=1e-5, rtol=0)
    torch.testing.assert_close(grad, ref_grad.float(), atol=1e-5, rtol=0)


def test_degenerate_point_sets() -> None:
    quad = [0.0, 0.0, 4.0, 0.0, 4.0, 2.0, 0.0, 2.0]
    points = torch.tensor(
        [[1.0, 1.0] * 9, [0.0, 1.0, 1.0, 1.0, 2.0, 1.0] * 3, [5.0, 1.0] * 9], dtype=torch.float64
    )
    quads = torch.tensor([quad] * 3, dtype=torch.float64)
    assert convex_iou(points, quads[:1]).tolist() == [[0.0]] * 3
    giou, grad = convex_giou(points, quads)
    # No area: GIoU = -(C - U) / C with U the polygon's area, C the hull of all points.
    assert giou.tolist() == pytest.approx([0.0, 0.0, -1 / 9])
    assert torch.isfinite(grad).all()
    # Equal points: the first one gets the gradient of the enclosing hull.
    assert grad[2, 2:].abs().sum() == 0 and grad[2, :2].abs().sum() > 0


def test_repeated_points_give_the_first_the_gradient() -> None:
    points, quads = random_inputs(1, seed=3)
    order = [int(v) for v in torch.randperm(9, generator=torch.Generator().manual_seed(0))]
    doubled = points.reshape(9, 2)[order[:8] + order[:1]].reshape(1, 18)
    giou, grad = convex_giou(doubled, quads)
    single = doubled.reshape(9, 2)[:8].reshape(1, 16).tolist()[0]
    assert giou.item() == pytest.approx(ref.giou(single, quads[0].tolist()))
    assert grad[0, 16:].abs().sum() == 0


def test_non_finite_gives_nan() -> None:
    points, quads = random_inputs(3, seed=5)
    points[0, 4] = math.nan
    quads[1, 2] = math.inf
    iou = convex_iou(points, quads)
    assert iou[0].isnan().all() and iou[:, 1].isnan().all()
    assert iou[1:, [0, 2]].isfinite().all()
    giou, grad = convex_giou(points, quads)
    assert giou[:2].isnan().all() and grad[:2].isnan().all()
    assert giou[2].item() == pytest.approx(ref.giou(points[2].tolist(), quads[2].tolist()))


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(dtype: torch.dtype) -> None:
    points = torch.tensor(MMCV_POINTSETS, dtype=dtype)
    polygons = torch.tensor(MMCV_POLYGONS, dtype=dtype)
    iou = convex_iou(points, polygons)
    giou, grad = convex_giou(points, polygons)
    assert iou.dtype == giou.dtype == grad.dtype == dtype
    torch.testing.assert_close(iou.float(), torch.tensor(MMCV_IOU), atol=1e-2, rtol=0)
    torch.testing.assert_close(grad.float(), torch.tensor(MMCV_GRAD), atol=1e-2, rtol=0)


def test_empty_and_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert convex_iou(torch.zeros(0, 18), torch.zeros(3, 8)).shape == (0, 3)
    assert convex_iou(torch.zeros(2, 18), torch.zeros(0, 8)).shape == (2, 0)
    giou, grad = convex_giou(torch.zeros(0, 18), torch.zeros(0, 8))
    assert giou.shape == (0,) and grad.shape == (0, 18)
    points, quads = random_inputs(5, seed=4)
    iou, (giou, grad) = convex_iou(points, quads), convex_giou(points, quads)
    module = sys.modules["mmpar.compat.ops.convex_iou"]
    monkeypatch.setattr(module, "_CHUNK_PAIRS", 3)
    monkeypatch.setattr(module, "_GIOU_ROWS", 2)
    torch.testing.assert_close(convex_iou(points, quads), iou)
    for got, expected in zip(convex_giou(points, quads), (giou, grad)):
        torch.testing.assert_close(got, expected)


def test_bad_input() -> None:
    points, polygons = torch.tensor(MMCV_POINTSETS), torch.tensor(MMCV_POLYGONS)
    with pytest.raises(ValueError, match=r"convex_iou: pointsets must have shape \(N, 18\)"):
        convex_iou(points[:, :16], polygons)
    with pytest.raises(ValueError, match=r"convex_giou: polygons must have shape \(N, 8\)"):
        convex_giou(points, polygons[:, :6])
    with pytest.raises(ValueError, match="as many rows, got 2 and 1"):
        convex_giou(points, polygons[:1])
    with pytest.raises(TypeError, match="convex_iou: polygons must be a floating-point tensor"):
        convex_iou(points, polygons.int())
    with pytest.raises(TypeError, match="pointsets must be a floating-point tensor, got list"):
        convex_giou(MMCV_POINTSETS, polygons)


@pytest.mark.parametrize("name", ["convex_iou", "convex_giou"])
def test_signature_matches_mmcv(name: str) -> None:
    assert ref.mmcv_signature("convex_iou", name) == (["pointsets", "polygons"], [])
