"""mmpar.compat.ops.knn against mmcv's kernel's heap and a sorted brute force."""

from __future__ import annotations

import sys

import pytest
import torch

from mmpar.compat.ops.knn import knn
from tests.compat.ops._points_reference import MMCV_CENTERS, MMCV_XYZ, ref_knn, ref_knn_heap
from tests.compat.ops._reference import DEVICES


def clouds(b: int, n: int, m: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    xyz = torch.rand(b, n, 3, generator=gen, dtype=torch.float64).to(dtype)
    centers = torch.rand(b, m, 3, generator=gen, dtype=torch.float64).to(dtype)
    return xyz, centers


def expected(k: int, xyz: torch.Tensor, centers: torch.Tensor, rule=ref_knn) -> list:
    """``(B, k, M)`` nested lists."""
    out = []
    for x, c in zip(xyz, centers):
        rows = [rule(k, x.tolist(), centre, xyz.dtype) for centre in c.tolist()]
        out.append([list(col) for col in zip(*rows)] if rows else [[] for _ in range(k)])
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    # mmcv's test compares with torch's topk of the squared distances (all distinct).
    xyz = torch.tensor(MMCV_XYZ, device=device)
    centers = torch.tensor(MMCV_CENTERS, device=device)
    dist = ((centers[:, :, None] - xyz[:, None]) ** 2).sum(-1)
    top = dist.topk(k=5, dim=2, largest=False)[1].transpose(2, 1)
    idx = knn(5, xyz, centers)
    assert idx.dtype == torch.int32 and idx.shape == (2, 5, 5) and torch.equal(idx.long(), top)
    transposed = knn(5, xyz.transpose(1, 2).contiguous(), centers.transpose(1, 2), True)
    assert torch.equal(transposed, idx)
    dist = ((xyz[:, :, None] - xyz[:, None]) ** 2).sum(-1)
    top = dist.topk(k=5, dim=2, largest=False)[1].transpose(2, 1)
    assert torch.equal(knn(5, xyz, xyz).long(), top)
    assert torch.equal(knn(5, xyz), knn(5, xyz, xyz))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [1, 3, 16])
def test_matches_mmcv_heap_on_distinct_distances(device: str, dtype: torch.dtype, k: int) -> None:
    xyz, centers = clouds(2, 30, 7, dtype)
    idx = knn(k, xyz.to(device), centers.to(device))
    assert idx.tolist() == expected(k, xyz, centers, ref_knn_heap) == expected(k, xyz, centers)


def test_k_above_the_cloud_leaves_index_0() -> None:
    # The heap's unfilled slots (distance 1e10, index 0) sort last.
    xyz = torch.tensor([[[3.0, 0, 0], [1.0, 0, 0], [2.0, 0, 0]]])
    center = torch.zeros(1, 1, 3)
    assert knn(5, xyz, center)[0, :, 0].tolist() == [1, 2, 0, 0, 0]
    assert knn(5, xyz, center).tolist() == expected(5, xyz, center, ref_knn_heap)


def test_equal_distances_by_index() -> None:
    # mmpar: ascending index, the lowest kept at the k-th place. mmcv's heap orders ties by
    # its history: here 1, 0 for the two points at distance 1 with k=2 (and 2, 1 with a
    # nearer point after them), which no rule on the values alone reproduces.
    xyz = torch.tensor([[[1.0, 0, 0], [0, 1.0, 0], [0, 0, 0]]])
    center = torch.zeros(1, 1, 3)
    assert knn(2, xyz[:, :2], center)[0, :, 0].tolist() == [0, 1]
    assert ref_knn_heap(2, xyz[0, :2].tolist(), [0, 0, 0], torch.float32) == [1, 0]
    assert knn(2, xyz, center)[0, :, 0].tolist() == [2, 0]
    assert ref_knn_heap(2, xyz[0].tolist(), [0, 0, 0], torch.float32) == [2, 1]
    dup = torch.tensor([[[0.5, 0.5, 0.5]] * 4 + [[0.0, 0.0, 0.0]] * 3 + [[0.5, 0.5, 0.5]] * 2])
    assert knn(6, dup, center)[0, :, 0].tolist() == [4, 5, 6, 0, 1, 2]
    grid, centres = torch.randint(0, 3, (2, 40, 3)).float(), torch.randint(0, 3, (2, 6, 3)).float()
    assert knn(9, grid, centres).tolist() == expected(9, grid, centres)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e6])
