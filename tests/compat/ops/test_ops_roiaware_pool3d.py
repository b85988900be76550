"""mmpar.compat.ops.roiaware_pool3d against a loop over rois and points (mmcv's kernel rules)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.roiaware_pool3d import RoIAwarePool3d, RoIAwarePool3dFunction
from tests.compat.ops._boxes3d_reference import in_box, points_near, random_boxes
from tests.compat.ops._reference import DEVICES

F = np.float32
# mmcv's own test (tests/test_ops/test_roiaware_pool3d.py).
MMCV_ROIS = [
    [1.0, 2.0, 3.0, 5.0, 4.0, 6.0, -0.3 - np.pi / 2],
    [-10.0, 23.0, 16.0, 20.0, 10.0, 20.0, -0.5 - np.pi / 2],
]
MMCV_PTS = [
    [1, 2, 3.3], [1.2, 2.5, 3.0], [0.8, 2.1, 3.5], [1.6, 2.6, 3.6], [0.8, 1.2, 3.9],
    [-9.2, 21.0, 18.2], [3.8, 7.9, 6.3], [4.7, 3.5, -12.2], [3.8, 7.6, -2],
    [-10.6, -12.9, -20], [-16, -18, 9], [-21.3, -52, -5], [0, 0, 0], [6, 7, 8], [-2, -3, -4],
]  # fmt: skip


def cell(offset: float, size: float, cells: int) -> int:
    """The kernel's ``int(offset / (size / cells))`` in float32, clamped as it clamps."""
    value = F(F(offset) / F(F(size) / F(cells)))
    index = 0 if math.isnan(value) else int(value)
    return cells - 1 if index < 0 else min(index, cells - 1)


def voxel_lists(rois: list, pts: list, grid: tuple, max_pts: int) -> dict:
    """``{(roi, x, y, z): [point, ...]}``: each voxel's first ``max_pts - 1`` points."""
    lists: dict = {}
    for r, roi in enumerate(rois):
        for p, pt in enumerate(pts):
            inside, lx, ly = in_box(pt, roi)
            if not inside:
                continue
            key = (
                r,
                cell(F(lx) + F(roi[3]) / F(2), roi[3], grid[0]),
                cell(F(ly) + F(roi[4]) / F(2), roi[4], grid[1]),
                cell(F(pt[2]) - F(roi[2]), roi[5], grid[2]),
            )
            members = lists.setdefault(key, [])
            if len(members) < max_pts - 1:
                members.append(p)
    return lists


def reference(rois, pts, feats, grid, max_pts, mode):
    """Pooled ``(N, *grid, C)`` and the gradient of its sum weighted by ``weights``."""
    n, c = len(rois), len(feats[0]) if feats else 0
    out = torch.zeros(n, *grid, c, dtype=torch.float64)
    routes = []  # (voxel key, channel, point, share) of the gradient
    for key, members in voxel_lists(rois, pts, grid, max_pts).items():
        for ch in range(c):
            if mode == "avg":
                out[key + (ch,)] = sum(feats[p][ch] for p in members) / len(members)
                routes += [(key, ch, p, 1 / len(members)) for p in members]
                continue
            best, arg = -math.inf, -1
            for p in members:
                if feats[p][ch] > best:  # strictly: the first point wins ties; NaN never
                    best, arg = feats[p][ch], p
            if arg >= 0:
                out[key + (ch,)] = best
                routes.append((key, ch, arg, 1.0))
    return out, routes


def reference_grad(routes, grad_out: torch.Tensor, num_pts: int, c: int) -> torch.Tensor:
    grad = torch.zeros(num_pts, c, dtype=torch.float64)
    for key, ch, p, share in routes:
        grad[p, ch] += grad_out[key + (ch,)].item() * share
    return grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_mmcv_numbers(device: str, dtype: torch.dtype) -> None:
    rois = torch.tensor(MMCV_ROIS, dtype=dtype, device=device)
    pts = torch.tensor(MMCV_PTS, dtype=dtype, device=device)
    for mode, total in (("max", 51.100), ("avg", 49.750)):
        pool = RoIAwarePool3d(out_size=4, max_pts_per_voxel=128, mode=mode)
        out = pool(rois=rois, pts=pts, pts_feature=pts.clone())
        assert out.shape == (2, 4, 4, 4, 3) and out.dtype == dtype
        torch.testing.assert_close(
            out.sum().cpu().double(), torch.tensor(total, dtype=torch.float64), rtol=1e-3, atol=0
        )


