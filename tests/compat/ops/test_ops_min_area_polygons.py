"""mmpar.compat.ops.min_area_polygons against enclosing rectangles tried in plain Python."""

from __future__ import annotations

import math
from typing import List, Optional

import pytest
import torch

from mmpar.compat.ops.min_area_polygons import min_area_polygons
from tests.compat.ops._convex_reference import hull, mmcv_signature
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

# mmcv's own test (tests/test_ops/test_min_area_polygons.py, CUDA-only there).
MMCV_POINTSETS = [
    [1.0, 1.0, 2.0, 2.0, 1.0, 2.0, 2.0, 1.0, 1.0, 3.0, 3.0, 1.0, 2.0, 3.0, 3.0, 2.0, 1.5, 1.5],
    [1.0, 1.0, 8.0, 8.0, 1.0, 2.0, 2.0, 1.0, 1.0, 3.0, 3.0, 1.0, 2.0, 3.0, 3.0, 2.0, 1.5, 1.5],
]
MMCV_EXPECTED = [
    [3.0000, 1.0000, 1.0000, 1.0000, 1.0000, 3.0000, 3.0000, 3.0000],
    [8.0, 8.0, 2.3243, 0.0541, 0.0541, 1.6757, 5.7297, 9.6216],
]


def box_at(points: List[tuple], angle: float) -> tuple:
    """Area and corners of the box of ``points`` in the frame turned by ``angle``, the
    corners from ``(x_max, y_min)`` of that frame, as mmcv writes them."""
    c, s = math.cos(angle), math.sin(angle)
    xs = [c * x + s * y for x, y in points]
    ys = [-s * x + c * y for x, y in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    corners = [(x1, y0), (x0, y0), (x0, y1), (x1, y1)]
    return (x1 - x0) * (y1 - y0), [v for u, w in corners for v in (u * c - w * s, u * s + w * c)]


def ref_least_area(flat: List[float]) -> float:
    """The least area over the directions of every pair of points (every hull edge too)."""
    pts = [(flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2)]
    angles = [math.atan2(q[1] - p[1], q[0] - p[0]) for p in pts for q in pts if p != q]
    return min(box_at(pts, a)[0] for a in angles or [0.0])


def ref_rectangle(flat: List[float]) -> Optional[List[float]]:
    """The box of the first hull edge (counter-clockwise from the lowest point) of least
    area, its angle folded into [0, pi/2); None where another angle's area is within
    1e-5 of it, a tie that float32 rounding decides."""
    pts = hull([(flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2)])
    edges = [(pts[(i + 1) % len(pts)], pts[i]) for i in range(len(pts))]
    angles = [math.atan2(q[1] - p[1], q[0] - p[0]) % (math.pi / 2) for q, p in edges]
    boxes = [box_at(pts, a) for a in angles]
    least = min(area for area, _ in boxes)
    best = next(i for i, (area, _) in enumerate(boxes) if area == least)
    for angle, (area, _) in zip(angles, boxes):
        if abs(angle - angles[best]) > 1e-6 and area <= least * (1 + 1e-5):
            return None
    return boxes[best][1]


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    got = min_area_polygons(torch.tensor(MMCV_POINTSETS, device=device))
    assert got.dtype == torch.float32 and got.device.type == device
    torch.testing.assert_close(got.cpu(), torch.tensor(MMCV_EXPECTED), atol=1e-4, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_matches_reference(device: str) -> None:
    gen = torch.Generator().manual_seed(0)
    pointsets = torch.rand(60, 18, generator=gen, dtype=torch.float64) * 100
    got = min_area_polygons(pointsets.float().to(device)).cpu().double()
    checked = 0
    for flat, box in zip(pointsets.tolist(), got):
        corners = box.reshape(4, 2)
        sides = corners.roll(-1, 0) - corners
        area = sides[0].norm() * sides[1].norm()
        assert area.item() == pytest.approx(ref_least_area(flat), rel=1e-4)
        # A rectangle, clockwise with y up, around every point.
        assert (sides * sides.roll(-1, 0)).sum(1).abs().max() < 1e-3 * area
        rel = torch.tensor(flat, dtype=torch.float64).reshape(9, 1, 2) - corners
        assert (sides[:, 0] * rel[..., 1] - sides[:, 1] * rel[..., 0]).max() < 1e-3 * area
        expected = ref_rectangle(flat)
        if expected is not None:
            expected_box = torch.tensor(expected, dtype=box.dtype)
            torch.testing.assert_close(box, expected_box, atol=2e-3, rtol=0)
            checked += 1
    assert checked >= 50


@pytest.mark.parametrize(
    "flat, expected",
    [
        ([2.0, 3.0] * 9, [2.0, 3.0] * 4),  # equal points: the point
        ([0.0, 0.0, 4.0, 0.0, 4.0, 2.0, 0.0, 2.0] * 2 + [2.0, 1.0], [4, 0, 0, 0, 0, 2, 4, 2]),
        ([1.0, 1.0, 3.0, 3.0] * 4 + [2.0, 2.0], [3, 3, 1, 1, 1, 1, 3, 3]),  # a line
    ],
)
def test_degenerate(flat: List[float], expected: List[float]) -> None:
    got = min_area_polygons(torch.tensor([flat]))
    expected_box = torch.tensor([expected], dtype=torch.float32)
    torch.testing.assert_close(got, expected_box, atol=1e-5, rtol=0)


def test_other_point_counts_and_non_finite() -> None:
    # Four points: the rectangle itself, turned 30 degrees; any K >= 1 is taken.
    c, s = math.cos(math.pi / 6), math.sin(math.pi / 6)
    rect = [(0.0, 0.0), (4 * c, 4 * s), (4 * c - 2 * s, 4 * s + 2 * c), (-2 * s, 2 * c)]
    got = min_area_polygons(torch.tensor([[v for p in rect for v in p]]))
    assert sorted(round(v, 4) for v in got[0].tolist()) == sorted(
        round(v, 4) for p in rect for v in p
    )
    assert min_area_polygons(torch.tensor([[5.0, 6.0]])).tolist() == [[5.0, 6.0] * 4]
    pointsets = torch.tensor(MMCV_POINTSETS)
    pointsets[0, 3] = math.nan
    got = min_area_polygons(pointsets)
    assert got[0].isnan().all()
    torch.testing.assert_close(got[1], torch.tensor(MMCV_EXPECTED[1]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, *HALF_DTYPES])
def test_dtypes(dtype: torch.dtype) -> None:
    got = min_area_polygons(torch.tensor(MMCV_POINTSETS, dtype=dtype))
    assert got.dtype == dtype
    expected = torch.tensor(MMCV_EXPECTED).to(dtype)
    torch.testing.assert_close(got, expected, atol=1e-4 if dtype == torch.float64 else 5e-2, rtol=0)


def test_empty() -> None:
    assert min_area_polygons(torch.zeros(0, 18)).shape == (0, 8)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"min_area_polygons: pointsets must have shape \(N, 2K\)"):
        min_area_polygons(torch.zeros(2, 17))
    with pytest.raises(ValueError, match=r"got \(18,\)"):
        min_area_polygons(torch.zeros(18))
    with pytest.raises(TypeError, match="pointsets must be a floating-point tensor, got torch.int"):
        min_area_polygons(torch.zeros(2, 18, dtype=torch.long))


def test_signature_matches_mmcv() -> None:
    assert mmcv_signature("min_area_polygons", "min_area_polygons") == (["pointsets"], [])
