"""mmpar.compat.ops.geometry.convex_hull against Andrew's monotone chain in plain Python."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.geometry.convex_hull import (
    convex_hull,
    convex_hull_area,
    gather_points,
    hull_mask,
)
from tests.compat.ops._convex_reference import area, hull
from tests.compat.ops._reference import DEVICES


def hull_points(points: torch.Tensor, order: torch.Tensor, count: torch.Tensor) -> list:
    return [tuple(points[i].tolist()) for i in order[: int(count)].tolist()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grid", [True, False])
@pytest.mark.parametrize("k", [9, 24])
def test_matches_monotone_chain(device: str, grid: bool, k: int) -> None:
    # 24 random points: a matmul that fuses a product into the sum misplaces hull edges.
    gen = torch.Generator().manual_seed(0)
    if grid:  # many repeated and collinear points
        points = torch.randint(0, 4, (300, k, 2), generator=gen).float()
    else:
        points = torch.rand(300, k, 2, generator=gen) * 100
    order, count = convex_hull(points.to(device))
    assert order.shape == (300, k) and count.shape == (300,)
    order, count = order.cpu(), count.cpu()
    for b in range(300):
        assert hull_points(points[b], order[b], count[b]) == hull(points[b].tolist())
        # The padding repeats the first vertex.
        assert (order[b, int(count[b]) :] == order[b, 0]).all()


def test_first_of_equal_points_stands_for_them() -> None:
    points = torch.tensor([[[1.0, 1.0], [0.0, 0.0], [2.0, 0.0], [0.0, 0.0], [1.0, 1.0]]])
    order, count = convex_hull(points)
    assert count.tolist() == [3]
    assert order[0, :3].tolist() == [1, 2, 0]
    assert hull_mask(order, count).tolist() == [[True, True, True, False, False]]


@pytest.mark.parametrize(
    "points, expected",
    [
        ([[2.0, 3.0]] * 4, [[2.0, 3.0]]),  # all equal: one vertex
        ([[3.0, 3.0], [1.0, 1.0], [2.0, 2.0], [1.0, 1.0]], [[1.0, 1.0], [3.0, 3.0]]),  # a line
        ([[0.0, 0], [2, 0], [1, 0], [2, 2], [0, 2], [1, 2]], [[0.0, 0], [2, 0], [2, 2], [0, 2]]),
    ],
)
def test_degenerate(points: list, expected: list) -> None:
    pts = torch.tensor([points])
    order, count = convex_hull(pts)
    assert gather_points(pts, order)[0, : int(count)].tolist() == expected


def test_batch_shapes_and_empty() -> None:
    points = torch.rand(2, 3, 5, 2)
    order, count = convex_hull(points)
    assert order.shape == (2, 3, 5) and count.shape == (2, 3)
    flat_order, flat_count = convex_hull(points.reshape(6, 5, 2))
    assert torch.equal(order.reshape(6, 5), flat_order)
    assert torch.equal(count.reshape(6), flat_count)
    order, count = convex_hull(torch.zeros(0, 9, 2))
    assert order.shape == (0, 9) and count.shape == (0,)
    order, count = convex_hull(torch.ones(4, 1, 2))
    assert order.tolist() == [[0]] * 4 and count.tolist() == [1] * 4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grid", [True, False])
def test_hull_area_of_the_valid_points(device: str, grid: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    if grid:  # many repeated and collinear points
        points = torch.randint(0, 4, (300, 24, 2), generator=gen).double()
    else:
        points = torch.rand(300, 24, 2, generator=gen, dtype=torch.float64) * 100
    valid = torch.rand(300, 24, generator=gen) < torch.linspace(0, 1, 300)[:, None]
    got = convex_hull_area(points.to(device), valid.to(device)).cpu()
    expected = [
        area(hull(p[v].tolist())) if len(hull(p[v].tolist())) > 2 else 0.0
        for p, v in zip(points, valid)
    ]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))
    assert (got[valid.sum(1) < 3] == 0).all()


def test_hull_area_degenerate_empty_and_gradient() -> None:
    line = torch.tensor([[[0.0, 0], [1, 1], [2, 2], [3, 3], [1, 1]]])
    assert convex_hull_area(line, torch.ones(1, 5, dtype=torch.bool)).tolist() == [0.0]
    same = torch.ones(1, 4, 2)
    assert convex_hull_area(same, torch.ones(1, 4, dtype=torch.bool)).tolist() == [0.0]
    assert convex_hull_area(torch.zeros(0, 6, 2), torch.zeros(0, 6, dtype=torch.bool)).shape == (0,)
    # The square's corners, an inside point, a repeated corner and an invalid far point.
    points = torch.tensor(
        [[[0.0, 0], [2, 0], [2, 2], [0, 2], [1, 1], [2, 2], [9, 9]]],
        dtype=torch.float64,
        requires_grad=True,
    )
    valid = torch.tensor([[True] * 6 + [False]])
    assert convex_hull_area(points, valid).item() == 4.0
    gen = torch.Generator().manual_seed(2)
    jitter = points.detach() + torch.rand(points.shape, generator=gen, dtype=torch.float64) * 0.1
    jitter[0, 5] = jitter[0, 4]  # a repeated inside point
    jitter.requires_grad_()
    assert torch.autograd.gradcheck(lambda p: convex_hull_area(p, valid), (jitter,))
