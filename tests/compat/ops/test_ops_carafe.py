"""mmpar.compat.ops.carafe against CARAFE's definition, written as explicit loops."""

from __future__ import annotations

import math

import pytest
import torch

from mmpar.compat.ops.carafe import (
    CARAFE,
    CARAFEFunction,
    CARAFENaive,
    CARAFENaiveFunction,
    CARAFEPack,
    carafe,
    carafe_naive,
)
from tests.compat.ops._reference import DEVICES, HALF_DTYPES


def ref_carafe(features, masks, k, group_size, s):
    """out[n, c, y, x] = sum_ij masks[n, g*k*k + i*k + j, y, x] * feat[n, c, y//s + i - r, ...]."""
    n_b, chans, h, w = features.shape
    feat, mask = features.tolist(), masks.tolist()
    r = (k - 1) // 2
    per_group = chans // group_size
    out = torch.zeros(n_b, chans, h * s, w * s, dtype=torch.float64)
    for n in range(n_b):
        for c in range(chans):
            g = c // per_group
            for y in range(h * s):
                for x in range(w * s):
                    total = 0.0
                    for i in range(k):
                        for j in range(k):
                            fy, fx = y // s + i - r, x // s + j - r
                            if 0 <= fy < h and 0 <= fx < w:
                                total += mask[n][g * k * k + i * k + j][y][x] * feat[n][c][fy][fx]
                    out[n, c, y, x] = total
    return out


