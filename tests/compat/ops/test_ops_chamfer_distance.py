"""mmpar.compat.ops.chamfer_distance against a brute-force nearest-neighbour loop."""

from __future__ import annotations

import sys

import pytest
import torch

from mmpar.compat.ops.chamfer_distance import chamfer_distance
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

# mmcv's own test (tests/test_ops/test_chamfer_distance.py, CUDA-only there).
MMCV_SET1 = [
    [[1.3, 9.39], [2.3, 9.39], [2.3, 10.39], [1.3, 10.39]],
    [[1.0, 9.39], [3.0, 9.39], [3.0, 10.39], [1.0, 10.39]],
    [[1.6, 9.99], [2.3, 9.99], [2.3, 10.39], [1.6, 10.39]],
]
MMCV_SET2 = [
    [[1.0, 9.39], [3.0, 9.39], [3.0, 10.39], [1.0, 10.39]],
    [[1.3, 9.39], [2.3, 9.39], [2.3, 10.39], [1.3, 10.39]],
    [[1.0, 9.39], [3.0, 9.39], [3.0, 10.39], [1.0, 10.39]],
]
MMCV_DIST1 = [[0.09, 0.49, 0.49, 0.09], [0.09, 0.49, 0.49, 0.09], [0.52, 0.65, 0.49, 0.36]]
MMCV_DIST2 = [[0.09, 0.49, 0.49, 0.09], [0.09, 0.49, 0.49, 0.09], [0.72, 0.85, 0.49, 0.36]]
MMCV_GRAD1 = [
    [[0.6, 0.0], [-1.4, 0.0], [-1.4, 0.0], [0.6, 0.0]],
    [[-0.6, 0.0], [1.4, 0.0], [1.4, 0.0], [-0.6, 0.0]],
    [[1.2, -0.8], [-1.4, -0.8], [-1.4, 0.0], [1.2, 0.0]],
]
MMCV_GRAD2 = [
    [[-0.6, 0.0], [1.4, 0.0], [1.4, 0.0], [-0.6, 0.0]],
    [[0.6, 0.0], [-1.4, 0.0], [-1.4, 0.0], [0.6, 0.0]],
    [[0.0, 0.0], [0.0, 0.0], [2.8, 0.8], [-2.4, 0.8]],
]


def ref_nearest(src: list, dst: list) -> tuple:
    """Per batch element and point of ``src``: (squared distance, first nearest index)."""
    dists, idxs = [], []
    for s_set, d_set in zip(src, dst):
        row_d, row_i = [], []
        for x, y in s_set:
            d = [(x - u) ** 2 + (y - v) ** 2 for u, v in d_set]
            best = min(range(len(d)), key=lambda j: (d[j], j))
            row_d.append(d[best])
            row_i.append(best)
        dists.append(row_d)
        idxs.append(row_i)
    return dists, idxs


