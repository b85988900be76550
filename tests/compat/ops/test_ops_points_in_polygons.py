"""mmpar.compat.ops.points_in_polygons against ray casting written from mmcv's rule."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from mmpar.compat.ops.points_in_polygons import points_in_polygons
from tests.compat.ops._convex_reference import mmcv_signature
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

# mmcv's own test (tests/test_ops/test_points_in_polygons.py, CUDA-only there).
MMCV_POINTS = [[300.0, 300.0], [400.0, 400.0], [100.0, 100], [300, 250], [100, 0]]
MMCV_POLYGONS = [
    [200.0, 200.0, 400.0, 400.0, 500.0, 200.0, 400.0, 100.0],
    [400.0, 400.0, 500.0, 500.0, 600.0, 300.0, 500.0, 200.0],
    [300.0, 300.0, 600.0, 700.0, 700.0, 700.0, 700.0, 100.0],
]
MMCV_EXPECTED = [[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0] * 3]


def ref_inside(point: list, polygon: list) -> float:
    """A ray towards +x; edge i runs from vertex i to vertex i - 1; a point on a vertex,
    or where an edge crosses its row, ends the count (mmcv's documented-inexact boundary)."""
    f32 = np.float32
    px, py = f32(point[0]), f32(point[1])
    verts = [(f32(polygon[2 * i]), f32(polygon[2 * i + 1])) for i in range(4)]
    crossings = 0
    for i in range(4):
        (sx, sy), (tx, ty) = verts[i], verts[i - 1]
        if (sx == px and sy == py) or (tx == px and ty == py):
            break
        if (sy < py) != (ty < py):
            x = sx + (py - sy) * (tx - sx) / (ty - sy)
            if x == px:
                break
            crossings += x > px
    return float(crossings % 2)


def ref_matrix(points: torch.Tensor, polygons: torch.Tensor) -> torch.Tensor:
    return torch.tensor([[ref_inside(p, q) for q in polygons.tolist()] for p in points.tolist()])


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    points = torch.tensor(MMCV_POINTS, device=device)
    got = points_in_polygons(points, torch.tensor(MMCV_POLYGONS, device=device))
    assert got.dtype == torch.float32 and got.device.type == device
    torch.testing.assert_close(got.cpu(), torch.tensor(MMCV_EXPECTED))


@pytest.mark.parametrize("device", DEVICES)
def test_matches_rule_on_a_grid(device: str) -> None:
    # Integer points and vertices: many points on vertices and edges.
    gen = torch.Generator().manual_seed(0)
    points = torch.randint(0, 6, (150, 2), generator=gen).float()
    polygons = torch.randint(0, 6, (40, 8), generator=gen).float()
    got = points_in_polygons(points.to(device), polygons.to(device)).cpu()
    torch.testing.assert_close(got, ref_matrix(points, polygons))


def test_convex_quads_in_general_position() -> None:
    # Away from the boundary, inside means left of every edge of a counter-clockwise quad.
    gen = torch.Generator().manual_seed(1)
    angles = torch.sort(torch.rand(30, 4, generator=gen) * 2 * torch.pi, dim=1).values
    centres = torch.rand(30, 1, 2, generator=gen) * 50
    quads = centres + 20 * torch.stack((angles.cos(), angles.sin()), -1)
    points = torch.rand(200, 2, generator=gen) * 70 - 10
    got = points_in_polygons(points, quads.reshape(30, 8))
    edges = quads.roll(-1, 1) - quads  # (30, 4, 2)
    rel = points[:, None, None] - quads[None]  # (200, 30, 4, 2)
    side = edges[..., 0] * rel[..., 1] - edges[..., 1] * rel[..., 0]
    assert side.abs().min() > 1e-3  # no point on a boundary
    torch.testing.assert_close(got, (side > 0).all(-1).float())
    # Either orientation of a polygon gives the same answer.
    torch.testing.assert_close(points_in_polygons(points, quads.flip(1).reshape(30, 8)), got)


@pytest.mark.parametrize("dtype", [torch.float64, *HALF_DTYPES])
def test_dtypes_give_float32(dtype: torch.dtype) -> None:
    points = torch.tensor(MMCV_POINTS, dtype=dtype)
    got = points_in_polygons(points, torch.tensor(MMCV_POLYGONS, dtype=dtype))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor(MMCV_EXPECTED))


def test_empty_and_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    polygons = torch.tensor(MMCV_POLYGONS)
    assert points_in_polygons(torch.zeros(0, 2), polygons).shape == (0, 3)
    assert points_in_polygons(torch.zeros(4, 2), torch.zeros(0, 8)).shape == (4, 0)
    points = torch.tensor(MMCV_POINTS)
    full = points_in_polygons(points, polygons)
    module = sys.modules["mmpar.compat.ops.points_in_polygons"]
    monkeypatch.setattr(module, "_CHUNK_ELEMENTS", 4)  # one point per chunk
    torch.testing.assert_close(points_in_polygons(points, polygons), full)


def test_bad_input() -> None:
    points, polygons = torch.tensor(MMCV_POINTS), torch.tensor(MMCV_POLYGONS)
    with pytest.raises(ValueError, match=r"points_in_polygons: points must have shape \(N, 2\)"):
        points_in_polygons(torch.zeros(3, 3), polygons)
    with pytest.raises(ValueError, match=r"polygons must have shape \(M, 8\), got \(3, 4\)"):
        points_in_polygons(points, polygons[:, :4])
    with pytest.raises(TypeError, match="points must be a floating-point tensor, got list"):
        points_in_polygons(MMCV_POINTS, polygons)
    with pytest.raises(TypeError, match="polygons must be a floating-point tensor, got torch.int"):
        points_in_polygons(points, polygons.long())


def test_signature_matches_mmcv() -> None:
    assert mmcv_signature("points_in_polygons", "points_in_polygons") == (
        ["points", "polygons"],
        [],
    )
