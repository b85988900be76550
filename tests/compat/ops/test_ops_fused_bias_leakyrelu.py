"""mmpar.compat.ops.fused_bias_leakyrelu against a per-element loop of its definition."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from mmpar.compat.ops.fused_bias_leakyrelu import (
    FusedBiasLeakyReLU,
    bias_leakyrelu_ref,
    fused_bias_leakyrelu,
)
from tests.compat.ops._reference import DEVICES, HALF_DTYPES


def reference(x: torch.Tensor, bias, slope: float, scale: float):
    """``scale * leaky(x + bias[c])`` and its slope ``d out / d x``, element by element."""
    out, slopes = torch.zeros_like(x), torch.zeros_like(x)
    for index in itertools.product(*(range(s) for s in x.shape)):
        v = float(x[index]) + (float(bias[index[1]]) if bias is not None else 0.0)
        out[index] = scale * (v if v > 0 else v * slope)
        slopes[index] = scale * (1.0 if v > 0 else slope)
    return out, slopes


def inputs(shape, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    bias = torch.randn(shape[1], generator=gen, dtype=torch.float64)
    return x.to(dtype), bias.to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 4), (2, 3, 5)])
@pytest.mark.parametrize("slope, scale", [(0.2, 2**0.5), (0.1, 1.0), (0.0, 3.0)])
def test_matches_loop_forward_and_backward(device, shape, slope, scale):
    x, bias = inputs(shape)
    out_ref, slopes = reference(x, bias, slope, scale)
    xd = x.to(device).requires_grad_()
    bd = bias.to(device).requires_grad_()
    out = fused_bias_leakyrelu(xd, bd, slope, scale)
    torch.testing.assert_close(out.cpu(), out_ref, rtol=1e-12, atol=1e-12)
    grad = torch.randn(shape, dtype=torch.float64)
    out.backward(grad.to(device))
    dims = [d for d in range(len(shape)) if d != 1]
    torch.testing.assert_close(xd.grad.cpu(), grad * slopes)
    torch.testing.assert_close(bd.grad.cpu(), (grad * slopes).sum(dims))


def test_zero_takes_the_negative_slope():
    # mmcv's CUDA backward tests out > 0: at input + bias == 0 the slope is negative_slope.
    x = torch.tensor([[0.5, -0.5]], dtype=torch.float64, requires_grad=True)
    bias = torch.tensor([-0.5, 0.5], dtype=torch.float64)
    fused_bias_leakyrelu(x, bias, 0.25, 2.0).sum().backward()
    assert x.grad.tolist() == [[0.5, 0.5]]


def test_gradcheck_and_gradgradcheck():
    x, bias = inputs((2, 3, 2, 2), seed=1)
    x = (x + 0.1 * x.sign()).requires_grad_()  # away from the kink at -bias
    bias = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    func = lambda a, b: fused_bias_leakyrelu(a, b, 0.2, 2**0.5)  # noqa: E731
    assert torch.autograd.gradcheck(func, (x, bias))
    assert torch.autograd.gradgradcheck(func, (x, bias))


def test_r1_penalty_double_backward():
    # StyleGAN2's R1: the penalty's gradient flows through the first derivative's
    # grad_output only (the second derivative in the input is 0), as mmcv's Function.
    x, bias = inputs((2, 3, 4), seed=2)
    x.requires_grad_()
    bias.requires_grad_()
    weight = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    out = (fused_bias_leakyrelu(x, bias) * weight).sum()
    (grad_x,) = torch.autograd.grad(out, x, create_graph=True)
    penalty = grad_x.square().sum()
    penalty.backward()
    _, slopes = reference(x.detach(), bias.detach(), 0.2, 2**0.5)
    torch.testing.assert_close(weight.grad, 2 * weight.detach() * slopes.square())
    assert x.grad is None or torch.count_nonzero(x.grad) == 0


def test_module_and_bias_none():
    module = FusedBiasLeakyReLU(3, negative_slope=0.1, scale=2.0)
    assert module.bias.shape == (3,) and torch.count_nonzero(module.bias) == 0
    assert (module.negative_slope, module.scale) == (0.1, 2.0)
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(module(x), fused_bias_leakyrelu(x, None, 0.1, 2.0))
    out_ref, _ = reference(x.double(), None, 0.1, 2.0)
    torch.testing.assert_close(fused_bias_leakyrelu(x, None, 0.1, 2.0), out_ref.float())
    torch.testing.assert_close(bias_leakyrelu_ref(x, None, 0.1, 2.0), out_ref.float())
    x.requires_grad_()
    module(x).sum().backward()
    assert module.bias.grad.shape == (3,)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(device, dtype):
    x, bias = inputs((2, 4, 3, 3), seed=3, dtype=torch.float32)
    out = fused_bias_leakyrelu(x.to(device, dtype), bias.to(device))  # a float32 bias
    assert out.dtype == dtype
    expected = fused_bias_leakyrelu(x.to(dtype).float(), bias).to(dtype)
    torch.testing.assert_close(out.cpu(), expected)


def test_empty():
    x = torch.zeros(0, 3, 4, 4, requires_grad=True)
    bias = torch.zeros(3, requires_grad=True)
    out = fused_bias_leakyrelu(x, bias)
    assert out.shape == (0, 3, 4, 4)
    out.sum().backward()
    assert x.grad.shape == x.shape and bias.grad.tolist() == [0.0, 0.0, 0.0]


def test_bad_input():
    x = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="fused_bias_leakyrelu: scale must be > 0, got 0"):
        fused_bias_leakyrelu(x, torch.zeros(3), scale=0)
    with pytest.raises(ValueError, match=r"bias must have shape \(C,\) = \(3,\) .* got \(4,\)"):
        fused_bias_leakyrelu(x, torch.zeros(4))
    with pytest.raises(ValueError, match=r"input must have shape \(N, C, \.\.\.\), got \(3,\)"):
        fused_bias_leakyrelu(torch.zeros(3), torch.zeros(3))
    with pytest.raises(TypeError, match="input must be floating point, found torch.int64"):
        fused_bias_leakyrelu(x.long(), torch.zeros(3))
    with pytest.raises(TypeError, match="negative_slope must be a float, got str"):
        fused_bias_leakyrelu(x, torch.zeros(3), "0.2")
    with pytest.raises(TypeError, match="bias must be a torch.Tensor, got list"):
        fused_bias_leakyrelu(x, [0.0, 0.0, 0.0])


def test_non_finite_slope_or_scale_and_bad_num_channels():
    """A NaN or infinite slope or scale is refused (NaN and inf outputs before); so is a
    num_channels that is not an int >= 0 (torch.zeros' errors before)."""
    x, bias = torch.randn(2, 3, 4), torch.zeros(3)
    cases = [(math.nan, 1.0, "negative_slope"), (-math.inf, 1.0, "negative_slope")]
    for slope, scale, name in [*cases, (0.2, math.inf, "scale")]:
        with pytest.raises(ValueError, match=f"fused_bias_leakyrelu: {name} must be finite"):
            fused_bias_leakyrelu(x, bias, slope, scale)
    with pytest.raises(ValueError, match="fused_bias_leakyrelu: negative_slope must be finite"):
        FusedBiasLeakyReLU(3, math.nan)(x)
    for channels, error in ((-1, ValueError), (3.0, TypeError), (None, TypeError)):
        with pytest.raises(error, match="FusedBiasLeakyReLU: num_channels must be an int"):
            FusedBiasLeakyReLU(channels)


def test_signature_matches_mmcv():
    import ast
    import inspect
    from pathlib import Path

    mmcv = pytest.importorskip("mmcv")
    tree = ast.parse((Path(mmcv.__file__).parent / "ops" / "fused_bias_leakyrelu.py").read_text())
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for ours in (fused_bias_leakyrelu, bias_leakyrelu_ref):
        func = funcs[ours.__name__]
        theirs = [a.arg for a in func.args.args], [ast.unparse(d) for d in func.args.defaults]
        params = list(inspect.signature(ours).parameters.values())
        assert [p.name for p in params] == theirs[0]
        assert [p.default for p in params if p.default is not p.empty] == [0.2, 2**0.5]
        assert theirs[1] == ["0.2", "2 ** 0.5"]
