"""mmpar.compat.ops.gather_points against a plain Python gather and scatter-add."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.gather_points import gather_points
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

# mmcv's own test (tests/test_ops/test_gather_points.py, CUDA-only there).
MMCV_FEATURES = [
    [
        [-1.6095, -0.1029, -0.8876, -1.2447, -2.4031, 0.3708, -1.1586, -1.4967, -0.4800, 0.2252],
        [1.9138, 3.4979, 1.6854, 1.5631, 3.6776, 3.1154, 2.1705, 2.5221, 2.0411, 3.1446],
        [-1.4173, 0.3073, -1.4339, -1.4340, -1.2770, -0.2867, -1.4162, -1.4044, -1.4245, -1.4074],
    ],
    [
        [0.2160, 0.0842, 0.3661, -0.2749, -0.4909, -0.6066, -0.8773, -0.0745, -0.9496, 0.1434],
        [1.3644, 1.8087, 1.6855, 1.9563, 1.2746, 1.9662, 0.9566, 1.8778, 1.1437, 1.3639],
        [-0.7172, 0.1692, 0.2241, 0.0721, -0.7540, 0.0462, -0.6227, 0.3223, -0.6944, -0.5294],
    ],
]
MMCV_IDX = [[0, 1, 4, 0, 0, 0], [0, 5, 6, 0, 0, 0]]
MMCV_OUT = [
    [
        [-1.6095, -0.1029, -2.4031, -1.6095, -1.6095, -1.6095],
        [1.9138, 3.4979, 3.6776, 1.9138, 1.9138, 1.9138],
        [-1.4173, 0.3073, -1.2770, -1.4173, -1.4173, -1.4173],
    ],
    [
        [0.2160, -0.6066, -0.8773, 0.2160, 0.2160, 0.2160],
        [1.3644, 1.9662, 0.9566, 1.3644, 1.3644, 1.3644],
        [-0.7172, 0.0462, -0.6227, -0.7172, -0.7172, -0.7172],
    ],
]


def ref_gather(features: list, idx: list) -> list:
    return [[[row[j] for j in idx[b]] for row in features[b]] for b in range(len(idx))]


def ref_grad(grad_out: list, idx: list, n: int) -> list:
    grad = [[[0.0] * n for _ in grad_out[b]] for b in range(len(idx))]
    for b, rows in enumerate(grad_out):
        for c, row in enumerate(rows):
            for j, g in enumerate(row):
                grad[b][c][idx[b][j]] += g  # mmcv's atomicAdd
    return grad


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    features = torch.tensor(MMCV_FEATURES, device=device)
    idx = torch.tensor(MMCV_IDX, dtype=torch.int32, device=device)
    out = gather_points(features, idx)
    assert out.dtype == torch.float32 and out.device.type == device
    torch.testing.assert_close(out.cpu(), torch.tensor(MMCV_OUT))
    half = gather_points(features.half(), idx)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.cpu(), torch.tensor(MMCV_OUT).half())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_matches_reference(device: str, index_dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(3, 4, 7, generator=gen, dtype=torch.float64)
    idx = torch.randint(0, 7, (3, 9), generator=gen)
    x = features.to(device).requires_grad_()
    out = gather_points(x, idx.to(device, index_dtype))
    assert out.tolist() == ref_gather(features.tolist(), idx.tolist())
    grad_out = torch.randn(3, 4, 9, generator=gen, dtype=torch.float64)
    out.backward(grad_out.to(device))
    expected = torch.tensor(ref_grad(grad_out.tolist(), idx.tolist(), 7), dtype=torch.float64)
    torch.testing.assert_close(x.grad.cpu(), expected)


def test_gradcheck() -> None:
    features = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([[0, 4, 4, 1], [2, 2, 2, 3]], dtype=torch.int32)
    assert torch.autograd.gradcheck(lambda f: gather_points(f, idx), (features,))


@pytest.mark.parametrize("b, c, n, m", [(0, 3, 5, 4), (2, 0, 5, 4), (2, 3, 5, 0), (2, 3, 0, 0)])
def test_empty(b: int, c: int, n: int, m: int) -> None:
    features = torch.rand(b, c, n, requires_grad=True)
    out = gather_points(features, torch.zeros(b, m, dtype=torch.int32))
    assert out.shape == (b, c, m)
    out.sum().backward()
    assert features.grad.shape == features.shape and not features.grad.any()


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(dtype: torch.dtype) -> None:
    features = torch.randn(2, 3, 6).to(dtype).requires_grad_()
    idx = torch.tensor([[5, 0, 5], [1, 1, 2]])
    out = gather_points(features, idx)
    assert out.dtype == dtype and torch.equal(out, gather_points(features.float(), idx).to(dtype))
    out.sum().backward()
    assert features.grad.dtype == dtype and features.grad[0, 0, 5] == 2


def test_non_finite_values_are_copied() -> None:
    features = torch.tensor([[[float("nan"), float("inf"), 1.0]]])
    out = gather_points(features, torch.tensor([[1, 0, 2]], dtype=torch.int32))
    assert out[0, 0, 0] == float("inf") and out[0, 0, 1].isnan() and out[0, 0, 2] == 1


def test_bad_input() -> None:
    features = torch.rand(2, 3, 5)
    idx = torch.zeros(2, 4, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"gather_points: indices must lie in \[0, N\) = \[0, 5\)"):
        gather_points(features, torch.tensor([[0, 5], [1, 2]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"found values from -1 to 2"):
        gather_points(features, torch.tensor([[0, -1], [1, 2]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"gather_points: features must have shape \(B, C, N\)"):
        gather_points(features[0], idx)
    with pytest.raises(ValueError, match=r"indices must have shape \(B, M\) with features' B=2"):
        gather_points(features, idx[:1])
    with pytest.raises(TypeError, match="gather_points: indices must be an integer tensor"):
        gather_points(features, idx.float())
    with pytest.raises(TypeError, match="features must be a floating-point tensor, found"):
        gather_points(features.long(), idx)