def random_sets(b: int, n: int, m: int, dtype: torch.dtype = torch.float64) -> tuple:
    gen = torch.Generator().manual_seed(n * 100 + m)
    p = torch.rand(b, n, 2, generator=gen, dtype=torch.float64) * 10
    q = torch.rand(b, m, 2, generator=gen, dtype=torch.float64) * 10
    return p.to(dtype), q.to(dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    p = torch.tensor(MMCV_SET1, device=device, requires_grad=True)
    q = torch.tensor(MMCV_SET2, device=device, requires_grad=True)
    dist1, dist2, idx1, idx2 = chamfer_distance(p, q)
    dist1.backward(torch.ones_like(dist1))
    assert dist1.dtype == torch.float32 and idx1.dtype == torch.int32
    for got, expected in [(dist1, MMCV_DIST1), (dist2, MMCV_DIST2)]:
        torch.testing.assert_close(got.detach().cpu(), torch.tensor(expected))
    torch.testing.assert_close(p.grad.cpu(), torch.tensor(MMCV_GRAD1))
    torch.testing.assert_close(q.grad.cpu(), torch.tensor(MMCV_GRAD2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n, m", [(7, 5), (5, 9), (1, 1)])
def test_matches_reference(device: str, n: int, m: int) -> None:
    p, q = random_sets(3, n, m)
    dist1, dist2, idx1, idx2 = chamfer_distance(p.to(device), q.to(device))
    ref_d1, ref_i1 = ref_nearest(p.tolist(), q.tolist())
    ref_d2, ref_i2 = ref_nearest(q.tolist(), p.tolist())
    torch.testing.assert_close(dist1.cpu(), torch.tensor(ref_d1, dtype=torch.float64))
    torch.testing.assert_close(dist2.cpu(), torch.tensor(ref_d2, dtype=torch.float64))
    assert idx1.tolist() == ref_i1 and idx2.tolist() == ref_i2


def test_backward_is_mmcvs_formula() -> None:
    # grad p_i = 2 g1_i (p_i - q_idx1[i]) - sum over j with idx2[j] == i of 2 g2_j (q_j - p_i).
    p, q = random_sets(2, 6, 4)
    p.requires_grad_()
    q.requires_grad_()
    dist1, dist2, idx1, idx2 = chamfer_distance(p, q)
    g1, g2 = torch.rand(2, 6, dtype=torch.float64), torch.rand(2, 4, dtype=torch.float64)
    gp, gq = torch.autograd.grad((dist1 * g1).sum() + (dist2 * g2).sum(), (p, q))
    ref_p, ref_q = torch.zeros_like(p), torch.zeros_like(q)
    for b in range(2):
        for i in range(6):
            j = int(idx1[b, i])
            diff = 2 * g1[b, i] * (p[b, i] - q[b, j]).detach()
            ref_p[b, i] += diff
            ref_q[b, j] -= diff
        for j in range(4):
            i = int(idx2[b, j])
            diff = 2 * g2[b, j] * (q[b, j] - p[b, i]).detach()
            ref_q[b, j] += diff
            ref_p[b, i] -= diff
    torch.testing.assert_close(gp, ref_p)
    torch.testing.assert_close(gq, ref_q)


def test_gradcheck() -> None:
    p, q = random_sets(2, 5, 3)
    p.requires_grad_()
    q.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: chamfer_distance(a, b)[:2], (p, q))


def test_ties_take_the_first_index() -> None:
    p = torch.tensor([[[0.0, 0.0]]])
    q = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]])
    _, _, idx1, idx2 = chamfer_distance(p, q)
    assert idx1.tolist() == [[3]] and idx2.tolist() == [[0] * 5]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_points_are_never_nearest(device: str, bad: float) -> None:
    # mmcv's kernel: a NaN (or inf) distance never wins `d < best`, best starting at 1e10
    # with index 0.
    p = torch.tensor([[[bad, 1.0], [0.0, 0.0]]], device=device, requires_grad=True)
    q = torch.tensor([[[1.0, 0.0], [2.0, 2.0]]], device=device, requires_grad=True)
    dist1, dist2, idx1, idx2 = chamfer_distance(p, q)
    assert dist2.tolist() == [[1.0, 8.0]] and idx2.tolist() == [[1, 1]]
    assert dist1.tolist() == [[1e10, 1.0]] and idx1.tolist() == [[0, 0]]
    (dist1.sum() + dist2.sum()).backward()
    # Only the finite pairs: p1 is nearest to both q, and q0 nearest to p1.
    assert p.grad.tolist() == [[[0.0, 0.0], [-2.0 - 2 - 4, -4.0]]]
    assert q.grad.tolist() == [[[2.0 + 2, 0.0], [4.0, 4.0]]]
    # Every point of the other set non-finite: mmcv's initial values.
    dist1, _, idx1, _ = chamfer_distance(q[:, :1].detach(), p[:, :1].detach())
    assert dist1.tolist() == [[1e10]] and idx1.tolist() == [[0]]


def test_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    p, q = random_sets(2, 9, 7)
    full = chamfer_distance(p, q)
    monkeypatch.setattr(sys.modules["mmpar.compat.ops.chamfer_distance"], "_CHUNK_ELEMENTS", 10)
    for got, expected in zip(chamfer_distance(p, q), full):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("b, n, m", [(0, 3, 4), (2, 0, 4), (2, 3, 0)])
def test_empty(b: int, n: int, m: int) -> None:
    p = torch.rand(b, n, 2, requires_grad=True)
    q = torch.rand(b, m, 2, requires_grad=True)
    dist1, dist2, idx1, idx2 = chamfer_distance(p, q)
    assert dist1.shape == idx1.shape == (b, n) and dist2.shape == idx2.shape == (b, m)
    # A set with no points leaves the other's distances and indices 0, as mmcv's kernel.
    assert not dist1.any() and not idx1.any() and not dist2.any() and not idx2.any()
    (dist1.sum() + dist2.sum()).backward()
    assert p.grad.shape == p.shape and not p.grad.any()
    assert q.grad.shape == q.shape and not q.grad.any()


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(dtype: torch.dtype) -> None:
    p, q = random_sets(2, 6, 5, dtype)
    p.requires_grad_()
    dist1, dist2, idx1, idx2 = chamfer_distance(p, q)
    assert dist1.dtype == dist2.dtype == dtype
    ref = chamfer_distance(p.float(), q.float())
    torch.testing.assert_close(dist1, ref[0].to(dtype))
    assert torch.equal(idx1, ref[2]) and torch.equal(idx2, ref[3])
    dist1.sum().backward()
    assert p.grad.dtype == dtype


def test_bad_input() -> None:
    p = torch.rand(2, 3, 2)
    with pytest.raises(ValueError, match=r"chamfer_distance: xyz2 must have shape \(B, N, 2\)"):
        chamfer_distance(p, torch.rand(2, 3, 3))
    with pytest.raises(ValueError, match="same batch size, got 2 and 1"):
        chamfer_distance(p, torch.rand(1, 3, 2))
    with pytest.raises(TypeError, match="same dtype, got torch.float32 and torch.float64"):
        chamfer_distance(p, p.double())
    with pytest.raises(TypeError, match="xyz1 must be a floating-point tensor, got torch.int64"):
        chamfer_distance(p.long(), p)
