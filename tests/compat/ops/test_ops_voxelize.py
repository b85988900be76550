"""mmpar.compat.ops.voxelize against a loop over the points following mmcv's kernel."""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch

from mmpar.compat.ops.voxelize import Voxelization, voxelization
from tests.compat.ops._reference import DEVICES

KITTI_RANGE = [0, -40, -3, 70.4, 40, 1]  # mmcv's test and SECOND's KITTI range


def ref_grid(size: Sequence[float], bounds: Sequence[float]) -> List[int]:
    """Cells along x, y, z: C's round of the float32 quotient."""
    f32 = np.float32
    return [
        int(math.floor(float((f32(bounds[j + 3]) - f32(bounds[j])) / f32(size[j])) + 0.5))
        for j in range(3)
    ]


def ref_cell(
    p: Sequence[float], size: Sequence[float], bounds: Sequence[float], f64: bool
) -> Optional[Tuple[int, int, int]]:
    """The point's ``(z, y, x)`` voxel, None outside: floor((p - min) / size), the range and
    size as float32, the arithmetic in float32 (float64 for float64 points)."""
    cells = ref_grid(size, bounds)
    out = []
    for j in range(3):
        low, step = float(np.float32(bounds[j])), float(np.float32(size[j]))
        if f64:
            q = (p[j] - low) / step
        else:
            q = float((np.float32(p[j]) - np.float32(low)) / np.float32(step))
        if not (math.isfinite(q) and 0 <= math.floor(q) < cells[j]):
            return None
        out.append(math.floor(q))
    return out[2], out[1], out[0]


def ref_hard(points: torch.Tensor, size, bounds, max_points: int, max_voxels: int) -> tuple:
    """mmcv's CPU kernel as a plain loop over the points in index order."""
    f64 = points.dtype == torch.float64
    rows = points.double().tolist()
    index: Dict[Tuple[int, int, int], int] = {}
    members: List[List[List[float]]] = []
    for row in rows:
        cell = ref_cell(row, size, bounds, f64)
        if cell is None:
            continue
        if cell not in index:
            if len(index) >= max_voxels:
                continue  # no voxel left: this point, and every later one of its voxel
            index[cell] = len(members)
            members.append([])
        if len(members[index[cell]]) < max_points:
            members[index[cell]].append(row)
    voxels = torch.zeros(len(members), max_points, points.shape[1], dtype=torch.float64)
    for v, kept in enumerate(members):
        if kept:
            voxels[v, : len(kept)] = torch.tensor(kept, dtype=torch.float64)
    coors = torch.tensor(list(index), dtype=torch.int32).reshape(-1, 3)
    counts = torch.tensor([len(m) for m in members], dtype=torch.int32)
    return voxels.to(points.dtype), coors, counts


def ref_dynamic(points: torch.Tensor, size, bounds) -> torch.Tensor:
    f64 = points.dtype == torch.float64
    cells = [ref_cell(row, size, bounds, f64) for row in points.double().tolist()]
    return torch.tensor([c or (-1, -1, -1) for c in cells], dtype=torch.int32).reshape(-1, 3)


