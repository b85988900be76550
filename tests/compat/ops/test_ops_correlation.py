"""mmpar.compat.ops.correlation against a loop over its definition."""

from __future__ import annotations

import itertools
import sys

import pytest
import torch

from mmpar.compat.ops.correlation import Correlation, CorrelationFunction
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

# mmcv's own test (tests/test_ops/test_correlation.py, CUDA-only there).
MMCV_INPUT1 = [[[[1.0, 2.0, 3.0], [0.0, 1.0, 2.0], [3.0, 5.0, 2.0]]]]
MMCV_INPUT2 = [[[[1.0, 2.0, 3.0], [3.0, 1.0, 2.0], [8.0, 5.0, 2.0]]]]
MMCV_OUT = [[[[[1.0, 4.0, 9.0], [0.0, 1.0, 4.0], [24.0, 25.0, 4.0]]]]]

# (kernel_size, max_displacement, stride, padding, dilation, dilation_patch)
CONFIGS = [
    (1, 1, 1, 0, 1, 1),
    (1, 0, 1, 0, 1, 1),
    (3, 2, 2, 1, 2, 2),
    (2, 1, 3, 2, 1, 3),
    (1, 3, 2, 0, 1, 2),
    ((1, 3), 2, (1, 2), (0, 1), (1, 1), (2, 1)),
]


def pair(v) -> tuple:
    return v if isinstance(v, tuple) else (v, v)


def ref_correlation(x1: torch.Tensor, x2: torch.Tensor, config: tuple) -> torch.Tensor:
    """The definition, one output element at a time, in float64."""
    (kh, kw), md = pair(config[0]), config[1]
    (sh, sw), (ph_, pw_), (dh, dw), (dph, dpw) = (pair(v) for v in config[2:])
    b_n, _, h_n, w_n = x1.shape
    p = 2 * md + 1
    oh = (h_n + 2 * ph_ - dh * (kh - 1) - 1) // sh + 1
    ow = (w_n + 2 * pw_ - dw * (kw - 1) - 1) // sw + 1
    a, b = x1.double(), x2.double()
    out = torch.zeros(b_n, p, p, oh, ow, dtype=torch.float64)
    for n, py, px, h, w in itertools.product(range(b_n), range(p), range(p), range(oh), range(ow)):
        total = 0.0
        for i, j in itertools.product(range(kh), range(kw)):
            y1, x1_ = h * sh - ph_ + i * dh, w * sw - pw_ + j * dw
            y2, x2_ = y1 + (py - md) * dph, x1_ + (px - md) * dpw
            if 0 <= y1 < h_n and 0 <= y2 < h_n and 0 <= x1_ < w_n and 0 <= x2_ < w_n:
                total += float((a[n, :, y1, x1_] * b[n, :, y2, x2_]).sum())
        out[n, py, px, h, w] = total
    return out


def layer(config: tuple) -> Correlation:
    return Correlation(*config)


def random_maps(shape: tuple, dtype: torch.dtype = torch.float64, seed: int = 0) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).to(dtype), torch.randn(shape, generator=gen).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_mmcv_numbers(device: str, dtype: torch.dtype) -> None:
    x1 = torch.tensor(MMCV_INPUT1, dtype=dtype, device=device, requires_grad=True)
    x2 = torch.tensor(MMCV_INPUT2, dtype=dtype, device=device, requires_grad=True)
    out = Correlation(max_displacement=0)(x1, x2)
    out.backward(torch.ones_like(out))
    assert out.dtype == dtype and out.shape == (1, 1, 1, 3, 3)
    assert torch.equal(out.detach(), torch.tensor(MMCV_OUT, dtype=dtype, device=device))
    assert torch.equal(x1.grad, x2.detach()) and torch.equal(x2.grad, x1.detach())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", CONFIGS)
def test_matches_reference(device: str, config: tuple) -> None:
    x1, x2 = random_maps((2, 3, 7, 9))
    out = layer(config)(x1.to(device), x2.to(device))
    torch.testing.assert_close(out.cpu(), ref_correlation(x1, x2, config))


@pytest.mark.parametrize("config", CONFIGS[:4])
def test_gradcheck(config: tuple) -> None:
    x1, x2 = random_maps((1, 2, 5, 6))
    args = (x1.requires_grad_(), x2.requires_grad_())
    assert torch.autograd.gradcheck(layer(config), args, fast_mode=True)


