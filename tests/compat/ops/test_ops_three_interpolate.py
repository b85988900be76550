"""mmpar.compat.ops.three_interpolate against the weighted sum of three features, by loops."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.three_interpolate import three_interpolate
from tests.compat.ops._points_reference import scalar_type
from tests.compat.ops._reference import DEVICES

# mmcv's own test (tests/test_ops/test_three_interpolate.py).
FEATURES = [
    [
        [2.4350, 4.7516, 4.4995, 2.4350, 2.4350, 2.4350],
        [3.1236, 2.6278, 3.0447, 3.1236, 3.1236, 3.1236],
        [2.6732, 2.8677, 2.6436, 2.6732, 2.6732, 2.6732],
        [0.0124, 7.0150, 7.0199, 0.0124, 0.0124, 0.0124],
        [0.3207, 0.0000, 0.3411, 0.3207, 0.3207, 0.3207],
    ],
    [
        [0.0000, 0.9544, 2.4532, 0.0000, 0.0000, 0.0000],
        [0.5346, 1.9176, 1.4715, 0.5346, 0.5346, 0.5346],
        [0.0000, 0.2744, 2.0842, 0.0000, 0.0000, 0.0000],
        [0.3414, 1.5063, 1.6209, 0.3414, 0.3414, 0.3414],
        [0.5814, 0.0103, 0.0000, 0.5814, 0.5814, 0.5814],
    ],
]
IDX = [
    [[0, 1, 2], [2, 3, 4], [2, 3, 4], [0, 1, 2], [0, 1, 2], [0, 1, 3]],
    [[0, 2, 3], [1, 3, 4], [2, 1, 4], [0, 2, 4], [0, 2, 4], [0, 1, 2]],
]
THIRD = [3.3333e-01] * 3
WEIGHT = [
    [THIRD, [1.0, 5.8155e-08, 2.2373e-08], [1.0, 1.7737e-08, 1.7356e-08], THIRD, THIRD, THIRD],
    [THIRD, [1.0, 1.3651e-08, 7.7312e-09], [1.0, 1.7148e-08, 1.4070e-08], THIRD, THIRD, THIRD],
]
EXPECTED = [
    [
        [3.8953e00, 4.4995e00, 4.4995e00, 3.8953e00, 3.8953e00, 3.2072e00],
        [2.9320e00, 3.0447e00, 3.0447e00, 2.9320e00, 2.9320e00, 2.9583e00],
        [2.7281e00, 2.6436e00, 2.6436e00, 2.7281e00, 2.7281e00, 2.7380e00],
        [4.6824e00, 7.0199e00, 7.0199e00, 4.6824e00, 4.6824e00, 2.3466e00],
        [2.2060e-01, 3.4110e-01, 3.4110e-01, 2.2060e-01, 2.2060e-01, 2.1380e-01],
    ],
    [
        [8.1773e-01, 9.5440e-01, 2.4532e00, 8.1773e-01, 8.1773e-01, 1.1359e00],
        [8.4689e-01, 1.9176e00, 1.4715e00, 8.4689e-01, 8.4689e-01, 1.3079e00],
        [6.9473e-01, 2.7440e-01, 2.0842e00, 6.9473e-01, 6.9473e-01, 7.8619e-01],
        [7.6789e-01, 1.5063e00, 1.6209e00, 7.6789e-01, 7.6789e-01, 1.1562e00],
        [3.8760e-01, 1.0300e-02, 8.3569e-09, 3.8760e-01, 3.8760e-01, 1.9723e-01],
    ],
]


def inputs(b: int, c: int, m: int, n: int, dtype: torch.dtype = torch.float64) -> tuple:
    gen = torch.Generator().manual_seed(b * 100 + n)
    features = torch.randn(b, c, m, generator=gen, dtype=torch.float64).to(dtype)
    indices = torch.randint(0, max(m, 1), (b, n, 3), generator=gen, dtype=torch.int32)
    weight = torch.rand(b, n, 3, generator=gen, dtype=torch.float64).to(dtype)
    return features, indices, weight


def reference(features: torch.Tensor, indices: torch.Tensor, weight: torch.Tensor) -> list:
    """The kernel's ``w0 * f[i0] + w1 * f[i1] + w2 * f[i2]``, one output at a time, in NumPy
    scalars of the inputs' dtype (each product and sum rounded in it, left to right)."""
    t = scalar_type(features.dtype)
    b, c, _ = features.shape
    out = [[[0.0] * indices.shape[1] for _ in range(c)] for _ in range(b)]
    for bi in range(b):
        for ci in range(c):
            f = [t(v) for v in features[bi, ci].tolist()]
            for ni, (i, w) in enumerate(zip(indices[bi].tolist(), weight[bi].tolist())):
                value = t(w[0]) * f[i[0]] + t(w[1]) * f[i[1]] + t(w[2]) * f[i[2]]
                out[bi][ci][ni] = float(value)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_mmcv_numbers(device: str, dtype: torch.dtype) -> None:
    features = torch.tensor(FEATURES, dtype=dtype, device=device)
    idx = torch.tensor(IDX, dtype=torch.int32, device=device)
    weight = torch.tensor(WEIGHT, dtype=dtype, device=device)
    out = three_interpolate(features, idx, weight)
    assert out.dtype == dtype and out.shape == (2, 5, 6)
    torch.testing.assert_close(out.cpu(), torch.tensor(EXPECTED, dtype=dtype), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_matches_reference(device: str, dtype: torch.dtype) -> None:
    features, indices, weight = inputs(2, 4, 7, 9, dtype)
    out = three_interpolate(features.to(device), indices.to(device), weight.to(device))
    ref = torch.tensor(reference(features, indices, weight), dtype=dtype)
    assert torch.equal(out.cpu(), ref)
    assert torch.equal(three_interpolate(features, indices.long(), weight), out.cpu())


def test_backward_is_mmcvs() -> None:
    # grad features[b, c, i] = sum over (n, j) with indices[b, n, j] == i of g[b, c, n] * w;
    # none to weight.
    features, indices, weight = inputs(2, 3, 5, 8)
    features.requires_grad_()
    weight.requires_grad_()
    grad_out = torch.rand(2, 3, 8, dtype=torch.float64)
    three_interpolate(features, indices, weight).backward(grad_out)
    ref = torch.zeros(2, 3, 5, dtype=torch.float64)
    for b in range(2):
        for n in range(8):
            for j in range(3):
                ref[b, :, indices[b, n, j]] += grad_out[b, :, n] * weight[b, n, j].detach()
    torch.testing.assert_close(features.grad, ref)
    assert weight.grad is None


def test_gradcheck() -> None:
    features, indices, weight = inputs(2, 3, 4, 6)
    features.requires_grad_()
    assert torch.autograd.gradcheck(lambda f: three_interpolate(f, indices, weight), (features,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b, c, m, n", [(0, 2, 3, 4), (2, 0, 3, 4), (2, 3, 0, 0), (2, 3, 4, 0)])
def test_empty(device: str, b: int, c: int, m: int, n: int) -> None:
    features, indices, weight = (t.to(device) for t in inputs(b, c, m, n))
    features.requires_grad_()
    out = three_interpolate(features, indices, weight)
    assert out.shape == (b, c, n)
    out.sum().backward()
    assert features.grad.shape == features.shape and not features.grad.any()


def test_non_finite_propagate() -> None:
    features = torch.tensor([[[1.0, float("nan"), float("inf")]]])
    idx = torch.tensor([[[0, 0, 0], [0, 1, 0], [0, 2, 0], [0, 2, 2]]], dtype=torch.int32)
    weight = torch.tensor([[[1.0, 1.0, 1.0], [1.0, 0.0, 1.0], [1.0, 1.0, 0.0], [1, 1, -1.0]]])
    out = three_interpolate(features, idx, weight)[0, 0].tolist()
    assert out[0] == 3.0 and out[1] != out[1] and out[2] == float("inf") and out[3] != out[3]


def test_bad_input() -> None:
    features, indices, weight = inputs(2, 3, 4, 5, torch.float32)
    with pytest.raises(TypeError, match="three_interpolate: indices must be an int32"):
        three_interpolate(features, indices.float(), weight)
    with pytest.raises(TypeError, match="weight must have the dtype of features"):
        three_interpolate(features, indices, weight.double())
    with pytest.raises(ValueError, match=r"indices must have shape \(B, N, 3\), found \(2, 5, 2\)"):
        three_interpolate(features, indices[..., :2], weight)
    with pytest.raises(ValueError, match="must agree in B and N"):
        three_interpolate(features, indices, weight[:, :4])
    bad = indices.clone()
    bad[1, 2, 0] = 4
    with pytest.raises(
        ValueError, match=r"indices must be in \[0, 4\) .* found values in \[0, 4\]"
    ):
        three_interpolate(features, bad, weight)
    bad[1, 2, 0] = -1
    with pytest.raises(ValueError, match=r"found values in \[-1, 3\]"):
        three_interpolate(features, bad, weight)
