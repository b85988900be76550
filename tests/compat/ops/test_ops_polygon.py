"""mmpar.compat.ops.geometry.polygon against Python-float corners and Sutherland-Hodgman."""

from __future__ import annotations

import math
import random

import pytest
import torch

from mmpar.compat.ops.geometry.polygon import (
    convex_intersection_area,
    polygon_area,
    rotated_box_corners,
)
from tests.compat.ops._reference import (
    DEVICES,
    HALF_DTYPES,
    box_corners,
    clipped_area,
    signed_area,
)


def random_boxes(n: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * 12
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * 8 + 0.5
    angle = (torch.rand(n, 1, generator=g, dtype=torch.float64) - 0.5) * 2 * math.pi
    return torch.cat([xy, wh, angle], 1).to(dtype)


def hull(points: list) -> list:
    """Convex hull (monotone chain), positively oriented, collinear points dropped."""
    pts = sorted(set(points))
    if len(pts) < 3:
        return pts

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower, upper = [], []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return lower[:-1] + upper[:-1]


def padded_hulls(n: int, seed: int, size: int = 9) -> tuple[torch.Tensor, list]:
    """``n`` hulls of up to ``size`` random points, each padded to ``size`` vertices by
    repeating one of its vertices in place (as convex_iou's hulls are)."""
    rng = random.Random(seed)
    polys, tensors = [], []
    for _ in range(n):
        k = rng.randint(3, size)
        cx, cy = rng.uniform(0, 6), rng.uniform(0, 6)
        h = hull([(cx + rng.uniform(-4, 4), cy + rng.uniform(-4, 4)) for _ in range(k)])
        at = rng.randrange(len(h))
        padded = h[: at + 1] + [h[at]] * (size - len(h)) + h[at + 1 :]
        polys.append(h)
        tensors.append(padded)
    return torch.tensor(tensors, dtype=torch.float64), polys


@pytest.mark.parametrize("clockwise", [True, False])
def test_corners_follow_mmcv_formula(clockwise: bool) -> None:
    boxes = random_boxes(6, seed=0)
    got = rotated_box_corners(boxes, clockwise)
    assert got.shape == (6, 4, 2)
    ref = torch.tensor([box_corners(b, clockwise) for b in boxes.tolist()], dtype=torch.float64)
    torch.testing.assert_close(got, ref)
    # Corner A of mmcv's docstring, written out.
    x, y, w, h, a = boxes[0].tolist()
    s = math.sin(a) if clockwise else -math.sin(a)
    expected_a = [x - 0.5 * w * math.cos(a) + 0.5 * h * s, y - 0.5 * w * s - 0.5 * h * math.cos(a)]
    torch.testing.assert_close(got[0, 0], torch.tensor(expected_a, dtype=torch.float64))
    assert (polygon_area(got) > 0).all()  # positively oriented
    torch.testing.assert_close(polygon_area(got), boxes[:, 2] * boxes[:, 3])


def test_corners_batch_shape_and_dtype() -> None:
    boxes = random_boxes(6, seed=1, dtype=torch.float32).view(2, 3, 5)
    got = rotated_box_corners(boxes)
    assert got.shape == (2, 3, 4, 2) and got.dtype == torch.float32


def test_polygon_area_is_signed() -> None:
    square = torch.tensor([[0.0, 0], [2, 0], [2, 3], [0, 3]])
    assert polygon_area(square).item() == 6.0
    assert polygon_area(square.flip(0)).item() == -6.0
    assert signed_area(square.tolist()) == 6.0


@pytest.mark.parametrize("device", DEVICES)
def test_random_boxes_match_clipping(device: str) -> None:
    boxes = random_boxes(120, seed=2)
    c = rotated_box_corners(boxes)
    p, q = c[:60], c[60:]
    ref = torch.tensor(
        [clipped_area(a, b) for a, b in zip(p.tolist(), q.tolist())], dtype=torch.float64
    )
    assert (ref > 0).sum() > 20 and (ref == 0).sum() > 5
    got = convex_intersection_area(p.to(device), q.to(device)).cpu()
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)
    assert (got[ref == 0] == 0).all()  # disjoint pairs are exactly 0
    got32 = convex_intersection_area(p.float().to(device), q.float().to(device)).cpu()
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), ref, rtol=1e-4, atol=1e-4)
    # Either orientation, either order.
    torch.testing.assert_close(convex_intersection_area(q.flip(-2), p).cpu(), got)