def _inputs(n, c, h, w, k, group_size, s, device="cpu", dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(n, c, h, w, generator=g, dtype=torch.float64)
    masks = torch.randn(n, k * k * group_size, h * s, w * s, generator=g, dtype=torch.float64)
    return features.to(device, dtype), masks.to(device, dtype)


CASES = [
    # n, c, h, w, kernel_size, group_size, scale_factor
    (2, 4, 3, 4, 3, 2, 2),
    (1, 2, 4, 3, 5, 1, 2),  # the window is wider than the map
    (1, 3, 2, 2, 1, 3, 3),
    (2, 2, 3, 3, 3, 1, 1),
    (1, 4, 2, 3, 3, 4, 2),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
def test_forward_matches_definition(device, case):
    n, c, h, w, k, groups, s = case
    features, masks = _inputs(*case, device=device)
    expected = ref_carafe(features.cpu(), masks.cpu(), k, groups, s)
    out = carafe(features, masks, k, groups, s)
    assert out.shape == (n, c, h * s, w * s) and out.device == features.device
    torch.testing.assert_close(out.cpu(), expected)
    torch.testing.assert_close(carafe_naive(features, masks, k, groups, s).cpu(), expected)
    torch.testing.assert_close(CARAFEFunction.apply(features, masks, k, groups, s).cpu(), expected)
    torch.testing.assert_close(
        CARAFENaiveFunction.apply(features, masks, k, groups, s).cpu(), expected
    )
    torch.testing.assert_close(CARAFE(k, groups, s)(features, masks).cpu(), expected)
    torch.testing.assert_close(CARAFENaive(k, groups, s)(features, masks).cpu(), expected)


@pytest.mark.parametrize("case", [(1, 2, 2, 3, 3, 2, 2), (1, 1, 3, 2, 5, 1, 1)])
def test_gradcheck(case):
    _, _, _, _, k, groups, s = case
    features, masks = _inputs(*case)
    assert torch.autograd.gradcheck(
        lambda f, m: carafe(f, m, k, groups, s),
        (features.requires_grad_(), masks.requires_grad_()),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_match_definition(device):
    # d out / d masks[n, g*k*k + i*k + j, y, x] = feat[...]; d out / d feat sums mask weights.
    case = (1, 2, 3, 3, 3, 2, 2)
    _, _, h, w, k, groups, s = case
    features, masks = _inputs(*case, device=device)
    features.requires_grad_()
    masks.requires_grad_()
    upstream = torch.randn(1, 2, h * s, w * s, dtype=torch.float64, device=device)
    (carafe(features, masks, k, groups, s) * upstream).sum().backward()
    up = upstream.cpu().tolist()
    grad_f = torch.zeros(1, 2, h, w, dtype=torch.float64)
    grad_m = torch.zeros(1, k * k * groups, h * s, w * s, dtype=torch.float64)
    feat, mask = features.detach().cpu(), masks.detach().cpu()
    for c in range(2):
        g = c // (2 // groups)
        for y in range(h * s):
            for x in range(w * s):
                for i in range(k):
                    for j in range(k):
                        fy, fx = y // s + i - 1, x // s + j - 1
                        if 0 <= fy < h and 0 <= fx < w:
                            mc = g * k * k + i * k + j
                            grad_f[0, c, fy, fx] += mask[0, mc, y, x] * up[0][c][y][x]
                            grad_m[0, mc, y, x] += feat[0, c, fy, fx] * up[0][c][y][x]
    torch.testing.assert_close(features.grad.cpu(), grad_f)
    torch.testing.assert_close(masks.grad.cpu(), grad_m)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision(device, dtype):
    features, masks = _inputs(2, 4, 4, 5, 3, 2, 2, device=device, dtype=torch.float32)
    masks = masks.softmax(1)
    ref = carafe(features, masks, 3, 2, 2)
    f, m = features.to(dtype).requires_grad_(), masks.to(dtype).requires_grad_()
    out = carafe(f, m, 3, 2, 2)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=3e-2)
    out.float().sum().backward()
    assert f.grad.dtype == dtype and m.grad.dtype == dtype


def test_mixed_dtypes_promote():
    features, masks = _inputs(1, 2, 2, 2, 3, 1, 2, dtype=torch.float32)
    out = carafe(features, masks.half(), 3, 1, 2)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, carafe(features, masks.half().float(), 3, 1, 2))


def test_empty_batch_and_integral_floats():
    features, masks = _inputs(0, 2, 3, 3, 3, 1, 2)
    assert carafe(features, masks, 3, 1, 2).shape == (0, 2, 6, 6)
    features, masks = _inputs(1, 2, 3, 3, 3, 1, 2)
    torch.testing.assert_close(carafe(features, masks, 3, 1, 2.0), carafe(features, masks, 3, 1, 2))


def test_bad_arguments():
    features, masks = _inputs(1, 4, 3, 3, 3, 2, 2)
    with pytest.raises(ValueError, match="masks must be"):
        carafe(features, masks[:, :9], 3, 2, 2)
    with pytest.raises(ValueError, match="masks must be"):
        carafe(features, masks[..., :5], 3, 2, 2)
    with pytest.raises(ValueError, match="masks must be"):
        carafe(features, masks, 3, 2, 3)
    with pytest.raises(ValueError, match="divisible by group_size"):
        carafe(features, torch.zeros(1, 27, 6, 6, dtype=torch.float64), 3, 3, 2)
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        carafe(features, torch.zeros(1, 8, 6, 6, dtype=torch.float64), 2, 2, 2)
    with pytest.raises(ValueError, match="scale_factor must be >= 1"):
        carafe(features, masks, 3, 2, 0)
    with pytest.raises(TypeError, match="scale_factor must be an int"):
        carafe(features, masks, 3, 2, 1.5)
    with pytest.raises(TypeError, match="features must be a floating-point tensor"):
        carafe(features.long(), masks, 3, 2, 2)
    with pytest.raises(TypeError, match="group_size must be an int"):
        CARAFE(3, 2.0, 2)
    # mmcv asserts these: the errors are AssertionErrors too.
    with pytest.raises(AssertionError, match="scale_factor must be >= 1"):
        carafe(features, masks, 3, 2, 0)
    with pytest.raises(AssertionError, match="masks must be"):
        carafe(features, masks[:, :9], 3, 2, 2)
    with pytest.raises(AssertionError, match=r"masks must be .* = \(1, 18, 6, 6\)"):
        carafe(features, torch.cat([masks, masks]), 3, 2, 2)  # another batch size
    with pytest.raises(AssertionError, match="divisible by group_size"):
        carafe(features, torch.zeros(1, 27, 6, 6, dtype=torch.float64), 3, 3, 2)
    with pytest.raises(ValueError, match="group_size must be >= 1"):
        carafe(features, masks, 3, 0, 2)
    with pytest.raises(ValueError, match=r"features must be 4-D \(N, C, H, W\)"):
        carafe(features[0], masks, 3, 2, 2)


def test_nan_features_reach_the_windows_that_read_them():
    features, masks = _inputs(1, 1, 3, 3, 3, 1, 1)
    features[0, 0, 0, 0] = float("nan")
    out = carafe(features, masks, 3, 1, 1)
    assert out[0, 0, :2, :2].isnan().all()
    assert not out[0, 0, 2].isnan().any() and not out[0, 0, :, 2].isnan().any()


def test_empty_batch_backward():
    features, masks = _inputs(0, 2, 3, 3, 3, 1, 2)
    features.requires_grad_(), masks.requires_grad_()
    carafe(features, masks, 3, 1, 2).sum().backward()
    assert features.grad.shape == features.shape and masks.grad.shape == masks.shape
    pack = CARAFEPack(2, 2, up_kernel=3, compressed_channels=4)
    x = torch.zeros(0, 2, 3, 3, requires_grad=True)
    pack(x).sum().backward()
    assert x.grad.shape == x.shape


def test_pack_bad_arguments():
    with pytest.raises(AssertionError, match="up_kernel must be odd"):
        CARAFEPack(4, 2, up_kernel=4)
    with pytest.raises(AssertionError, match="channels .3. must be divisible by up_group .2."):
        CARAFEPack(3, 2, up_group=2)
    with pytest.raises(ValueError, match="scale_factor must be >= 1"):
        CARAFEPack(4, 0)
    with pytest.raises(TypeError, match="compressed_channels must be an int"):
        CARAFEPack(4, 2, compressed_channels=None)
    with pytest.raises(ValueError, match=r"x must be \(N, channels=4, H, W\)"):
        CARAFEPack(4, 2, compressed_channels=4)(torch.zeros(1, 3, 2, 2))


def test_non_finite_sizes():
    """A NaN or inf size is a TypeError naming it (Python's int() raised before)."""
    features, masks = _inputs(1, 2, 3, 3, 3, 1, 2)
    for name, args in (
        ("kernel_size", (math.nan, 1, 2)),
        ("group_size", (3, math.inf, 2)),
        ("scale_factor", (3, 1, -math.inf)),
    ):
        with pytest.raises(TypeError, match=f"carafe: {name} must be an int"):
            carafe(features, masks, *args)
    with pytest.raises(TypeError, match="CARAFEPack: scale_factor must be an int"):
        CARAFEPack(4, math.nan)


def test_pack_integral_float_sizes_and_int_input():
    """Integral float sizes are taken as ints (nn.Conv2d refused them); an integer input is
    a TypeError naming x."""
    layer = CARAFEPack(4, 2.0, up_kernel=3.0, compressed_channels=8.0)
    assert layer.scale_factor == 2 and isinstance(layer.scale_factor, int)
    assert layer(torch.randn(1, 4, 3, 3)).shape == (1, 4, 6, 6)
    with pytest.raises(TypeError, match="CARAFEPack: x must be floating point"):
        layer(torch.zeros(1, 4, 3, 3, dtype=torch.long))


# ------------------------------------------------------------------------------ CARAFEPack


def test_pack_structure_and_init():
    torch.manual_seed(0)
    pack = CARAFEPack(16, 2, up_kernel=3, up_group=2, compressed_channels=8)
    assert sorted(pack.state_dict()) == [
        "channel_compressor.bias",
        "channel_compressor.weight",
        "content_encoder.bias",
        "content_encoder.weight",
    ]
    assert pack.channel_compressor.weight.shape == (8, 16, 1, 1)
    assert pack.content_encoder.weight.shape == (3 * 3 * 2 * 2 * 2, 8, 3, 3)
    assert pack.content_encoder.padding == (1, 1)
    assert torch.count_nonzero(pack.channel_compressor.bias) == 0
    assert torch.count_nonzero(pack.content_encoder.bias) == 0
    bound = math.sqrt(6.0 / (16 + 8))  # xavier uniform, gain 1
    assert pack.channel_compressor.weight.abs().max() <= bound
    assert pack.channel_compressor.weight.abs().max() > bound / 2
    assert 0.0005 < pack.content_encoder.weight.std() < 0.002  # normal(0, 0.001)
    dilated = CARAFEPack(4, 2, encoder_kernel=5, encoder_dilation=2)
    assert dilated.content_encoder.padding == (4, 4)
    assert dilated.content_encoder.dilation == (2, 2)
    assert dilated.compressed_channels == 64


def test_pack_forward_matches_definition():
    torch.manual_seed(1)
    pack = CARAFEPack(4, 2, up_kernel=3, up_group=2, compressed_channels=3).double()
    torch.nn.init.normal_(pack.content_encoder.weight, std=0.5)  # weights far from uniform
    x = torch.randn(1, 4, 3, 2, dtype=torch.float64)
    raw = pack.content_encoder(pack.channel_compressor(x))  # (1, 3*3*2 * 2*2, 3, 2)
    # pixel shuffle by hand: channel c * 4 + a * 2 + b -> channel c at (2y + a, 2x + b)
    shuffled = torch.zeros(1, 18, 6, 4, dtype=torch.float64)
    for c in range(18):
        for a in range(2):
            for b in range(2):
                shuffled[0, c, a::2, b::2] = raw[0, c * 4 + a * 2 + b]
    mask = torch.cat([shuffled[:, :9].softmax(1), shuffled[:, 9:].softmax(1)], dim=1)
    torch.testing.assert_close(pack.kernel_normalizer(raw), mask)
    torch.testing.assert_close(pack(x), ref_carafe(x.detach(), mask.detach(), 3, 2, 2))
    assert pack(x).shape == (1, 4, 6, 4)


def test_pack_backward_and_half():
    pack = CARAFEPack(4, 2, up_kernel=3, compressed_channels=4)
    x = torch.randn(2, 4, 3, 3, requires_grad=True)
    pack(x).square().sum().backward()
    assert x.grad is not None and pack.content_encoder.weight.grad is not None
    out = pack.half()(x.detach().half())
    assert out.dtype == torch.float16 and out.shape == (2, 4, 6, 6)
