"""mmpar.compat.ops.ball_query against mmcv's kernel's loop (tests/compat/ops/_points_reference)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from mmpar.compat.ops.ball_query import ball_query
from tests.compat.ops._points_reference import (
    MMCV_CENTERS,
    MMCV_XYZ,
    ref_ball_query,
    ref_stack_ball_query,
)
from tests.compat.ops._reference import DEVICES

# mmcv's own expected indices (tests/test_ops/test_ball_query.py).
MMCV_IDX = [
    [[0, 0, 0, 0, 0], [6, 6, 6, 6, 6], [2, 2, 2, 2, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]],
    [[0, 0, 0, 0, 0], [2, 2, 2, 2, 2], [7, 7, 7, 7, 7], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]],
]
MMCV_DILATED_IDX = [
    [[0, 5, 7, 0, 0], [6, 6, 6, 6, 6], [2, 3, 2, 2, 2], [0, 5, 7, 0, 0], [0, 5, 7, 0, 0]],
    MMCV_IDX[1],
]
DTYPES = [torch.float16, torch.float32, torch.float64]


def clouds(b: int, n: int, m: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple:
    """Points on a coarse grid (many equal distances, points on the radii) and centres
    among them and off them."""
    gen = torch.Generator().manual_seed(seed)
    xyz = torch.randint(-4, 5, (b, n, 3), generator=gen).to(dtype) / 10
    centers = torch.rand(b, m, 3, generator=gen, dtype=torch.float64).to(dtype) - 0.5
    centers[:, ::2] = xyz[:, :m:2] if n else centers[:, ::2]
    return xyz, centers


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_mmcv_numbers(device: str, dtype: torch.dtype) -> None:
    xyz = torch.tensor(MMCV_XYZ, dtype=dtype, device=device)
    centers = torch.tensor(MMCV_CENTERS, dtype=dtype, device=device)
    idx = ball_query(0, 0.2, 5, xyz, centers)
    assert idx.dtype == torch.int32 and idx.tolist() == MMCV_IDX
    assert ball_query(0.2, 0.4, 5, xyz, centers).tolist() == MMCV_DILATED_IDX
    counts = torch.tensor([10, 10], dtype=torch.int32, device=device)
    centre_counts = torch.tensor([5, 5], dtype=torch.int32, device=device)
    stacked = ball_query(0, 0.2, 5, xyz.view(-1, 3), centers.view(-1, 3), counts, centre_counts)
    assert stacked.dtype == torch.int32 and stacked.tolist() == MMCV_IDX[0] + MMCV_IDX[1]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("radii", [(0.0, 0.3), (0.1, 0.3), (0.2, 0.5), (0.3, 0.31)])
def test_matches_kernel_loop(device: str, dtype: torch.dtype, radii: tuple) -> None:
    xyz, centers = clouds(3, 40, 9, dtype)
    for k in (1, 4, 50):
        idx = ball_query(*radii, k, xyz.to(device), centers.to(device))
        expected = [
            ref_ball_query(*radii, k, x.tolist(), c.tolist(), dtype) for x, c in zip(xyz, centers)
        ]
        assert idx.tolist() == expected


def test_radii_of_any_real_type() -> None:
    xyz, centers = clouds(2, 30, 6)
    expected = ball_query(0.1, 0.3, 4, xyz, centers)
    assert torch.equal(ball_query(np.float32(0.1), np.float64(0.3), 4, xyz, centers), expected)
    assert torch.equal(ball_query(0, 1, 4, xyz, centers), ball_query(0.0, 1.0, 4, xyz, centers))


def test_points_on_the_radii() -> None:
    # d2 == max_radius**2 (as float products) is out, d2 == min_radius**2 in; d2 == 0 is
    # in even inside min_radius; a duplicate point is found twice.
    xyz = torch.tensor([[[0.5, 0, 0], [0, 0.25, 0], [0, 0, 0], [0, 0, 0.5], [0, 0, 0]]])
    center = torch.zeros(1, 1, 3)
    assert ball_query(0.25, 0.5, 5, xyz, center).tolist() == [[[1, 2, 4, 1, 1]]]
    assert ball_query(0.0, 0.5, 2, xyz, center).tolist() == [[[1, 2]]]
    assert ball_query(0.5, 0.75, 5, xyz, center).tolist() == [[[0, 2, 3, 4, 0]]]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_points_are_never_found(bad: float) -> None:
    xyz = torch.tensor([[[bad, 0, 0], [0.1, 0, 0]]])
    center = torch.zeros(1, 1, 3)
    assert ball_query(0, 1, 3, xyz, center).tolist() == [[[1, 1, 1]]]
    # Not even within an infinite radius (1e39 is inf as a float): inf < inf is false.
    assert ball_query(0, 1e39, 3, xyz, center).tolist() == [[[1, 1, 1]]]
    assert ball_query(0, 1, 2, xyz, torch.full((1, 1, 3), bad)).tolist() == [[[0, 0]]]


def test_half_distances_rounded_in_half() -> None:
    # The kernel's at::Half arithmetic rounds d2 = x*x + y*y of point 0 to 0.64795
    # (float16), below the float radius**2 0.648284...: found. float32 arithmetic on the
    # same coordinates gives exactly radius**2, which is out. Point 1 is the centre.
    xyz = torch.tensor([[[0.763671875, 0.255126953125, 0.0], [0.0, 0.0, 0.0]]])
    center, radius = torch.zeros(1, 1, 3), 0.805161160809972
    assert ball_query(0, radius, 2, xyz.half(), center.half()).tolist() == [[[0, 1]]]
    assert ball_query(0, radius, 2, xyz, center).tolist() == [[[1, 1]]]
    for dtype, expected in [(torch.float16, [[0, 1]]), (torch.float32, [[1, 1]])]:
        assert ref_ball_query(0, radius, 2, xyz[0].tolist(), [[0, 0, 0]], dtype) == expected


@pytest.mark.parametrize("device", DEVICES)
def test_stacked_matches_kernel_loop(device: str) -> None:
    xyz, centers = clouds(1, 60, 12, torch.float64, seed=3)
    points_cnt, centres_cnt = [25, 0, 35], [5, 3, 4]
    idx = ball_query(
        0.1,  # the stacked kernel tests max_radius only
        0.3,
        6,
        xyz[0].to(device),
        centers[0].to(device),
        torch.tensor(points_cnt, dtype=torch.int32, device=device),
        torch.tensor(centres_cnt, dtype=torch.int32, device=device),
    )
    expected = []
    for x, c in zip(xyz[0].split(points_cnt), centers[0].split(centres_cnt)):
        expected += ref_stack_ball_query(0.3, 6, x.tolist(), c.tolist(), torch.float64)
    assert idx.tolist() == expected
    assert idx[5:8, 0].tolist() == [-1, -1, -1]  # the empty cloud's centres


def test_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    xyz, centers = clouds(2, 50, 20)
    full = ball_query(0, 0.3, 7, xyz, centers)
    monkeypatch.setattr(sys.modules["mmpar.compat.ops.ball_query"], "search_chunk", lambda d: 7)
    assert torch.equal(ball_query(0, 0.3, 7, xyz, centers), full)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b, n, m", [(0, 4, 3), (2, 0, 3), (2, 4, 0)])
def test_empty(device: str, b: int, n: int, m: int) -> None:
    xyz, centers = torch.rand(b, n, 3, device=device), torch.rand(b, m, 3, device=device)
    idx = ball_query(0, 0.5, 4, xyz, centers)
    # No points: every slot 0, as the kernel leaves its zeroed output.
    assert idx.shape == (b, m, 4) and idx.dtype == torch.int32 and not idx.any()


@pytest.mark.parametrize("device", DEVICES)
def test_stacked_empty(device: str) -> None:
    def counts(*values: int) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=device)

    xyz, centers = torch.rand(0, 3, device=device), torch.rand(2, 3, device=device)
    idx = ball_query(0, 0.5, 3, xyz, centers, counts(0, 0), counts(0, 2))
    assert idx.tolist() == [[-1, 0, 0], [-1, 0, 0]]
    idx = ball_query(0, 0.5, 3, centers, xyz, counts(2), counts(0))
    assert idx.shape == (0, 3)


def test_bad_input() -> None:
    xyz, centers = torch.rand(2, 5, 3), torch.rand(2, 3, 3)
    with pytest.raises(ValueError, match="ball_query: min_radius must be less than max_radius"):
        ball_query(0.4, 0.2, 3, xyz, centers)
    with pytest.raises(AssertionError):  # mmcv asserts it
        ball_query(0.2, 0.2, 3, xyz, centers)
    with pytest.raises(ValueError, match=r"ball_query: sample_num must be an int >= 1, found 0"):
        ball_query(0, 0.2, 0, xyz, centers)
    with pytest.raises(TypeError, match="ball_query: sample_num must be an int, found 2.5"):
        ball_query(0, 0.2, 2.5, xyz, centers)
    with pytest.raises(TypeError, match="ball_query: max_radius must be a number, found '1'"):
        ball_query(0, "1", 2, xyz, centers)
    with pytest.raises(TypeError, match="ball_query: xyz must be a floating-point tensor, found"):
        ball_query(0, 0.2, 2, xyz.long(), centers)
    with pytest.raises(ValueError, match=r"center_xyz must have shape \(B, M, 3\), found \(3, 3\)"):
        ball_query(0, 0.2, 2, xyz, centers[0])
    with pytest.raises(TypeError, match="center_xyz must have the dtype of xyz"):
        ball_query(0, 0.2, 2, xyz, centers.double())
    with pytest.raises(ValueError, match="same batch size, found 2 and 1"):
        ball_query(0, 0.2, 2, xyz, centers[:1])
    flat, cnt = xyz.view(-1, 3), torch.tensor([5, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match="xyz_batch_cnt and center_xyz_batch_cnt must be given"):
        ball_query(0, 0.2, 2, flat, centers.view(-1, 3), cnt)
    with pytest.raises(TypeError, match="center_xyz_batch_cnt must be an int32 tensor, found"):
        ball_query(0, 0.2, 2, flat, centers.view(-1, 3), cnt, cnt.long())
    with pytest.raises(ValueError, match=r"center_xyz_batch_cnt must be counts >= 0 adding up"):
        ball_query(0, 0.2, 2, flat, centers.view(-1, 3), cnt, cnt)
    with pytest.raises(ValueError, match="must count the same clouds, found 2 and 1"):
        ball_query(0, 0.2, 2, flat, centers.view(-1, 3), cnt, torch.tensor([6], dtype=torch.int32))
