"""mmpar.compat.ops.cc_attention against an explicit per-position loop."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.cc_attention import NEG_INF_DIAG, CrissCrossAttention
from tests.compat.ops._reference import DEVICES, HALF_DTYPES


def _reference(module: CrissCrossAttention, x: torch.Tensor) -> torch.Tensor:
    """Each position attends to its column (without itself) and its row (with itself)."""
    q, k, v = module.query_conv(x), module.key_conv(x), module.value_conv(x)
    batch, _, height, width = x.shape
    rows = []
    for b in range(batch):
        for y in range(height):
            for px in range(width):
                places = [(i, px) for i in range(height) if i != y]
                places += [(y, j) for j in range(width)]
                energy = torch.stack([q[b, :, y, px] @ k[b, :, i, j] for i, j in places])
                attn = energy.softmax(0)
                rows.append(sum(a * v[b, :, i, j] for a, (i, j) in zip(attn, places)))
    out = torch.stack(rows).view(batch, height, width, -1).permute(0, 3, 1, 2)
    return module.gamma.scale * out + x


def _module(channels=16, seed=0):
    torch.manual_seed(seed)
    module = CrissCrossAttention(channels).double()
    with torch.no_grad():
        module.gamma.scale.fill_(0.7)
    return module


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("height, width", [(2, 3), (1, 3), (3, 1)])
def test_forward_and_grads_match_the_loop(device, height, width):
    module = _module()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 16, height, width, generator=gen, dtype=torch.float64)
    ours_x = x.to(device).detach().clone().requires_grad_()
    ref_x = x.clone().requires_grad_()
    ours_module = _module().to(device)
    out = ours_module(ours_x)
    ref = _reference(module, ref_x)
    assert out.shape == x.shape and out.is_contiguous() and out.device == ours_x.device
    torch.testing.assert_close(out.cpu(), ref)
    grad = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    out.backward(grad.to(device))
    ref.backward(grad)
    torch.testing.assert_close(ours_x.grad.cpu(), ref_x.grad)
    for (name, a), b in zip(ours_module.named_parameters(), module.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, msg=name)


def test_gradcheck():
    module = _module(channels=8)
    x = torch.randn(1, 8, 2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))


def test_gamma_starts_at_zero():
    module = CrissCrossAttention(16)
    x = torch.randn(1, 16, 3, 3)
    assert module.gamma.scale.item() == 0.0
    torch.testing.assert_close(module(x), x, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_dtypes_close_to_float32(device, dtype):
    module = _module().float().to(device)
    x = torch.randn(2, 16, 3, 4, device=device)
    expected = module(x)
    out = module.to(dtype)(x.to(dtype))
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected, atol=0.1, rtol=0.05)


def test_mmcv_names_and_repr():
    module = CrissCrossAttention(16)
    assert sorted(module.state_dict()) == sorted(
        [f"{c}_conv.{p}" for c in ("query", "key", "value") for p in ("weight", "bias")]
        + ["gamma.scale"]
    )
    assert module.query_conv.out_channels == 2 and module.value_conv.out_channels == 16
    assert repr(module) == "CrissCrossAttention(in_channels=16)"


def test_neg_inf_diag():
    diag = NEG_INF_DIAG(3, torch.device("cpu"))
    assert diag.shape == (3, 3) and diag.dtype == torch.float32
    assert torch.isneginf(diag.diagonal()).all()
    assert diag.masked_fill(torch.eye(3, dtype=torch.bool), 0).abs().sum() == 0


def test_bad_input_raises():
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        CrissCrossAttention(16)(torch.randn(16, 3, 3))
    with pytest.raises(ValueError, match=r"C = in_channels = 16, found shape \(1, 8, 3, 3\)"):
        CrissCrossAttention(16)(torch.randn(1, 8, 3, 3))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        CrissCrossAttention(16)(torch.zeros(1, 16, 3, 3, dtype=torch.long))
    for channels in (0, 7):  # 7: query and key of no channels, a deep conv error in forward
        with pytest.raises(ValueError, match="in_channels must be an int >= 8"):
            CrissCrossAttention(channels)


@pytest.mark.parametrize("shape", [(0, 16, 3, 4), (1, 16, 0, 4), (1, 16, 3, 0)])
def test_empty_forward_and_backward(shape):
    x = torch.zeros(shape, requires_grad=True)
    out = CrissCrossAttention(16)(x)
    assert out.shape == shape
    out.sum().backward()
    assert x.grad.shape == shape


def test_nan_reaches_its_row_and_column():
    module = CrissCrossAttention(16)
    with torch.no_grad():
        module.gamma.scale.fill_(1.0)
    x = torch.randn(1, 16, 3, 4)
    x[0, 0, 1, 2] = float("nan")
    reached = module(x)[0, 0].isnan()
    expected = torch.zeros(3, 4, dtype=torch.bool)
    expected[1, :] = expected[:, 2] = True
    assert torch.equal(reached, expected)
