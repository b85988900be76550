"""mmpar.compat.ops.scatter_points against per-voxel loops following mmcv's definition."""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

import pytest
import torch

from mmpar.compat.ops.scatter_points import DynamicScatter, dynamic_scatter
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

REDUCE_TYPES = ["sum", "mean", "max"]


def ref_groups(coors: torch.Tensor) -> Dict[Tuple[int, ...], List[int]]:
    """Kept points (no negative coordinate) by voxel, voxels sorted lexicographically."""
    groups: Dict[Tuple[int, ...], List[int]] = {}
    for i, row in enumerate(coors.tolist()):
        if min(row) >= 0:
            groups.setdefault(tuple(row), []).append(i)
    return dict(sorted(groups.items()))


def ref_scatter(feats: torch.Tensor, coors: torch.Tensor, reduce_type: str) -> tuple:
    """mmcv's definition: sum, sum / count, or the max ignoring NaN (-inf if none)."""
    rows = feats.double().tolist()
    out = []
    for members in ref_groups(coors).values():
        values = list(zip(*(rows[i] for i in members)))
        if reduce_type == "max":
            out.append([max((v for v in col if not math.isnan(v)), default=-math.inf)
                        for col in values])  # fmt: skip
        else:
            sums = [math.fsum(col) for col in values]
            out.append([s / len(members) if reduce_type == "mean" else s for s in sums])
    groups = list(ref_groups(coors))
    shape = (len(groups), coors.shape[1])
    return (
        torch.tensor(out, dtype=torch.float64).reshape(len(groups), feats.shape[1]),
        torch.tensor(groups, dtype=coors.dtype).reshape(shape),
    )


def ref_grad(feats: torch.Tensor, coors: torch.Tensor, grad: torch.Tensor, reduce_type: str):
    """mmcv's backward: the voxel's gradient (/ count for mean); for max, to the point of
    lowest index equal to the maximum."""
    out = [[0.0] * feats.shape[1] for _ in range(feats.shape[0])]
    rows, grad = feats.tolist(), grad.tolist()
    reduced = ref_scatter(feats, coors, reduce_type)[0].tolist()
    for v, members in enumerate(ref_groups(coors).values()):
        for c in range(feats.shape[1]):
            if reduce_type == "max":
                members_c = [i for i in members if rows[i][c] == reduced[v][c]][:1]
            else:
                members_c = members
            for i in members_c:
                scale = len(members) if reduce_type == "mean" else 1
                out[i][c] = grad[v][c] / scale
    return torch.tensor(out, dtype=feats.dtype).reshape(feats.shape)


def random_case(n: int, c: int, ndim: int, high: int, seed: int) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    feats = torch.rand(n, c, generator=gen, dtype=torch.float64) * 100 - 50
    coors = torch.randint(-1, high, (n, ndim), generator=gen, dtype=torch.int32)
    return feats, coors


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce_type", REDUCE_TYPES)
def test_matches_reference(device: str, reduce_type: str) -> None:
    feats, coors = random_case(300, 3, 3, 4, seed=1)
    feats = feats.to(device).requires_grad_()
    out, voxel_coors = dynamic_scatter(feats, coors.to(device), reduce_type)
    ref_out, ref_coors = ref_scatter(feats.detach().cpu(), coors, reduce_type)
    assert voxel_coors.dtype == torch.int32 and torch.equal(voxel_coors.cpu(), ref_coors)
    torch.testing.assert_close(out.detach().cpu(), ref_out)
    grad = torch.rand(out.shape, dtype=torch.float64)
    out.backward(grad.to(device))
    expected = ref_grad(feats.detach().cpu(), coors, grad, reduce_type)
    torch.testing.assert_close(feats.grad.cpu(), expected)


def test_mmcv_numbers() -> None:
    # mmcv's test: coordinates from -1, features in [-50, 50), against coors.unique(dim=0)
    # and a per-voxel mean / max (a smaller cloud: 2,000 points, coordinates below 6).
    gen = torch.Generator().manual_seed(0)
    feats = torch.rand(2000, 3, generator=gen) * 100 - 50
    coors = torch.randint(-1, 6, (2000, 3), generator=gen, dtype=torch.int32)
    ref_coors = coors.unique(dim=0, sorted=True)
    ref_coors = ref_coors[ref_coors.min(dim=-1).values >= 0]
    for average, reduce in ((True, torch.mean), (False, lambda x, dim: x.max(dim).values)):
        layer = DynamicScatter([0.32, 0.32, 6], [-74.88, -74.88, -2, 74.88, 74.88, 4], average)
        out, out_coors = layer(feats, coors)
        assert torch.equal(out_coors, ref_coors)
        expected = [reduce(feats[(coors == row).all(-1)], dim=0) for row in ref_coors]
        torch.testing.assert_close(out, torch.stack(expected), atol=1e-2, rtol=1e-5)


@pytest.mark.parametrize("reduce_type", REDUCE_TYPES)
def test_gradcheck(reduce_type: str) -> None:
    feats, coors = random_case(40, 4, 3, 3, seed=2)  # no ties: distinct random features
    feats.requires_grad_()
    assert torch.autograd.gradcheck(lambda f: dynamic_scatter(f, coors, reduce_type)[0], (feats,))


