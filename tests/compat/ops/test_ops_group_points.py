"""mmpar.compat.ops.group_points: grouping_operation, QueryAndGroup and GroupAll, by loops."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.group_points import GroupAll, QueryAndGroup, grouping_operation
from tests.compat.ops._points_reference import (
    MMCV_CENTERS,
    MMCV_XYZ,
    ref_ball_query,
    ref_knn,
)
from tests.compat.ops._reference import DEVICES

# mmcv's own test (tests/test_ops/test_group_points.py): 2 x 3 x 10 features.
FEATURES = [
    [
        [0.5798, -0.7981, -0.9280, -1.3311, 1.3687, 0.9277, -0.4164, -1.8274, 0.9268, 0.8414],
        [5.4247, 1.5113, 2.3944, 1.4740, 5.0300, 5.1030, 1.9360, 2.1939, 2.1581, 3.4666],
        [-1.6266, -1.0281, -1.0393, -1.6931, -1.3982, -0.5732, -1.0830, -1.7561, -1.6786, -1.6967],
    ],
    [
        [-0.0380, -0.1880, -1.5724, 0.6905, -0.3190, 0.7798, -0.3693, -0.9457, -0.2942, -1.8527],
        [1.1773, 1.5009, 2.6399, 5.9242, 1.0962, 2.7346, 6.0865, 1.5555, 4.3303, 2.8229],
        [-0.6646, -0.6870, -0.1125, -0.2224, -0.3445, -1.4049, 0.4990, -0.7037, -0.9924, 0.0386],
    ],
]
IDX = [
    [[0, 0, 0], [3, 3, 3], [8, 8, 8], [0, 0, 0], [0, 0, 0], [0, 0, 0]],
    [[0, 0, 0], [6, 6, 6], [9, 9, 9], [0, 0, 0], [0, 0, 0], [0, 0, 0]],
]
# Its expected output, one value per group (each group repeats one point).
EXPECTED = [
    [
        [0.5798, -1.3311, 0.9268, 0.5798, 0.5798, 0.5798],
        [5.4247, 1.4740, 2.1581, 5.4247, 5.4247, 5.4247],
        [-1.6266, -1.6931, -1.6786, -1.6266, -1.6266, -1.6266],
    ],
    [
        [-0.0380, -0.3693, -1.8527, -0.0380, -0.0380, -0.0380],
        [1.1773, 6.0865, 2.8229, 1.1773, 1.1773, 1.1773],
        [-0.6646, 0.4990, 0.0386, -0.6646, -0.6646, -0.6646],
    ],
]
STACKED_IDX = [[0, 0, 0], [3, 3, 3], [8, 8, 8], [1, 1, 1], [0, 0, 0], [2, 2, 2]] + [
    [0, 0, 0], [6, 6, 6], [9, 9, 9], [0, 0, 0], [1, 1, 1], [0, 0, 0]
]  # fmt: skip


def counts(*values: int, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device=device)


def ref_group(features: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    b, c, _ = features.shape
    out = torch.zeros(b, c, *idx.shape[1:], dtype=features.dtype)
    for bi in range(b):
        for p, row in enumerate(idx[bi].tolist()):
            for s, i in enumerate(row):
                out[bi, :, p, s] = features[bi, :, i]
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_mmcv_numbers(device: str, dtype: torch.dtype) -> None:
    features = torch.tensor(FEATURES, dtype=dtype, device=device)
    out = grouping_operation(features, torch.tensor(IDX, dtype=torch.int32, device=device))
    assert out.dtype == dtype and out.shape == (2, 3, 6, 3)
    expected = torch.tensor(EXPECTED, dtype=dtype)[..., None].expand(2, 3, 6, 3)
    assert torch.equal(out.cpu(), expected)
    # Stacked: the 6 x 10 rows are 6 points of 10 channels, 3 per cloud; the indices past
    # a cloud's 3 points give 0.
    stacked = grouping_operation(
        features.reshape(6, 10),
        torch.tensor(STACKED_IDX, dtype=torch.int32, device=device),
        counts(3, 3, device=device),
        counts(6, 6, device=device),
    )
    rows = features.reshape(6, 10).cpu()
    zero = torch.zeros(10, dtype=dtype)
    expected_rows = [rows[0], zero, zero, rows[1], rows[0], rows[2]]
    expected_rows += [rows[3], zero, zero, rows[3], rows[4], rows[3]]
    assert stacked.shape == (12, 10, 3)
    assert torch.equal(stacked.cpu(), torch.stack(expected_rows)[..., None].expand(12, 10, 3))


@pytest.mark.parametrize("device", DEVICES)
def test_matches_reference_and_gradient(device: str) -> None:
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(2, 4, 7, generator=gen, dtype=torch.float64)
    idx = torch.randint(0, 7, (2, 5, 6), generator=gen, dtype=torch.int32)
    f = features.to(device).requires_grad_()
    out = grouping_operation(f, idx.to(device))
    assert torch.equal(out.detach().cpu(), ref_group(features, idx))
    # mmcv's backward: each output's gradient added into the feature it read.
    grad_out = torch.rand(2, 4, 5, 6, generator=gen, dtype=torch.float64)
    out.backward(grad_out.to(device))
    ref = torch.zeros_like(features)
    for b in range(2):
        for p, row in enumerate(idx[b].tolist()):
            for s, i in enumerate(row):
                ref[b, :, i] += grad_out[b, :, p, s]
    torch.testing.assert_close(f.grad.cpu(), ref)


def test_gradcheck() -> None:
    features = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    idx = torch.randint(0, 5, (2, 4, 3), dtype=torch.int32)
    assert torch.autograd.gradcheck(lambda f: grouping_operation(f, idx), (features,))
    stacked = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    sidx = torch.tensor([[0, 3, -1], [2, 2, 1], [0, 1, 5]], dtype=torch.int32)
    assert torch.autograd.gradcheck(
        lambda f: grouping_operation(f, sidx, counts(4, 3), counts(2, 1)), (stacked,)
    )


def test_stacked_outside_the_cloud_is_zero_without_gradient() -> None:
    features = torch.arange(12.0).view(4, 3).requires_grad_()
    idx = torch.tensor([[-1, 0, 2], [1, -1, 5]], dtype=torch.int32)
    out = grouping_operation(features, idx, counts(2, 2), counts(1, 1))
    assert out.tolist() == [
        [[0, 0, 0], [0, 1, 0], [0, 2, 0]],  # cloud 0: -1, 0, 2 (past its 2 points)
        [[9, 0, 0], [10, 0, 0], [11, 0, 0]],  # cloud 1: its point 1, -1, 5
    ]
    out.sum().backward()
    assert features.grad.tolist() == [[1, 1, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1]]


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device: str) -> None:
    features = torch.rand(2, 3, 0, device=device, requires_grad=True)
    out = grouping_operation(features, torch.zeros(2, 4, 0, dtype=torch.int32, device=device))
    assert out.shape == (2, 3, 4, 0)
    out = grouping_operation(features, torch.zeros(2, 0, 5, dtype=torch.int32, device=device))
    assert out.shape == (2, 3, 0, 5)
    out.sum().backward()
    stacked = grouping_operation(
        torch.rand(0, 3, device=device),
        torch.full((2, 4), -1, dtype=torch.int32, device=device),
        counts(0, device=device),
        counts(2, device=device),
    )
    assert stacked.shape == (2, 3, 4) and not stacked.any()


def test_bad_input() -> None:
    features, idx = torch.rand(2, 3, 5), torch.zeros(2, 4, 3, dtype=torch.int32)
    with pytest.raises(TypeError, match="grouping_operation: indices must be an int32"):
        grouping_operation(features, idx.float())
    with pytest.raises(TypeError, match="grouping_operation: features must be a floating-point"):
        grouping_operation(features.long(), idx)
    with pytest.raises(ValueError, match=r"indices must have shape \(B, npoint, nsample\)"):
        grouping_operation(features, idx[0])
    with pytest.raises(ValueError, match="same batch size, found 2 and 1"):
        grouping_operation(features, idx[:1])
    with pytest.raises(
        ValueError, match=r"indices must be in \[0, 5\) .* found values in \[5, 5\]"
    ):
        grouping_operation(features, idx + 5)
    with pytest.raises(ValueError, match="features_batch_cnt and indices_batch_cnt must be given"):
        grouping_operation(features[0].T, idx[0], counts(5))
    with pytest.raises(ValueError, match=r"indices_batch_cnt must be counts >= 0 adding up to"):
        grouping_operation(features[0].T, idx[0], counts(5), counts(3))
    with pytest.raises(TypeError, match="features_batch_cnt must be an int32 tensor"):
        grouping_operation(features[0].T, idx[0], counts(5).long(), counts(4))


# ----------------------------------------------------------------- QueryAndGroup


def query_inputs(device: str = "cpu") -> tuple:
    xyz = torch.tensor(MMCV_XYZ, dtype=torch.float64, device=device)
    centers = torch.tensor(MMCV_CENTERS, dtype=torch.float64, device=device)
    features = torch.randn(2, 4, 10, dtype=torch.float64, generator=torch.manual_seed(0))
    return xyz, centers, features.to(device)


def ref_query_and_group(
    xyz: torch.Tensor, centers: torch.Tensor, features: torch.Tensor, idx: list, scale: float
) -> tuple:
    """``(offsets (B, 3, P, S), grouped xyz, grouped features)`` from the definition."""
    idx_t = torch.tensor(idx)
    grouped_xyz = ref_group(xyz.transpose(1, 2).cpu(), idx_t)
    offsets = (grouped_xyz - centers.transpose(1, 2).cpu()[..., None]) / scale
    return offsets, grouped_xyz, ref_group(features.cpu(), idx_t)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("min_radius, max_radius", [(0.0, 0.4), (0.2, 0.6), (None, None)])
@pytest.mark.parametrize("use_xyz", [True, False])
def test_query_and_group(device: str, min_radius: float, max_radius: float, use_xyz: bool) -> None:
    xyz, centers, features = query_inputs(device)
    sample = 5
    if max_radius is None:
        module = QueryAndGroup(None, sample, use_xyz=use_xyz, return_grouped_xyz=True)
        idx = [
            [ref_knn(sample, x, c, torch.float64) for c in cs]
            for x, cs in zip(MMCV_XYZ, MMCV_CENTERS)
        ]
    else:
        module = QueryAndGroup(
            max_radius, sample, min_radius, use_xyz, True, True, return_grouped_idx=True
        )
        idx = [
            ref_ball_query(min_radius, max_radius, sample, x.tolist(), c.tolist(), torch.float64)
            for x, c in zip(xyz.cpu(), centers.cpu())
        ]
    out = module(xyz, centers, features)
    offsets, grouped_xyz, grouped = ref_query_and_group(
        xyz, centers, features, idx, max_radius or 1
    )
    new_features = torch.cat([offsets, grouped], 1) if use_xyz else grouped
    torch.testing.assert_close(out[0].cpu(), new_features)
    torch.testing.assert_close(out[1].cpu(), grouped_xyz)
    if max_radius is not None:
        assert len(out) == 3 and out[2].dtype == torch.int32 and out[2].tolist() == idx
    else:
        assert len(out) == 2


def test_query_and_group_without_features_and_gradients() -> None:
    xyz, centers, _ = query_inputs()
    xyz.requires_grad_()
    centers.requires_grad_()
    out = QueryAndGroup(0.4, 4)(xyz, centers)
    assert out.shape == (2, 3, 5, 4)
    out.sum().backward()
    # Each centre's offsets: grad -1 per slot to the centre, +1 per slot to the points read.
    assert torch.equal(centers.grad, torch.full_like(centers, -4.0))
    assert xyz.grad.sum().item() == pytest.approx(2 * 5 * 4 * 3)
    with pytest.raises(ValueError, match="QueryAndGroup: use_xyz=False needs features"):
        QueryAndGroup(0.4, 4, use_xyz=False)(xyz, centers)


def test_uniform_sample() -> None:
    xyz, centers, features = query_inputs()
    torch.manual_seed(0)
    module = QueryAndGroup(0.4, 6, 0.2, uniform_sample=True, return_unique_cnt=True,
                           return_grouped_idx=True)  # fmt: skip
    new_features, unique_cnt, idx = module(xyz, centers, features)
    plain = QueryAndGroup(0.4, 6, 0.2, return_grouped_idx=True)(xyz, centers, features)[1]
    # mmcv's: each group's distinct indices ascending, then draws among them; the counts
    # a (B, npoint) tensor of the default dtype on the default device.
    assert unique_cnt.dtype == torch.get_default_dtype() and unique_cnt.device.type == "cpu"
    for b in range(2):
        for p in range(5):
            distinct = sorted(set(plain[b, p].tolist()))
            assert unique_cnt[b, p] == len(distinct)
            assert idx[b, p, : len(distinct)].tolist() == distinct
            assert set(idx[b, p].tolist()) == set(distinct)
    offsets, _, grouped = ref_query_and_group(xyz, centers, features, idx.tolist(), 1.0)
    torch.testing.assert_close(new_features, torch.cat([offsets, grouped], 1))
    # Draws are uniform among a group's distinct points.
    many = torch.zeros(1, 1, 3)
    cloud = torch.tensor([[[0.0, 0, 0], [0.1, 0, 0], [0.2, 0, 0]]])
    draws = QueryAndGroup(1.0, 90, uniform_sample=True, return_grouped_idx=True)(cloud, many)[1]
    assert draws[0, 0, :3].tolist() == [0, 1, 2]
    assert min(int((draws[0, 0, 3:] == i).sum()) for i in range(3)) > 10


def test_query_and_group_asserts() -> None:
    with pytest.raises(ValueError, match="return_unique_cnt needs uniform_sample=True"):
        QueryAndGroup(0.4, 4, return_unique_cnt=True)
    with pytest.raises(AssertionError, match="normalize_xyz needs a max_radius, found None"):
        QueryAndGroup(None, 4, normalize_xyz=True)
    xyz, centers, _ = query_inputs()
    with pytest.raises(ValueError, match="knn: k must be in"):
        QueryAndGroup(None, 0)(xyz, centers)
    with pytest.raises(ValueError, match="ball_query: sample_num must be an int >= 1"):
        QueryAndGroup(0.4, 0)(xyz, centers)


@pytest.mark.parametrize("use_xyz", [True, False])
def test_group_all(use_xyz: bool) -> None:
    xyz, centers, features = query_inputs()
    out = GroupAll(use_xyz)(xyz, centers, features)
    expected = torch.cat([xyz.transpose(1, 2), features], 1) if use_xyz else features
    assert torch.equal(out, expected[:, :, None])
    assert torch.equal(GroupAll(use_xyz)(xyz, None), xyz.transpose(1, 2)[:, :, None])
