"""mmpar.compat.ops.geometry.fan_intersection against Sutherland-Hodgman clipping in Python."""

from __future__ import annotations

import math

import pytest
import torch

from mmpar.compat.ops.geometry.fan_intersection import fan_intersection_area
from tests.compat.ops import _convex_reference as ref
from tests.compat.ops._reference import DEVICES


def convex_pairs(n: int, seed: int) -> tuple:
    """``n`` hulls of 9 random points, padded to 9 vertices with their first, and ``n``
    convex quads around the same places, both counter-clockwise, float64."""
    gen = torch.Generator().manual_seed(seed)
    hulls, quads = [], []
    for _ in range(n):
        centre = torch.rand(2, generator=gen, dtype=torch.float64) * 10
        h = ref.hull((centre + torch.randn(9, 2, generator=gen, dtype=torch.float64) * 2).tolist())
        hulls.append(h + [h[0]] * (9 - len(h)))
        angles = torch.sort(torch.rand(4, generator=gen, dtype=torch.float64)).values * 2 * math.pi
        quads.append((centre + 2 * torch.stack((angles.cos(), angles.sin()), -1)).tolist())
    return torch.tensor(hulls, dtype=torch.float64), torch.tensor(quads, dtype=torch.float64)


@pytest.mark.parametrize("device", DEVICES)
def test_area_matches_clipping(device: str) -> None:
    hulls, quads = convex_pairs(40, seed=0)
    quads[0] = hulls[0, :4]  # part of the hull itself
    quads[1] = quads[1] + 50  # apart
    got = fan_intersection_area(hulls.to(device), quads.to(device)).cpu()
    expected = [abs(ref.area(ref.clip(h.tolist(), q.tolist()))) for h, q in zip(hulls, quads)]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))
    # The signed triangles of polygons apart cancel up to rounding, as in mmcv's sum.
    assert abs(got[1]) < 1e-12 and (got > 1e-6).sum() > 20


def test_gradient_in_general_position() -> None:
    hulls, quads = convex_pairs(6, seed=1)
    points = hulls.clone().requires_grad_()
    (grad,) = torch.autograd.grad(fan_intersection_area(points, quads).sum(), points)
    step = 1e-6
    for row in range(6):
        h, q = hulls[row].tolist(), quads[row].tolist()
        for i in range(9):
            for axis in range(2):
                hi, lo = [list(v) for v in h], [list(v) for v in h]
                hi[i][axis] += step
                lo[i][axis] -= step
                # A padding vertex moves with its copies only through autograd's sum.
                numeric = (ref.area(ref.clip(hi, q)) - ref.area(ref.clip(lo, q))) / (2 * step)
                if h.count(h[i]) == 1:
                    assert grad[row, i, axis].item() == pytest.approx(numeric, abs=1e-6)
    assert fan_intersection_area(points, quads).requires_grad
    assert not quads.requires_grad


def test_touching_edges_take_mmcvs_one_sided_derivatives() -> None:
    # mmcv's own convex_giou case: the hull's edges run along the square's left and
    # bottom edges, and its corner (1, 1) is the square's. mmcv's kernel (its numbers
    # in tests/test_ops/test_convex_iou.py) gives these derivatives of the area.
    hull = torch.tensor([[[1.0, 1], [3, 1], [3, 2], [2, 3], [1, 3]]], dtype=torch.float64)
    square = torch.tensor([[[2.0, 1], [2, 2], [1, 2], [1, 1]]], dtype=torch.float64)
    hull.requires_grad_()
    area = fan_intersection_area(hull, square)
    assert area.item() == pytest.approx(1.0)
    (grad,) = torch.autograd.grad(area.sum(), hull)
    expected = [[-0.75, -0.5], [0, 0], [0, 0], [0, 0], [-0.25, 0]]
    torch.testing.assert_close(grad[0], torch.tensor(expected, dtype=torch.float64))


def test_degenerate_and_empty() -> None:
    point = torch.tensor([[[1.0, 1.0]] * 4], dtype=torch.float64)
    segment = torch.tensor([[[0.0, 0.0], [2.0, 2.0], [0.0, 0.0]]], dtype=torch.float64)
    square = torch.tensor([[[0.0, 0], [2, 0], [2, 2], [0, 2]]], dtype=torch.float64)
    assert fan_intersection_area(point, square).item() == 0
    assert fan_intersection_area(segment, square).item() == 0
    assert fan_intersection_area(square, square).item() == pytest.approx(4.0)
    empty = fan_intersection_area(torch.zeros(0, 9, 2, dtype=torch.float64), square[:0])
    assert empty.shape == (0,)