def test_max_ties_go_to_the_lowest_index() -> None:
    feats = torch.tensor([[1.0, 5.0], [3.0, 5.0], [3.0, 2.0], [0.0, 9.0]], requires_grad=True)
    coors = torch.tensor([[0, 0, 0], [0, 0, 0], [0, 0, 0], [-1, 0, 0]], dtype=torch.int32)
    out, _ = dynamic_scatter(feats, coors, "max")
    assert out.tolist() == [[3.0, 5.0]]
    out.backward(torch.tensor([[10.0, 20.0]]))
    assert feats.grad.tolist() == [[0, 20], [10, 0], [0, 0], [0, 0]]


@pytest.mark.parametrize("device", DEVICES)
def test_non_finite(device: str) -> None:
    nan, inf = float("nan"), float("inf")
    feats = torch.tensor([[nan, 1.0], [2.0, inf], [nan, nan], [nan, 4.0]], device=device)
    coors = torch.tensor([[0, 0], [0, 0], [1, 1], [1, 1]], device=device, dtype=torch.int32)
    feats.requires_grad_()
    out, _ = dynamic_scatter(feats, coors, "max")
    # NaN never wins (fmaxf); a voxel of NaN features only is -inf.
    assert out.tolist() == [[2.0, inf], [-inf, 4.0]]
    out.sum().backward()
    assert feats.grad.tolist() == [[0, 0], [1, 1], [0, 0], [0, 1]]
    total, _ = dynamic_scatter(feats, coors, "sum")
    assert total[0, 0].isnan() and total[0, 1] == inf


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce_type", REDUCE_TYPES)
def test_empty_and_all_dropped(device: str, reduce_type: str) -> None:
    for n, low in ((0, 0), (50, -1)):
        feats = torch.rand(n, 3, device=device, requires_grad=True)
        coors = torch.randint(low, 0 if low else 1, (n, 3), device=device, dtype=torch.int32)
        out, out_coors = dynamic_scatter(feats, coors, reduce_type)
        assert out.shape == (0, 3) and out_coors.shape == (0, 3)
        out.sum().backward()
        assert feats.grad.shape == (n, 3) and not feats.grad.any()


def test_wide_coordinates_keep_lexicographic_order() -> None:
    # 4 columns of values up to 2**40: a row-major key overflows int64, the keys are ranked.
    gen = torch.Generator().manual_seed(3)
    coors = torch.randint(0, 4, (200, 4), generator=gen) * (1 << 38) + torch.randint(
        0, 2, (200, 4), generator=gen
    )
    feats = torch.rand(200, 2, generator=gen, dtype=torch.float64)
    out, out_coors = dynamic_scatter(feats, coors, "mean")
    ref_out, ref_coors = ref_scatter(feats, coors, "mean")
    assert out_coors.dtype == torch.int64 and torch.equal(out_coors, ref_coors)
    torch.testing.assert_close(out, ref_out)


@pytest.mark.parametrize("average", [True, False])
def test_module_batches_as_mmcvs_loop(average: bool) -> None:
    # mmcv: samples 0 .. coors[-1, 0], each reduced alone, its index prepended.
    feats, coors = random_case(120, 3, 3, 3, seed=4)
    batch = torch.tensor([0] * 50 + [2] * 30 + [3] * 10 + [1] * 30, dtype=torch.int32)
    coors = torch.cat([batch[:, None], coors], 1)
    feats.requires_grad_()
    layer = DynamicScatter([0.2] * 3, [0, 0, 0, 1, 1, 1], average)
    out, out_coors = layer(feats, coors)
    reduce = "mean" if average else "max"
    ref_out, ref_coors = [], []
    for i in range(int(coors[-1, 0]) + 1):
        idx = (coors[:, 0] == i).nonzero().squeeze(1)
        o, c = ref_scatter(feats.detach()[idx], coors[idx, 1:], reduce)
        ref_out.append(o)
        ref_coors.append(torch.nn.functional.pad(c, (1, 0), value=i))
    assert torch.equal(out_coors, torch.cat(ref_coors))  # sample 3 (after the last, 1) dropped
    torch.testing.assert_close(out, torch.cat(ref_out))
    out.sum().backward()
    assert not feats.grad[80:90].any()
    assert repr(layer) == (
        f"DynamicScatter(voxel_size=[0.2, 0.2, 0.2], point_cloud_range=[0, 0, 0, 1, 1, 1], "
        f"average_points={average})"
    )


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(dtype: torch.dtype) -> None:
    feats, coors = random_case(100, 3, 3, 3, seed=5)
    feats = feats.to(dtype).requires_grad_()
    out, _ = dynamic_scatter(feats, coors, "mean")
    ref, _ = dynamic_scatter(feats.detach().float(), coors, "mean")
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref.to(dtype))
    out.sum().backward()
    assert feats.grad.dtype == dtype


def test_bad_input() -> None:
    feats, coors = random_case(10, 3, 3, 3, seed=6)
    with pytest.raises(ValueError, match="reduce_type must be one of .* found 'min'"):
        dynamic_scatter(feats, coors, "min")
    with pytest.raises(TypeError, match="dynamic_scatter: feats must be a floating-point tensor"):
        dynamic_scatter(feats.long(), coors)
    with pytest.raises(TypeError, match="coors must be an integer tensor, found torch.float32"):
        dynamic_scatter(feats, coors.float())
    with pytest.raises(ValueError, match=r"coors must have shape \(N, ndim >= 1\) .* N = 10"):
        dynamic_scatter(feats, coors[:5])
    with pytest.raises(ValueError, match=r"feats must have shape \(N, C\), found \(10,\)"):
        dynamic_scatter(feats[:, 0], coors)