def test_far_and_non_finite_points_are_never_taken(bad: float) -> None:
    # 1e6**2 = 1e12 >= the heap's starting 1e10.
    xyz = torch.tensor([[[bad, 0, 0], [0.5, 0, 0], [bad, 1, 1]]])
    center = torch.zeros(1, 1, 3)
    assert knn(3, xyz, center)[0, :, 0].tolist() == [1, 0, 0]
    assert knn(3, xyz, center).tolist() == expected(3, xyz, center, ref_knn_heap)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half(dtype: torch.dtype) -> None:
    xyz, centers = clouds(2, 20, 5)
    xyz, centers = xyz.to(dtype), centers.to(dtype)
    d2 = ((centers[:, :, None] - xyz[:, None]) ** 2).sum(-1)  # distinct enough to compare
    idx = knn(4, xyz, centers)
    gathered = d2.gather(2, idx.transpose(1, 2).long())
    torch.testing.assert_close(gathered, d2.topk(4, 2, largest=False)[0], atol=2e-3, rtol=1e-2)


def test_more_than_3_values_read_as_mmcvs_kernel_reads_them() -> None:
    # mmdet3d's DGCNN (F-KNN) passes (B, N, C) features: mmcv's kernel reads point i of
    # cloud b at offset (b * N + i) * 3 of the buffer.
    gen = torch.Generator().manual_seed(5)
    features = torch.rand(2, 12, 7, generator=gen)
    flat = features.reshape(-1).tolist()
    expected_idx = []
    for b in range(2):
        cloud = [flat[(b * 12 + i) * 3 : (b * 12 + i) * 3 + 3] for i in range(12)]
        rows = [ref_knn_heap(4, cloud, centre, torch.float32) for centre in cloud]
        expected_idx.append([list(col) for col in zip(*rows)])
    assert knn(4, features).tolist() == expected_idx
    assert knn(4, features.transpose(1, 2), None, True).tolist() == expected_idx


def test_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    xyz, centers = clouds(2, 40, 25)
    full = knn(6, xyz, centers)
    monkeypatch.setattr(sys.modules["mmpar.compat.ops.knn"], "search_chunk", lambda d: 11)
    assert torch.equal(knn(6, xyz, centers), full)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b, n, m", [(0, 4, 3), (2, 0, 3), (2, 4, 0)])
def test_empty(device: str, b: int, n: int, m: int) -> None:
    xyz, centers = torch.rand(b, n, 3, device=device), torch.rand(b, m, 3, device=device)
    idx = knn(3, xyz, centers)
    assert idx.shape == (b, 3, m) and idx.dtype == torch.int32 and not idx.any()


def test_no_gradient() -> None:
    xyz = torch.rand(1, 5, 3, requires_grad=True)
    assert not knn(2, xyz).requires_grad


def test_bad_input() -> None:
    xyz, centers = torch.rand(2, 5, 3), torch.rand(2, 3, 3)
    for k in (0, 100):
        with pytest.raises(ValueError, match=rf"knn: k must be .* found {k}"):
            knn(k, xyz, centers)
    with pytest.raises(AssertionError):  # mmcv asserts 0 < k < 100
        knn(100, xyz, centers)
    with pytest.raises(TypeError, match="knn: k must be an int, found 2.0"):
        knn(2.0, xyz, centers)
    with pytest.raises(TypeError, match="knn: xyz must be a floating-point tensor, found"):
        knn(2, xyz.int(), centers)
    with pytest.raises(ValueError, match="knn: xyz must have 3 coordinates per point .* found 2"):
        knn(2, xyz.transpose(1, 2)[:, :2], None, True)
    with pytest.raises(ValueError, match=r"knn: center_xyz must have shape \(B, C, N\), found"):
        knn(2, xyz, centers[0], True)
    with pytest.raises(TypeError, match="center_xyz must have the dtype of xyz"):
        knn(2, xyz, centers.half())
    with pytest.raises(ValueError, match="same batch size, found 2 and 1"):
        knn(2, xyz, centers[:1])