def random_case(seed: int, n_rois: int = 3, n_pts: int = 120, channels: int = 4):
    gen = torch.Generator().manual_seed(seed)
    rois = random_boxes(n_rois, gen)
    rois[:, 3:6] *= 1.5
    pts = points_near(rois, n_pts, gen)
    feats = torch.randn(n_pts, channels, generator=gen, dtype=torch.float64)
    feats[::5, 1] = feats[1, 1]  # ties
    return rois, pts, feats


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("grid, max_pts", [((2, 3, 4), 128), (2, 4), (3, 2)])
def test_matches_reference(device: str, mode: str, grid, max_pts: int) -> None:
    rois, pts, feats = random_case(1)
    grid3 = grid if isinstance(grid, tuple) else (grid,) * 3
    want, routes = reference(rois.tolist(), pts.tolist(), feats.tolist(), grid3, max_pts, mode)
    assert len(routes) > 20
    feats_d = feats.to(device).requires_grad_()
    got = RoIAwarePool3d(grid, max_pts, mode)(rois.to(device), pts.to(device), feats_d)
    torch.testing.assert_close(got.detach().cpu(), want, rtol=1e-12, atol=1e-12)
    grad_out = torch.randn(
        got.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2)
    )
    got.backward(grad_out.to(device))
    want_grad = reference_grad(routes, grad_out, pts.shape[0], feats.shape[1])
    torch.testing.assert_close(feats_d.grad.cpu(), want_grad, rtol=1e-12, atol=1e-12)


def test_overflow_keeps_first_points() -> None:
    # Nine points in the single voxel of a 1 x 1 x 1 grid; max_pts_per_voxel=4 keeps 3.
    roi = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]])
    pts = torch.tensor([[0.1 * i - 0.4, 0.0, 1.0] for i in range(9)])
    feats = torch.arange(9.0)[:, None] * torch.tensor([[1.0, -1.0]])
    got_max = RoIAwarePool3d(1, 4, "max")(roi, pts, feats)
    got_avg = RoIAwarePool3d(1, 4, "avg")(roi, pts, feats)
    assert got_max.flatten().tolist() == [2.0, 0.0] and got_avg.flatten().tolist() == [1.0, -1.0]
    assert RoIAwarePool3d(1, 1, "max")(roi, pts, feats).abs().sum() == 0  # keeps none


def test_gradcheck() -> None:
    rois, pts, feats = random_case(3, n_rois=2, n_pts=40, channels=2)
    feats = (torch.arange(80, dtype=torch.float64).view(40, 2) * 0.37 % 5).requires_grad_()
    for mode in (0, 1):  # max: distinct features, so the routed gradient is the derivative
        assert torch.autograd.gradcheck(
            lambda f: RoIAwarePool3dFunction.apply(rois.double(), pts.double(), f, 2, 8, mode),
            (feats,),
        )


def test_nan_and_empty() -> None:
    roi = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]])
    pts = torch.tensor([[0.0, 0.0, 0.5], [0.2, 0.0, 0.5], [0.0, 0.0, math.nan]])
    feats = torch.tensor([[math.nan], [1.0], [5.0]])
    # The NaN feature is never the max; the NaN-height point passes the z test
    # (as in the kernel) and goes to the bottom layer.
    out = RoIAwarePool3d((1, 1, 2), 128, "max")(roi, pts, feats)
    assert out.flatten().tolist() == [5.0, 0.0]
    for mode in ("max", "avg"):
        pool = RoIAwarePool3d(3, 16, mode)
        assert pool(torch.zeros(0, 7), pts, feats).shape == (0, 3, 3, 3, 1)
        empty = pool(roi, torch.zeros(0, 3), torch.zeros(0, 4))
        assert empty.shape == (1, 3, 3, 3, 4) and empty.abs().sum() == 0
        assert pool(roi, pts, torch.zeros(3, 0)).shape == (1, 3, 3, 3, 0)


def test_bad_input() -> None:
    roi, pts, feats = torch.zeros(1, 7), torch.zeros(4, 3), torch.zeros(4, 2)
    pool = RoIAwarePool3d(2)
    with pytest.raises(ValueError, match=r"RoIAwarePool3d: rois must have shape \(N, 7\)"):
        pool(torch.zeros(1, 6), pts, feats)
    with pytest.raises(ValueError, match="pts .4. and pts_feature .3. must have the same"):
        pool(roi, pts, torch.zeros(3, 2))
    with pytest.raises(TypeError, match="pts_feature must be floating point"):
        pool(roi, pts, feats.long())
    with pytest.raises(ArgumentError, match="mode must be 'max' or 'avg'"):
        RoIAwarePool3d(2, mode="min")
    with pytest.raises(ArgumentError, match="out_size must be an int or a tuple of 3 ints"):
        RoIAwarePool3d((2, 2))
    with pytest.raises(ValueError, match="max_pts_per_voxel must be an int >= 1"):
        RoIAwarePool3d(2, max_pts_per_voxel=0)
    with pytest.raises(AssertionError):  # mmcv asserts the mode
        RoIAwarePool3d(2, mode="sum")