@pytest.mark.parametrize("config", [(1, 1, 1, 0, 1, 1), (1, 2, 2, 1, 1, 2), (2, 1, 1, 1, 2, 1)])
def test_wide_maps_span_several_tiles(config: tuple) -> None:
    # More output columns than one tile of products: the tiles' seams, forward and backward.
    x1, x2 = random_maps((1, 2, 3, 45))
    out = layer(config)(x1, x2)
    torch.testing.assert_close(out, ref_correlation(x1, x2, config))
    args = (x1[:, :, :2].requires_grad_(), x2[:, :, :2].requires_grad_())
    assert torch.autograd.gradcheck(layer(config), args, fast_mode=True)


def test_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    config = (2, 1, 1, 1, 1, 2)
    x1, x2 = random_maps((2, 3, 6, 20))
    grads = []
    for chunk in (None, 1):
        if chunk is not None:
            module = sys.modules["mmpar.compat.ops.flow.correlation_tiles"]
            monkeypatch.setattr(module, "CHUNK_ELEMENTS", chunk)
        a, b = x1.clone().requires_grad_(), x2.clone().requires_grad_()
        out = layer(config)(a, b)
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out))
        grads.append((out.detach(), a.grad, b.grad))
    for got, expected in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, expected)


def test_function_apply_pads_by_default() -> None:
    # mmcv's CorrelationFunction.apply defaults to padding=1, the module to 0.
    x1, x2 = random_maps((1, 2, 4, 5))
    out = CorrelationFunction.apply(x1, x2)
    torch.testing.assert_close(out, ref_correlation(x1, x2, (1, 1, 1, 1, 1, 1)))
    assert out.shape == (1, 3, 3, 6, 7)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_reads_outside_give_exact_zeros(bad: float) -> None:
    x1, x2 = random_maps((1, 2, 4, 4))
    x1[0, :, 0, 0] = bad
    out = Correlation(max_displacement=1)(x1, x2)
    # (0, 0) displaced up or left reads outside input2: mmcv's kernel skips it.
    assert out[0, 0, :, 0, 0].eq(0).all() and out[0, :, 0, 0, 0].eq(0).all()
    assert not torch.isfinite(out[0, 1, 1, 0, 0])


@pytest.mark.parametrize("shape", [(0, 2, 4, 4), (2, 0, 4, 4)])
def test_empty(shape: tuple) -> None:
    x1, x2 = (t.requires_grad_() for t in random_maps(shape))
    out = Correlation(max_displacement=1)(x1, x2)
    assert out.shape == (shape[0], 3, 3, 4, 4) and not out.any()
    out.sum().backward()
    assert x1.grad.shape == shape and not x1.grad.any()


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(dtype: torch.dtype) -> None:
    x1, x2 = random_maps((1, 3, 5, 6), dtype)
    x1.requires_grad_()
    out = Correlation(max_displacement=1)(x1, x2)
    assert out.dtype == dtype
    expected = Correlation(max_displacement=1)(x1.float(), x2.float()).to(dtype)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    assert x1.grad.dtype == dtype


def test_repr() -> None:
    assert repr(Correlation(max_displacement=4)) == (
        "Correlation(kernel_size=1, max_displacement=4, stride=1, padding=0, dilation=1, "
        "dilation_patch=1)"
    )


def test_bad_input() -> None:
    x1, x2 = random_maps((1, 2, 4, 4), torch.float32)
    with pytest.raises(ValueError, match=r"Correlation: input1 and input2 must have one shape"):
        Correlation()(x1, x2[:, :, :3])
    with pytest.raises(TypeError, match="must have one dtype, found torch.float32 and"):
        Correlation()(x1, x2.double())
    with pytest.raises(TypeError, match="input2 must be a floating-point tensor"):
        Correlation()(x1, x2.long())
    with pytest.raises(ValueError, match=r"the input padded \(4 \+ 2 \* 0\) must be at least"):
        Correlation(kernel_size=3, dilation=2)(x1, x2)
    with pytest.raises(ValueError, match="max_displacement must be an int >= 0, found -1"):
        Correlation(max_displacement=-1)(x1, x2)
    with pytest.raises(ValueError, match="dilation_patch must be an int >= 1, found 0"):
        Correlation(dilation_patch=0)(x1, x2)
    with pytest.raises(TypeError, match="stride must be an int, found 1.5"):
        Correlation(stride=1.5)(x1, x2)
