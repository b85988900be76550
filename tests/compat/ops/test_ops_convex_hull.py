"""mmpar.compat.ops.convex_hull against Andrew's monotone chain in plain Python."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.convex_hull import convex_hull, gather_points, hull_mask
from tests.compat.ops._convex_reference import hull
from tests.compat.ops._reference import DEVICES


def hull_points(points: torch.Tensor, order: torch.Tensor, count: torch.Tensor) -> list:
    return [tuple(points[i].tolist()) for i in order[: int(count)].tolist()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grid", [True, False])
def test_matches_monotone_chain(device: str, grid: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    if grid:  # many repeated and collinear points
        points = torch.randint(0, 4, (300, 9, 2), generator=gen).float()
    else:
        points = torch.rand(300, 9, 2, generator=gen) * 100
    order, count = convex_hull(points.to(device))
    assert order.shape == (300, 9) and count.shape == (300,)
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
