"""mmpar.compat.ops.tin_shift against per-element loops of mmcv's forward and backward kernels."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.tin_shift import TINShift, TINShiftFunction, tin_shift
from tests.compat.ops._reference import DEVICES, HALF_DTYPES


def shifted(data: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """mmcv's kernel, forward and backward alike: ``out[n, t + s, c] = data[n, t, c]``."""
    n, frames, channels, hw = data.shape
    per_group = channels // shift.shape[1]
    out = torch.zeros_like(data)
    for b in range(n):
        for c in range(channels):
            s = int(shift[b, c // per_group])
            for t in range(frames):
                if 0 <= t + s < frames:
                    for k in range(hw):
                        out[b, t + s, c, k] = data[b, t, c, k]
    return out


def random_case(seed: int, shape=(2, 5, 6, 3), groups=3, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    data = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    shift = torch.randint(-6, 7, (shape[0], groups), generator=gen, dtype=torch.int32)
    return data, shift


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_matches_loop_forward_and_backward(device, seed, groups):
    data, shift = random_case(seed, groups=groups)
    x = data.to(device).requires_grad_()
    out = TINShift()(x, shift.to(device))
    torch.testing.assert_close(out.cpu(), shifted(data, shift), rtol=0, atol=0)
    grad = torch.randn(data.shape, dtype=torch.float64)
    out.backward(grad.to(device))
    # mmcv's backward kernel is its forward kernel: the gradient moves the same way.
    torch.testing.assert_close(x.grad.cpu(), shifted(grad, shift), rtol=0, atol=0)


def test_mmcv_gradient_is_not_the_adjoint():
    # One group shifted by one frame: out = (0, x0, x1); mmcv's gradient of sum(out) is
    # (0, 1, 1), the true one (1, 1, 0). Kept as mmcv, which mmcv's own test expects.
    x = torch.ones(1, 3, 1, 1, dtype=torch.float64, requires_grad=True)
    out = tin_shift(x, torch.tensor([[1]], dtype=torch.int32))
    assert out.flatten().tolist() == [0.0, 1.0, 1.0]
    out.sum().backward()
    assert x.grad.flatten().tolist() == [0.0, 1.0, 1.0]
    # With every shift 0 the op is the identity, and its gradient the true one.
    data, _ = random_case(5, shape=(2, 3, 4, 2), groups=2)
    zero = torch.zeros(2, 2, dtype=torch.int32)
    assert torch.autograd.gradcheck(lambda d: tin_shift(d, zero), (data.requires_grad_(),))


def test_int64_shift_and_large_shifts():
    data, shift = random_case(6)
    torch.testing.assert_close(tin_shift(data, shift.long()), tin_shift(data, shift))
    far = torch.tensor([[7, -9, 5], [-5, 100, 0]], dtype=torch.int32)
    out = tin_shift(data, far)
    torch.testing.assert_close(out, shifted(data, far), rtol=0, atol=0)
    assert not out[0].any() and not out[1, :, :4].any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES + [torch.float32])
def test_dtypes_are_exact(device, dtype):
    data, shift = random_case(7, dtype=dtype)
    x = data.to(device).requires_grad_()
    out = tin_shift(x, shift.to(device))
    assert out.dtype == dtype
    torch.testing.assert_close(out.cpu(), shifted(data, shift), rtol=0, atol=0)
    out.backward(torch.ones_like(out))
    assert x.grad.dtype == dtype


def test_empty():
    for shape in [(0, 4, 6, 3), (2, 0, 6, 3), (2, 4, 6, 0)]:
        x = torch.zeros(shape, requires_grad=True)
        out = tin_shift(x, torch.zeros(shape[0], 3, dtype=torch.int32))
        assert out.shape == shape
        out.sum().backward()
        assert x.grad.shape == shape


def test_bad_input():
    # mmcv's own ValueError cases: C not a multiple of the groups, mismatched batches.
    with pytest.raises(ValueError, match="C = 4 must be a positive multiple of shift's G = 3"):
        tin_shift(torch.rand(2, 3, 4, 2), torch.zeros(2, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="C = 4 must be a positive multiple of shift's G = 5"):
        tin_shift(torch.rand(2, 3, 4, 2), torch.rand(2, 5))
    with pytest.raises(ValueError, match="shift must have input's batch size 1 in dim 0, got 2"):
        tin_shift(torch.rand(1, 3, 4, 2), torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"input must have shape \(N, T, C, HW\), got \(3, 4\)"):
        tin_shift(torch.rand(3, 4), torch.zeros(3, 2, dtype=torch.int32))
    with pytest.raises(TypeError, match="tin_shift: shift must be an integer tensor, got torch.f"):
        tin_shift(torch.rand(2, 3, 4, 2), torch.rand(2, 2))
    with pytest.raises(TypeError, match="tin_shift: input must be floating point"):
        tin_shift(torch.zeros(2, 3, 4, 2, dtype=torch.long), torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(TypeError, match="shift must be a torch.Tensor, got list"):
        TINShiftFunction.apply(torch.rand(2, 3, 4, 2), [[0, 0], [0, 0]])
