"""mmpar.compat.ops.masked_conv against an explicit masked-convolution loop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mmpar.compat.ops.backend import UnsupportedOpError
from mmpar.compat.ops.masked_conv import MaskedConv2d, masked_conv2d
from tests.compat.ops._reference import DEVICES, HALF_DTYPES


def reference(features, mask, weight, bias, padding):
    """Where mask > 0 (indexed by output position): bias + the stride-1 convolution; else 0."""
    _, channels, height, width = features.shape
    out_ch, _, kh, kw = weight.shape
    out_h, out_w = height + 2 * padding - kh + 1, width + 2 * padding - kw + 1
    out = torch.zeros(1, out_ch, out_h, out_w, dtype=features.dtype)
    for y in range(min(out_h, height)):
        for x in range(min(out_w, width)):
            if mask[0, y, x] <= 0:
                continue
            for o in range(out_ch):
                acc = float(bias[o]) if bias is not None else 0.0
                for c in range(channels):
                    for i in range(kh):
                        for j in range(kw):
                            yy, xx = y - padding + i, x - padding + j
                            if 0 <= yy < height and 0 <= xx < width:
                                acc += float(weight[o, c, i, j] * features[0, c, yy, xx])
                out[0, o, y, x] = acc
    return out


def make(channels=2, out_ch=3, k=3, size=(5, 6), device="cpu", dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(1, channels, *size, generator=gen, dtype=torch.float64)
    mask = (torch.rand(1, *size, generator=gen) > 0.5).double() * 2 - 0.5  # 1.5 or -0.5
    weight = torch.randn(out_ch, channels, k, k, generator=gen, dtype=torch.float64)
    bias = torch.randn(out_ch, generator=gen, dtype=torch.float64)
    return tuple(t.to(device, dtype) for t in (features, mask, weight, bias))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("k", "padding"), [(3, 1), (1, 0), (3, 0), (3, 2)])
def test_matches_reference(device, k, padding):
    features, mask, weight, bias = make(k=k, device=device)
    if padding == 0 and k == 3:
        mask[:, -2:] = 0  # the output is 2 smaller: keep the mask inside it
        mask[:, :, -2:] = 0
    out = masked_conv2d(features, mask, weight, bias, padding)
    expected = reference(features.cpu(), mask.cpu(), weight.cpu(), bias.cpu(), padding)
    assert out.shape == expected.shape
    torch.testing.assert_close(out.cpu(), expected)


def test_masked_out_positions_are_zero_not_bias():
    features, mask, weight, bias = make()
    mask.zero_()
    mask[0, 1, 2] = 1
    out = masked_conv2d(features, mask, weight, bias + 100, 1)
    assert out[..., 1, 2].abs().min() > 50
    out[..., 1, 2] = 0
    assert not out.any()


def test_without_bias_and_empty_mask():
    features, mask, weight, _ = make()
    out = masked_conv2d(features, mask, weight, None, 1)
    torch.testing.assert_close(out, reference(features, mask, weight, None, 1))
    assert not masked_conv2d(features, torch.zeros_like(mask), weight, None, 1).any()


def test_mask_beyond_a_smaller_output_is_ignored():
    # Those positions have no output pixel (mmcv's kernel writes them elsewhere); checking
    # them would need a host sync.
    features, mask, weight, bias = make()
    mask.fill_(1)
    out = masked_conv2d(features, mask, weight, bias, 0)
    torch.testing.assert_close(out, reference(features, mask, weight, bias, 0))
    assert out.shape[2:] == (features.size(2) - 2, features.size(3) - 2)


def test_stride_other_than_1_is_unsupported():
    features, mask, weight, bias = make()
    with pytest.raises(UnsupportedOpError, match="stride"):
        masked_conv2d(features, mask, weight, bias, 1, 2)
    assert issubclass(UnsupportedOpError, NotImplementedError)


def test_no_gradients_as_mmcv():
    features, mask, weight, bias = make()
    features.requires_grad_()
    weight.requires_grad_()
    out = masked_conv2d(features, mask, weight, bias, 1)
    assert out.requires_grad
    out.sum().backward()
    assert features.grad is None and weight.grad is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_close_to_float32(device, dtype):
    features, mask, weight, bias = make(device=device, dtype=dtype)
    out = masked_conv2d(features, mask, weight, bias, 1)
    expected = masked_conv2d(features.float(), mask, weight.float(), bias.float(), 1)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected, rtol=3e-2, atol=3e-2)


def test_bad_arguments():
    features, mask, weight, bias = make()
    # mmcv asserts the shapes of features and mask: the errors are AssertionErrors too.
    with pytest.raises(AssertionError, match=r"features must be \(1, C, H, W\)"):
        masked_conv2d(features.expand(2, -1, -1, -1), mask, weight, bias, 1)
    with pytest.raises(AssertionError, match=r"mask must be \(1, H, W\)"):
        masked_conv2d(features, mask[:, 1:], weight, bias, 1)
    with pytest.raises(ValueError, match=r"mask must be \(1, H, W\)"):
        masked_conv2d(features, mask[0], weight, bias, 1)
    with pytest.raises(ValueError, match="padding must be an int >= 0"):
        masked_conv2d(features, mask, weight, bias, -1)
    with pytest.raises(ValueError, match="features are too small for the kernel"):
        masked_conv2d(features[..., :1, :1], mask[:, :1, :1], weight, bias, 0)
    with pytest.raises(ValueError, match="weight"):
        masked_conv2d(features, mask, weight[:, :1], bias, 1)
    with pytest.raises(ValueError, match="bias"):
        masked_conv2d(features, mask, weight, bias[:1], 1)
    with pytest.raises(TypeError, match="features"):
        masked_conv2d(features.long(), mask, weight, bias, 1)


def test_bad_weight_bias_and_mask():
    """A weight or bias that is not a float tensor, or on another device, and a complex
    mask, are one-line errors naming them (AttributeErrors and a deep error before)."""
    features, mask, weight, bias = make()
    for args, error, name in (
        ((weight.tolist(), bias), TypeError, "weight"),
        ((weight.long(), bias), TypeError, "weight"),
        ((weight, bias.tolist()), TypeError, "bias"),
        ((weight.to("meta"), bias), ValueError, "weight"),
        ((weight, bias.to("meta")), ValueError, "bias"),
    ):
        with pytest.raises(error, match=f"masked_conv2d: {name} must"):
            masked_conv2d(features, mask, *args, 1)
    with pytest.raises(TypeError, match="masked_conv2d: mask must be real-valued"):
        masked_conv2d(features, mask.to(torch.complex64), weight, bias, 1)


def test_no_output_channels():
    features, mask, weight, bias = make()
    out = masked_conv2d(features, mask, weight[:0], bias[:0], 1)
    assert out.shape == (1, 0, *features.shape[2:])


def test_module_without_mask_is_conv2d():
    layer = MaskedConv2d(2, 3, 3, stride=2, padding=1, dilation=2)
    assert isinstance(layer, nn.Conv2d)
    x = torch.randn(2, 2, 7, 7, requires_grad=True)
    torch.testing.assert_close(layer(x), nn.Conv2d.forward(layer, x))
    layer(x).sum().backward()
    assert layer.weight.grad is not None


def test_module_with_mask_uses_padding_only_as_mmcv():
    layer = MaskedConv2d(2, 3, 3, stride=2, padding=1, dilation=2).double()
    features, mask, _, _ = make()
    out = layer(features, mask)
    # mmcv's masked path passes the padding alone: stride 1, no dilation.
    expected = reference(features, mask, layer.weight.detach(), layer.bias.detach(), 1)
    torch.testing.assert_close(out, expected)


def test_module_with_mask_and_groups_is_unsupported():
    layer = MaskedConv2d(2, 2, 3, padding=1, groups=2)
    features, mask, _, _ = make(dtype=torch.float32)
    with pytest.raises(UnsupportedOpError, match="groups"):
        layer(features, mask)


def test_empty_map_gives_an_empty_output():
    features, mask, weight, bias = make()
    weight = weight[..., :1, :1]
    out = masked_conv2d(features[..., :0, :], mask[:, :0], weight, bias, 0)
    assert out.shape == (1, weight.size(0), 0, features.size(3))


def test_nan_features_reach_only_masked_outputs_that_read_them():
    features, mask, weight, bias = make()
    mask.zero_()
    mask[0, 0, 0] = mask[0, 3, 3] = 1
    features[0, 0, 0, 0] = float("nan")
    out = masked_conv2d(features, mask, weight, bias, 1)
    assert out[..., 0, 0].isnan().all() and not out[..., 3, 3].isnan().any()
    out[..., 0, 0] = 0
    out[..., 3, 3] = 0
    assert not out.any()