def cloud(n: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(n, 4)`` points on a 0.1 lattice around [0, 1]^3 (many on voxel faces and on the
    range's bounds, many duplicates), plus a feature."""
    gen = torch.Generator().manual_seed(seed)
    xyz = torch.randint(-2, 13, (n, 3), generator=gen).double() * 0.1
    xyz += (torch.rand(n, 3, generator=gen, dtype=torch.float64) < 0.5) * 0.03
    feat = torch.rand(n, 1, generator=gen, dtype=torch.float64)
    return torch.cat([xyz, feat], 1).to(dtype)


def assert_hard(got: tuple, expected: tuple) -> None:
    assert got[0].dtype == expected[0].dtype and got[1].dtype == got[2].dtype == torch.int32
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        assert torch.equal(g.cpu(), e), (g, e)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("max_points, max_voxels", [(3, 40), (1000, 20000), (1, 7)])
def test_hard_matches_reference(device: str, dtype, max_points: int, max_voxels: int) -> None:
    points = cloud(400, seed=max_points, dtype=dtype)
    size, bounds = [0.1, 0.2, 0.3], [0, 0, 0, 1, 1, 1.2]
    got = voxelization(points.to(device), size, bounds, max_points, max_voxels)
    assert_hard(got, ref_hard(points, size, bounds, max_points, max_voxels))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dynamic_matches_reference(device: str, dtype) -> None:
    points = cloud(500, seed=3, dtype=dtype)
    size, bounds = [0.1, 0.1, 0.1], [-0.05, 0, 0.1, 0.95, 1, 1.1]
    got = voxelization(points.to(device), size, bounds, max_points=-1)
    assert got.dtype == torch.int32
    assert torch.equal(got.cpu(), ref_dynamic(points, size, bounds))
    # max_voxels=-1 is dynamic too, as mmcv decides.
    assert torch.equal(voxelization(points.to(device), size, bounds, 5, -1), got)


def test_kitti_like_cloud() -> None:
    gen = torch.Generator().manual_seed(0)
    points = torch.rand(3000, 4, generator=gen) * torch.tensor([80.0, 90, 5, 1])
    points[:, :3] -= torch.tensor([5.0, 45, 3.5])
    got = voxelization(points, [0.5, 0.5, 0.5], KITTI_RANGE, 5, 300)
    assert_hard(got, ref_hard(points, [0.5, 0.5, 0.5], KITTI_RANGE, 5, 300))
    assert got[0].shape == (300, 5, 4)


def test_range_bounds() -> None:
    # min is inside (voxel 0), max outside; just below max is the last voxel.
    below = float(np.nextafter(np.float32(1.0), np.float32(0.0)))
    points = torch.tensor(
        [[0.0, 0.0, 0.0], [1.0, 0.5, 0.5], [below, 0.5, 0.5], [0.5, 1.0, 0.5], [0.5, 0.5, 1.0]]
    )
    coors = voxelization(points, [0.25, 0.25, 0.25], [0, 0, 0, 1, 1, 1], -1)
    assert coors.tolist() == [[0, 0, 0], [-1, -1, -1], [2, 2, 3], [-1, -1, -1], [-1, -1, -1]]
    # The kernel's grid has round(2.5 / 1) = 3 cells (C's round, half away from zero), so
    # it reaches 3.0 (mmcv-full's CPU kernel gives these rows); the layer's grid_size
    # attribute is torch.round's 2, as in mmcv.
    points = torch.tensor([[2.7, 0.0, 0.0], [2.7, 2.7, 2.7], [3.0, 0.0, 0.0]])
    got = voxelization(points, [1.0] * 3, [0, 0, 0, 2.5, 2.5, 2.5], -1)
    assert got.tolist() == [[0, 0, 2], [2, 2, 2], [-1, -1, -1]]
    assert Voxelization([1.0] * 3, [0, 0, 0, 2.5, 2.5, 2.5], 5).grid_size.tolist() == [2, 2, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_non_finite_points_are_outside(device: str) -> None:
    nan, inf = float("nan"), float("inf")
    points = torch.tensor(
        [
            [nan, 0.5, 0.5, 1],
            [0.5, inf, 0.5, 2],
            [0.5, 0.5, -inf, 3],
            [1e30, 0.5, 0.5, 4],
            [0.5, 0.5, 0.5, nan],  # a NaN feature is copied
        ],
        device=device,
    )
    coors = voxelization(points, [0.5] * 3, [0, 0, 0, 1, 1, 1], -1)
    assert coors.tolist() == [[-1, -1, -1]] * 4 + [[1, 1, 1]]
    voxels, coors, counts = voxelization(points, [0.5] * 3, [0, 0, 0, 1, 1, 1], 2, 5)
    assert coors.tolist() == [[1, 1, 1]] and counts.tolist() == [1]
    assert voxels[0, 0, :3].tolist() == [0.5] * 3 and voxels[0, 0, 3].isnan()


@pytest.mark.parametrize("device", DEVICES)
def test_empty_and_all_outside(device: str) -> None:
    for points in (torch.zeros(0, 5), torch.full((4, 5), -7.0)):
        voxels, coors, counts = voxelization(points.to(device), [0.5] * 3, KITTI_RANGE, 6, 10)
        assert voxels.shape == (0, 6, 5) and coors.shape == (0, 3) and counts.shape == (0,)
        dynamic = voxelization(points.to(device), [0.5] * 3, KITTI_RANGE, -1)
        assert dynamic.shape == (points.shape[0], 3) and (dynamic == -1).all()


def test_overflow_keeps_the_first() -> None:
    # Voxels a, b, a, c, b, a, a, d with max_voxels 2, max_points 2: voxels a and b are
    # kept in that order, with a's points 0 and 2 and b's 1 and 4; c and d are dropped.
    x = [0.1, 1.1, 0.2, 2.1, 1.2, 0.3, 0.4, 3.1]
    points = torch.tensor([[v, 0.0, 0.0, i] for i, v in enumerate(x)])
    voxels, coors, counts = voxelization(points, [1, 1, 1], [0, 0, 0, 4, 1, 1], 2, 2)
    assert coors.tolist() == [[0, 0, 0], [0, 0, 1]] and counts.tolist() == [2, 2]
    assert voxels[:, :, 3].tolist() == [[0, 2], [1, 4]]


def test_duplicate_points() -> None:
    points = torch.tensor([[0.5, 0.5, 0.5, 1.0]]).repeat(10, 1)
    voxels, coors, counts = voxelization(points, [1, 1, 1], [0, 0, 0, 1, 1, 1], 3, 5)
    assert counts.tolist() == [3] and torch.equal(voxels[0], points[:3])


def test_max_points_zero() -> None:
    # mmcv's kernel opens the voxels and puts no point in them.
    points = cloud(50, seed=1)
    voxels, coors, counts = voxelization(points, [0.5] * 3, [0, 0, 0, 1, 1, 1], 0, 100)
    ref = ref_hard(points, [0.5] * 3, [0, 0, 0, 1, 1, 1], 0, 100)
    assert_hard((voxels, coors, counts), ref)
    assert voxels.shape[1] == 0 and not counts.any()


def test_batch_per_sample_then_concatenated() -> None:
    # mmdet3d voxelizes each sample and prepends its index: each sample's voxels alone.
    samples = [cloud(200, seed=s) for s in range(3)]
    layer = Voxelization([0.2, 0.2, 0.2], [0, 0, 0, 1, 1, 1], 4, 30)
    coors = []
    for i, points in enumerate(samples):
        voxels, c, counts = layer(points)
        assert_hard((voxels, c, counts), ref_hard(points, [0.2] * 3, [0, 0, 0, 1, 1, 1], 4, 30))
        coors.append(torch.nn.functional.pad(c, (1, 0), value=i))
    assert torch.cat(coors).shape == (90, 4)


def test_module() -> None:
    layer = Voxelization([0.05, 0.05, 0.1], KITTI_RANGE, 5, (16000, 40000))
    assert layer.max_voxels == (16000, 40000)
    assert layer.grid_size.tolist() == [1408, 1600, 40]
    assert [int(v) for v in layer.pcd_shape] == [1, 1600, 1408]
    assert repr(layer) == (
        "Voxelization(voxel_size=[0.05, 0.05, 0.1], point_cloud_range=[0, -40, -3, 70.4, 40, 1]"
        ", max_num_points=5, max_voxels=(16000, 40000), deterministic=True)"
    )
    points = cloud(300, seed=4) * 10
    layer = Voxelization([0.5] * 3, [0, 0, 0, 12, 12, 12], 2, (3, 5))
    assert layer(points)[0].shape[0] == 3
    assert layer.eval()(points)[0].shape[0] == 5
    assert Voxelization([0.5] * 3, [0, 0, 0, 9, 9, 9], 6, 7).max_voxels == (7, 7)
    dynamic = Voxelization([0.5] * 3, [0, 0, 0, 12, 12, 12], -1)
    assert torch.equal(dynamic(points), ref_dynamic(points, [0.5] * 3, [0, 0, 0, 12, 12, 12]))


def test_nondeterministic_gives_the_deterministic_result() -> None:
    points = cloud(300, seed=5)
    args = (points, [0.1] * 3, [0, 0, 0, 1, 1, 1], 2, 50)
    assert_hard(voxelization(*args, deterministic=False), voxelization(*args))


def test_fine_grid_needs_no_dense_grid() -> None:
    # 10**18 cells: mmcv's CPU kernel would allocate an int for each.
    points = torch.tensor([[1.0, 2.0, 3.0, 0], [999.9, 0.0005, 3.0, 1], [1.0, 2.0, 3.0, 2]])
    points = points.double()
    size, bounds = [1e-3] * 3, [0, 0, 0, 1000, 1000, 1000]
    assert_hard(voxelization(points, size, bounds, 4, 10), ref_hard(points, size, bounds, 4, 10))


def test_no_gradient() -> None:
    points = cloud(20, seed=6).requires_grad_()
    voxels, _, _ = voxelization(points, [0.5] * 3, [0, 0, 0, 1, 1, 1], 3, 10)
    assert not voxels.requires_grad


def test_bad_input() -> None:
    points = cloud(10, seed=7)
    good = ([0.5] * 3, [0, 0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match=r"voxelization: voxel_size must be 3 positive"):
        voxelization(points, [0.5, 0, 0.5], good[1])
    with pytest.raises(ValueError, match=r"voxelization: voxel_size must be 3 numbers"):
        voxelization(points, 0.5, good[1])
    with pytest.raises(ValueError, match=r"voxelization: coors_range must be finite .* max > "):
        voxelization(points, good[0], [0, 0, 0, 1, 0, 1])
    with pytest.raises(ValueError, match=r"Voxelization: point_cloud_range must be finite"):
        Voxelization(good[0], [0, 0, 0, 1, 1, -1], 5)
    with pytest.raises(ValueError, match=r"Voxelization: voxel_size must be 3 positive"):
        Voxelization([0.5, -0.5, 0.5], good[1], 5)
    with pytest.raises(ValueError, match=r"points must have shape \(N, C >= 3\).*\(10, 2\)"):
        voxelization(points[:, :2], *good)
    with pytest.raises(TypeError, match="a floating-point tensor, found torch.int64"):
        voxelization(points.long(), *good)
    with pytest.raises(ValueError, match="max_points must be an int >= -1, found -2"):
        voxelization(points, *good, max_points=-2)
    with pytest.raises(TypeError, match="max_voxels must be an int, found 2.5"):
        voxelization(points, *good, max_voxels=2.5)
    with pytest.raises(ValueError, match=r"max_voxels must be an int or a \(train, test\) pair"):
        Voxelization(*good, 5, (1, 2, 3))
