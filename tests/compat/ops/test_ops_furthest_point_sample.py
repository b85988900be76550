"""mmpar.compat.ops.furthest_point_sample against a simulation of mmcv's CUDA kernel."""

from __future__ import annotations

import math
from typing import List

import numpy as np
import pytest
import torch

from mmpar.compat.ops.furthest_point_sample import (
    furthest_point_sample,
    furthest_point_sample_with_dist,
)
from tests.compat.ops._reference import DEVICES

# mmcv's own test (tests/test_ops/test_furthest_point_sample.py, CUDA-only there).
MMCV_XYZ = [
    [
        [-0.2748, 1.0020, -1.1674],
        [0.1015, 1.3952, -1.2681],
        [-0.8070, 2.4137, -0.5845],
        [-1.0001, 2.1982, -0.5859],
        [0.3841, 1.8983, -0.7431],
    ],
    [
        [-1.0696, 3.0758, -0.1899],
        [-0.2559, 3.5521, -0.1402],
        [0.8164, 4.0081, -0.1839],
        [-1.1000, 3.0213, -0.8205],
        [-0.0518, 3.7251, -0.3950],
    ],
]
MMCV_IDX = [[0, 2, 4], [0, 2, 1]]


def f32(x: float) -> float:
    return float(np.float32(x))


def kernel_fps(rows: List[List[float]], m: int, dist_of) -> List[int]:
    """mmcv's kernel for one batch element, thread by thread, in float32 numbers.

    ``dist_of(old, k)`` is the distance the kernel reads or computes from ``old`` to ``k``.
    """
    n = len(rows)
    threads = max(min(1 << int(math.log(n) / math.log(2.0)), 1024), 1)
    temp = [f32(1e10)] * n
    out, old = [0], 0
    for _ in range(1, m):
        bests = []
        for tid in range(threads):
            best, besti = -1.0, 0
            for k in range(tid, n, threads):
                d = dist_of(old, k)
                d2 = temp[k] if math.isnan(d) else min(d, temp[k])  # fminf
                temp[k] = d2
                if d2 > best:
                    best, besti = d2, k
            bests.append((best, besti))
        half = threads // 2
        while half >= 1:  # the tree reduction: the lower slot wins ties
            for t in range(half):
                (v1, i1), (v2, i2) = bests[t], bests[t + half]
                bests[t] = (max(v1, v2), i2 if v2 > v1 else i1)
            half //= 2
        old = bests[0][1]
        out.append(old)
    return out[:m]


def xyz_distance(points: List[List[float]]):
    def dist_of(old: int, k: int) -> float:
        x1, y1, z1 = points[old]
        x2, y2, z2 = points[k]
        dx, dy, dz = f32(x2 - x1), f32(y2 - y1), f32(z2 - z1)
        return f32(f32(f32(dx * dx) + f32(dy * dy)) + f32(dz * dz))

    return dist_of


def ref_fps(xyz: torch.Tensor, m: int) -> List[List[int]]:
    rows = xyz.float().tolist()
    return [kernel_fps(p, m, xyz_distance(p)) for p in rows]


def ref_fps_dist(dist: torch.Tensor, m: int) -> List[List[int]]:
    rows = dist.float().tolist()
    return [kernel_fps(d, m, lambda old, k, d=d: d[old][k]) for d in rows]


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    xyz = torch.tensor(MMCV_XYZ, device=device)
    idx = furthest_point_sample(xyz, 3)
    assert idx.dtype == torch.int32 and idx.device.type == device
    assert idx.tolist() == MMCV_IDX
    square = ((xyz[:, None] - xyz[:, :, None]) ** 2).sum(-1)
    assert furthest_point_sample_with_dist(square, 3).tolist() == MMCV_IDX


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n, m", [(1, 1), (1, 3), (5, 5), (6, 9), (13, 7), (40, 40), (70, 12)])
def test_matches_kernel(device: str, n: int, m: int) -> None:
    gen = torch.Generator().manual_seed(n * 7 + m)
    xyz = torch.randn(3, n, 3, generator=gen)
    assert furthest_point_sample(xyz.to(device), m).tolist() == ref_fps(xyz, m)
    dist = torch.rand(3, n, n, generator=gen) * 4
    assert furthest_point_sample_with_dist(dist.to(device), m).tolist() == ref_fps_dist(dist, m)


@pytest.mark.parametrize("n", [6, 12, 33])
def test_ties_follow_the_kernels_reduction(n: int) -> None:
    # Points on a few spots: equal distances everywhere, the kernel's thread order decides.
    gen = torch.Generator().manual_seed(n)
    spots = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    xyz = spots[torch.randint(0, 4, (2, n), generator=gen)]
    xyz[:, 0] = 0.0
    assert furthest_point_sample(xyz, n + 3).tolist() == ref_fps(xyz, n + 3)