def test_padded_hulls_match_clipping() -> None:
    p, p_list = padded_hulls(40, seed=3)
    q, q_list = padded_hulls(40, seed=4, size=5)
    ref = torch.tensor([clipped_area(a, b) for a, b in zip(p_list, q_list)], dtype=torch.float64)
    assert (ref > 0).sum() > 15
    torch.testing.assert_close(convex_intersection_area(p, q), ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(convex_intersection_area(q, p), ref, rtol=1e-9, atol=1e-9)
    # A hull against itself, and the hull's own area.
    torch.testing.assert_close(convex_intersection_area(p, p), polygon_area(p).abs())


def test_broadcasting() -> None:
    c = rotated_box_corners(random_boxes(4, seed=5))
    got = convex_intersection_area(c[:, None], c[None])
    assert got.shape == (4, 4)
    ref = [[clipped_area(a, b) for b in c.tolist()] for a in c.tolist()]
    torch.testing.assert_close(got, torch.tensor(ref, dtype=torch.float64), rtol=1e-9, atol=1e-9)


SQUARE = [[0.0, 0], [2, 0], [2, 2], [0, 2]]
DEGENERATE_CASES = {
    "identical": (SQUARE, SQUARE, 4.0),
    "contained": (SQUARE, [[0.5, 0.5], [1, 0.5], [1, 1], [0.5, 1]], 0.25),
    "shared edge line": (SQUARE, [[1.0, 0], [3, 0], [3, 2], [1, 2]], 2.0),
    "touching edge": (SQUARE, [[2.0, 0], [3, 0], [3, 2], [2, 2]], 0.0),
    "touching corner": (SQUARE, [[2.0, 2], [3, 2], [3, 3], [2, 3]], 0.0),
    "far": (SQUARE, [[5.0, 5], [6, 5], [6, 6], [5, 6]], 0.0),
    "point": (SQUARE, [[1.0, 1]] * 4, 0.0),
    "segment": (SQUARE, [[0.0, 0], [2, 2], [2, 2], [0, 0]], 0.0),
    "points": ([[1.0, 1]] * 4, [[1.0, 1]] * 4, 0.0),
    "rotated 45 in square": (
        SQUARE,
        [[1.0, 0], [2, 1], [1, 2], [0, 1]],
        2.0,
    ),
}


@pytest.mark.parametrize("case", sorted(DEGENERATE_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_degenerate_cases_are_finite(case: str, dtype: torch.dtype) -> None:
    p_list, q_list, expected = DEGENERATE_CASES[case]
    for first, second in ((p_list, q_list), (q_list, p_list)):
        p = torch.tensor(first, dtype=dtype, requires_grad=True)
        q = torch.tensor(second, dtype=dtype, requires_grad=True)
        got = convex_intersection_area(p, q)
        assert got.item() == pytest.approx(expected, abs=1e-5)
        got.backward()
        assert torch.isfinite(p.grad).all() and torch.isfinite(q.grad).all(), case


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(dtype: torch.dtype) -> None:
    c = rotated_box_corners(random_boxes(20, seed=6)).to(dtype)
    got = convex_intersection_area(c[:10], c[10:])
    assert got.dtype == dtype
    ref = convex_intersection_area(c[:10].float(), c[10:].float()).to(dtype)
    torch.testing.assert_close(got, ref)


def test_empty_batch_forward_and_backward() -> None:
    p = torch.zeros(0, 4, 2, requires_grad=True)
    got = convex_intersection_area(p, torch.zeros(0, 9, 2))
    assert got.shape == (0,)
    got.sum().backward()
    assert p.grad.shape == (0, 4, 2)


def test_gradcheck() -> None:
    boxes = torch.tensor(
        [[1.0, 1, 2, 3, 0.3], [0, 0, 4, 1, 1.2], [2, 2, 3, 3, 0.1]], dtype=torch.float64
    )
    other = torch.tensor(
        [[1.5, 1.2, 2, 2, 0.9], [0.5, 0.2, 3, 2, 0.1], [2.4, 1.7, 1, 5, -0.7]],
        dtype=torch.float64,
    )
    p = rotated_box_corners(boxes).requires_grad_()
    q = rotated_box_corners(other).requires_grad_()
    assert torch.autograd.gradcheck(convex_intersection_area, (p, q))
    hp, _ = padded_hulls(3, seed=7)
    assert torch.autograd.gradcheck(convex_intersection_area, (hp.requires_grad_(), q))


def test_bad_input() -> None:
    square = torch.tensor(SQUARE)
    with pytest.raises(TypeError, match="convex_intersection_area: p must be a float tensor"):
        convex_intersection_area(square.tolist(), square)
    with pytest.raises(TypeError, match="q must be a float tensor, got torch.int64"):
        convex_intersection_area(square, square.long())
    with pytest.raises(ValueError, match=r"q must have shape \(\.\.\., V, 2\).*got \(4, 3\)"):
        convex_intersection_area(square, torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"boxes must have shape \(\.\.\., 5\), got \(2, 4\)"):
        rotated_box_corners(torch.zeros(2, 4))