def test_duplicates_and_more_samples_than_points() -> None:
    xyz = torch.tensor([[[0.0, 0, 0], [2, 0, 0], [2, 0, 0], [0, 0, 0], [0, 3, 0]]])
    # After the three distinct spots every kept distance is 0: the kernel repeats point 0.
    got = furthest_point_sample(xyz, 8).tolist()
    assert got == ref_fps(xyz, 8)
    # Points 1 and 2 tie: with 4 threads, lane 2 beats lane 1 in the reduction.
    assert got[0][:3] == [0, 4, 2] and got[0][5:] == [0, 0, 0]
    assert furthest_point_sample(xyz, 5).tolist() == ref_fps(xyz, 5)  # N == num_points


def test_points_at_the_origin_are_sampled() -> None:
    # mmcv 1.7.2's kernel does not skip points of tiny norm (its mag <= 1e-3 test is commented).
    xyz = torch.tensor([[[1.0, 1, 1], [0, 0, 0], [1e-3, 0, 0], [0.9, 1, 1]]])
    assert furthest_point_sample(xyz, 3).tolist() == [[0, 1, 3]]
    assert furthest_point_sample(xyz[:, 1:3], 2).tolist() == [[0, 1]]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_points(bad: float) -> None:
    xyz = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [bad, 0, 0], [5, 0, 0]]])
    # The non-finite point keeps 1e10, is taken first and then again and again.
    assert furthest_point_sample(xyz, 5).tolist() == [[0, 2, 2, 2, 2]]
    assert ref_fps(xyz, 5) == [[0, 2, 2, 2, 2]]


def test_with_dist_special_values() -> None:
    dist = torch.tensor(
        [
            [[0.0, -5.0, -3.0], [-5.0, 0.0, -2.0], [-3.0, -2.0, 0.0]],
            [[0.0, float("nan"), 2.0], [1.0, 0.0, 5e10], [2.0, 3.0, 0.0]],
        ]
    )
    # Row 0 only negative: no distance above the kernel's -1, so point 0 again;
    # a NaN leaves 1e10 (point 1 then), 5e10 is cut to 1e10.
    got = furthest_point_sample_with_dist(dist, 4).tolist()
    assert got == ref_fps_dist(dist, 4)
    assert got[0] == [0, 0, 0, 0] and got[1][:2] == [0, 1]


def test_mmcv_data_file() -> None:
    # mmcv's tests/data/for_3d_ops, as its test_fps_with_dist reads them.
    data = "/work/mmcv_tests/tests/data/for_3d_ops/"
    pytest.importorskip("numpy")
    try:
        expected = np.load(data + "fps_idx.npy")
        dist = torch.from_numpy(np.load(data + "features_for_fps_distance.npy"))
    except FileNotFoundError:
        pytest.skip("mmcv's test data is not here")
    assert furthest_point_sample_with_dist(dist, 16).tolist() == expected.tolist()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtypes_compute_in_float32(dtype: torch.dtype) -> None:
    xyz = torch.randn(2, 20, 3, generator=torch.Generator().manual_seed(0)).to(dtype)
    assert furthest_point_sample(xyz, 6).tolist() == ref_fps(xyz.float(), 6)


@pytest.mark.parametrize("b, n, m", [(0, 5, 3), (2, 5, 0), (0, 0, 0), (2, 0, 0)])
def test_empty(b: int, n: int, m: int) -> None:
    for out in (
        furthest_point_sample(torch.rand(b, n, 3), m),
        furthest_point_sample_with_dist(torch.rand(b, n, n), m),
    ):
        assert out.shape == (b, m) and out.dtype == torch.int32


def test_no_gradient() -> None:
    xyz = torch.rand(2, 6, 3, requires_grad=True)
    out = furthest_point_sample(xyz, 3)
    assert not out.requires_grad


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"furthest_point_sample: points_xyz must have shape"):
        furthest_point_sample(torch.rand(2, 5, 2), 3)
    with pytest.raises(TypeError, match="points_xyz must be a floating-point tensor, found"):
        furthest_point_sample(torch.ones(2, 5, 3, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="num_points must be an int >= 0, found -1"):
        furthest_point_sample(torch.rand(2, 5, 3), -1)
    with pytest.raises(TypeError, match="num_points must be an int, found 2.5"):
        furthest_point_sample(torch.rand(2, 5, 3), 2.5)
    with pytest.raises(ValueError, match="num_points=3 points cannot be sampled"):
        furthest_point_sample(torch.rand(2, 0, 3), 3)
    with pytest.raises(ValueError, match=r"with_dist: points_dist must have shape \(B, N, N\)"):
        furthest_point_sample_with_dist(torch.rand(2, 5, 4), 3)
