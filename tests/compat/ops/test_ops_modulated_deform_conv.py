"""mmpar.compat.ops.modulated_deform_conv against a per-output-pixel reference of DCNv2."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mmpar.compat.ops.modulated_deform_conv import (
    ModulatedDeformConv2d,
    ModulatedDeformConv2dPack,
    modulated_deform_conv2d,
)
from tests.compat.ops._reference import (
    DEVICES,
    HALF_DTYPES,
    deform_conv_grad_reference,
    deform_conv_inputs,
    deform_conv_reference,
)

pytest.importorskip("torchvision")


def reference(inp, offset, mask, weight, bias, stride, padding, dilation, groups, dgroups):
    """DCNv2's definition, in ``modulated_deform_conv2d``'s argument order."""
    geometry = (stride, padding, dilation, groups, dgroups)
    return deform_conv_reference(inp, offset, weight, *geometry, mask=mask, bias=bias)


# (channels, out_channels, kernel, stride, padding, dilation, groups, deform_groups)
CASES = [
    (2, 3, 3, 1, 1, 1, 1, 1),
    (4, 4, 3, 2, 1, 1, 2, 2),
    (4, 2, 2, 1, 0, 2, 1, 2),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_forward_matches_reference(case, with_bias, device):
    inp, offset, mask, weight, bias = deform_conv_inputs(case, modulated=True, device=device)
    bias = bias if with_bias else None
    geometry = case[3:]
    out = modulated_deform_conv2d(inp, offset, mask, weight, bias, *geometry)
    cpu = (t.cpu() if t is not None else None for t in (inp, offset, mask, weight, bias))
    expected = reference(*cpu, *geometry)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-10, atol=1e-10)


def test_mask_layout_per_group_and_point():
    # Two deform groups of one channel, a 1x2 kernel: mask[g * 2 + k] scales point k of group g.
    inp = torch.arange(24.0, dtype=torch.float64).reshape(1, 2, 3, 4)
    weight = torch.ones(1, 2, 1, 2, dtype=torch.float64)
    offset = torch.zeros(1, 2 * 2 * 2, 3, 3, dtype=torch.float64)
    mask = torch.zeros(1, 4, 3, 3, dtype=torch.float64)
    mask[:, 3] = 1.0  # group 1 (channel 1), point 1 (column x + 1)
    out = modulated_deform_conv2d(inp, offset, mask, weight, None, 1, 0, 1, 1, 2)
    torch.testing.assert_close(out, inp[:, 1:, :, 1:])


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    inp, offset, mask, weight, bias = deform_conv_inputs(
        (4, 2, 3, 2, 1, 1, 2, 2), modulated=True, n_img=1, size=(4, 5), scale=1.5, device=device
    )
    tensors = tuple(t.requires_grad_() for t in (inp, offset, mask, weight, bias))
    # torchvision's CUDA backward adds with atomics: float64 sums in any order.
    assert torch.autograd.gradcheck(
        lambda *t: modulated_deform_conv2d(*t, 2, 1, 1, 2, 2),
        tensors,
        fast_mode=True,
        nondet_tol=1e-12 if device == "cuda" else 0.0,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_close_to_float32(device, dtype):
    tensors = deform_conv_inputs(
        CASES[1], modulated=True, dtype=torch.float32, device=device, scale=1.0
    )
    low = tuple(t.to(dtype) for t in tensors)
    out = modulated_deform_conv2d(*low, 2, 1, 1, 2, 2)
    expected = modulated_deform_conv2d(*(t.float() for t in low), 2, 1, 1, 2, 2)
    assert out.dtype == dtype
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    torch.testing.assert_close(out.float(), expected, rtol=tol, atol=tol)
    inp = low[0].clone().requires_grad_()
    modulated_deform_conv2d(inp, *low[1:], 2, 1, 1, 2, 2).sum().backward()
    assert inp.grad is not None and inp.grad.dtype == dtype


def test_mixed_precision_follows_offset_dtype():
    inp, offset, mask, weight, bias = deform_conv_inputs(
        CASES[0], modulated=True, dtype=torch.float32
    )
    out = modulated_deform_conv2d(inp, offset.half(), mask, weight, bias, 1, 1)
    assert out.dtype == torch.float16


def test_bad_arguments():
    inp, offset, mask, weight, bias = deform_conv_inputs(CASES[0], modulated=True)
    with pytest.raises(ValueError, match="mask"):
        modulated_deform_conv2d(inp, offset, mask[:, :-1], weight, bias, 1, 1)
    with pytest.raises(ValueError, match="offset"):
        modulated_deform_conv2d(inp, offset[:, :-1], mask, weight, bias, 1, 1)
    with pytest.raises(ValueError, match="bias"):
        modulated_deform_conv2d(inp, offset, mask, weight, bias[:-1], 1, 1)
    with pytest.raises(TypeError, match="mask"):
        modulated_deform_conv2d(inp, offset, mask.bool(), weight, bias, 1, 1)


def test_module_init_and_forward():
    torch.manual_seed(5)
    layer = ModulatedDeformConv2d(4, 4, 3, stride=2, padding=1, groups=2, deform_groups=2)
    torch.manual_seed(5)
    bound = 1 / math.sqrt(4 * 3 * 3)  # in_channels * kh * kw, groups ignored (as mmcv)
    expected = torch.empty(4, 2, 3, 3).uniform_(-bound, bound)
    torch.testing.assert_close(layer.weight.data, expected)
    assert layer.bias is not None and not layer.bias.any()
    assert layer.transposed is False and layer.output_padding == (0,)
    layer = layer.double()
    inp, offset, mask, _, _ = deform_conv_inputs(CASES[1], modulated=True)
    with torch.no_grad():
        layer.bias.normal_()
    out = layer(inp, offset, mask)
    expected = reference(
        inp, offset, mask, layer.weight.detach(), layer.bias.detach(), 2, 1, 1, 2, 2
    )
    torch.testing.assert_close(out, expected)


def test_module_bias_options():
    assert ModulatedDeformConv2d(2, 2, 3, bias=False).bias is None
    assert ModulatedDeformConv2d(2, 2, 3, bias="auto").bias is not None  # truthy, as mmcv
    with pytest.warns(DeprecationWarning, match="deformable_groups"):
        layer = ModulatedDeformConv2d(4, 2, 3, deformable_groups=2)
    assert layer.deform_groups == 2


@pytest.mark.parametrize("device", DEVICES)
def test_pack_starts_as_half_a_plain_conv(device):
    layer = ModulatedDeformConv2dPack(4, 6, 3, stride=2, padding=1, groups=2, deform_groups=2)
    layer = layer.to(device)
    assert layer.conv_offset.out_channels == 3 * 2 * 9
    assert not layer.conv_offset.weight.any() and not layer.conv_offset.bias.any()
    with torch.no_grad():
        layer.bias.normal_()
    x = torch.randn(2, 4, 7, 6, device=device, requires_grad=True)
    out = layer(x)
    # Zero offsets and a mask of sigmoid(0) = 0.5.
    conv = F.conv2d(x, layer.weight, stride=2, padding=1, groups=2)
    expected = 0.5 * conv + layer.bias[:, None, None]
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    assert layer.conv_offset.weight.grad is not None and layer.conv_offset.weight.grad.any()


def test_pack_splits_offsets_and_mask_as_mmcv():
    # conv_offset's channels: chunk 3 ways (o1, o2, m); offset = cat(o1, o2), mask = sigmoid(m).
    layer = ModulatedDeformConv2dPack(4, 2, 3, padding=1, deform_groups=2).double()
    per_chunk = 2 * 9
    values = torch.randn(3 * per_chunk, dtype=torch.float64)
    with torch.no_grad():
        layer.conv_offset.bias.copy_(values)
    x = torch.randn(1, 4, 4, 5, dtype=torch.float64)
    offset = values[: 2 * per_chunk, None, None].expand(1, -1, 4, 5)
    mask = torch.sigmoid(values[2 * per_chunk :, None, None]).expand(1, -1, 4, 5)
    expected = reference(x, offset, mask, layer.weight.detach(), layer.bias.detach(), 1, 1, 1, 1, 2)
    torch.testing.assert_close(layer(x), expected)


def test_pack_init_draws_as_mmcv():
    # mmcv initialises the weight twice (before and after conv_offset exists).
    torch.manual_seed(7)
    layer = ModulatedDeformConv2dPack(2, 2, 3)
    torch.manual_seed(7)
    bound = 1 / math.sqrt(2 * 9)
    torch.empty(2, 2, 3, 3).uniform_(-bound, bound)
    nn.Conv2d(2, 27, 3)
    expected = torch.empty(2, 2, 3, 3).uniform_(-bound, bound)
    torch.testing.assert_close(layer.weight.data, expected)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dcn = ModulatedDeformConv2dPack(2, 2, 3, padding=1)


def test_pack_loads_old_offset_keys_with_mmcv_loader():
    checkpoint = pytest.importorskip("mmcv.runner.checkpoint")
    source = _Net()
    with torch.no_grad():
        source.dcn.conv_offset.weight.normal_()
        source.dcn.conv_offset.bias.normal_()
    state = source.state_dict()
    old = {
        "dcn.weight": state["dcn.weight"],
        "dcn.bias": state["dcn.bias"],
        "dcn_offset.weight": state["dcn.conv_offset.weight"],
        "dcn_offset.bias": state["dcn.conv_offset.bias"],
    }
    target = _Net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpoint.load_state_dict(target, old, strict=False)
    for key, value in state.items():
        torch.testing.assert_close(target.state_dict()[key], value)


def test_pack_state_dict_round_trip():
    source = _Net()
    state = source.state_dict()
    assert state._metadata["dcn"]["version"] == 2  # type: ignore[attr-defined]
    target = _Net()
    target.load_state_dict(state)
    for key, value in state.items():
        torch.testing.assert_close(target.state_dict()[key], value)


def test_a_larger_offset_map_is_read_as_mmcvs_kernel_reads_its_memory():
    """mmdet's DyHead gives its upper-level DCNv2 the offsets of the level below (twice
    the size): mmcv reads each image's first C * out_h * out_w values, row-major."""
    case = (2, 3, 3, 1, 1, 1, 1, 1)
    inp, offset, mask, weight, bias = deform_conv_inputs(case, modulated=True, size=(3, 4))
    big_offset = torch.randn(2, offset.size(1), 6, 8, dtype=offset.dtype)
    big_mask = torch.rand(2, mask.size(1), 6, 8, dtype=mask.dtype)
    as_read = [t.reshape(2, -1)[:, : s.numel() // 2].reshape(s.shape) for t, s in
               ((big_offset, offset), (big_mask, mask))]  # fmt: skip
    out = modulated_deform_conv2d(inp, big_offset, big_mask, weight, bias, 1, 1, 1, 1, 1)
    expected = reference(inp, *as_read, weight, bias, 1, 1, 1, 1, 1)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_a_smaller_offset_map_is_refused_naming_the_shapes():
    case = (2, 3, 3, 1, 1, 1, 1, 1)
    inp, offset, mask, weight, bias = deform_conv_inputs(case, modulated=True, size=(6, 8))
    with pytest.raises(ValueError, match=r"offset must have shape \(2, 18, 6, 8\).*found"):
        modulated_deform_conv2d(inp, offset[:, :, :3, :4], mask, weight, bias, 1, 1, 1, 1, 1)


# (channels, out_channels, kernel, stride, padding, dilation, groups, deform_groups)
BORDER_CASES = [(2, 3, 3, 1, 1, 1, 1, 1), (4, 2, 2, 2, 1, 1, 2, 2)]


def _grads(inp, offset, mask, weight, bias, case, grad_out, conv=modulated_deform_conv2d):
    offset, mask = offset.clone().requires_grad_(), mask.clone().requires_grad_()
    out = conv(inp, offset, mask, weight, bias, *case[3:])
    out.backward(grad_out)
    return offset.grad, mask.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", BORDER_CASES)
@pytest.mark.parametrize("step", [1.0, 0.5, None])
def test_offset_and_mask_gradients_follow_mmcvs_border_rule(case, step, device):
    """Offsets on a grid of ``step`` put many samples exactly on the border (-1 or H):
    mmcv-full gives those no gradient, where torchvision's kernel alone does."""
    tensors = deform_conv_inputs(case, modulated=True, size=(3, 4), scale=1.5)
    inp, offset, mask, weight, bias = tensors
    if step is not None:
        offset = (offset / step).round() * step
    grad_out = torch.randn(
        inp.size(0), weight.size(0), offset.size(2), offset.size(3), dtype=torch.float64
    )
    on_device = [t.to(device) for t in (inp, offset, mask, weight, bias, grad_out)]
    grad_offset, grad_mask = _grads(*on_device[:5], case, on_device[5])
    expected_offset, expected_mask = deform_conv_grad_reference(
        inp, offset, weight, grad_out, *case[3:], mask=mask
    )
    torch.testing.assert_close(grad_offset.cpu(), expected_offset, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grad_mask.cpu(), expected_mask, rtol=1e-10, atol=1e-10)
    if step == 1.0:
        # The case reaches the border: torchvision's kernel alone gives another gradient.
        torchvision_ops = pytest.importorskip("torchvision.ops")

        def raw(i, o, m, w, b, *geometry):
            return torchvision_ops.deform_conv2d(i, o, w, b, geometry[0], geometry[1],
                                                 geometry[2], m)  # fmt: skip

        raw_offset, _ = _grads(inp, offset, mask, weight, bias, case, grad_out, conv=raw)
        assert not torch.allclose(raw_offset, expected_offset)


def test_pack_offset_gradient_from_zero_offsets_is_mmcvs():
    """A Pack starts at zero offsets: with padding 1 its border samples sit at -1 and H."""
    layer = ModulatedDeformConv2dPack(1, 1, 2, padding=1, bias=False).double()
    with torch.no_grad():
        layer.weight.fill_(1.0)
    x = torch.tensor([[[[1.0, 2.0, 3.0]] * 3]], dtype=torch.float64)
    out = layer(x)
    out.sum().backward()
    offset = torch.zeros(1, 8, 4, 4, dtype=torch.float64)
    mask = torch.full((1, 4, 4, 4), 0.5, dtype=torch.float64)
    grad_offset, grad_mask = deform_conv_grad_reference(
        x, offset, layer.weight.detach(), torch.ones_like(out), 1, 1, 1, 1, 1, mask=mask
    )
    # conv_offset's output channels: o1 (dy, dx of points 0, 1), o2 (points 2, 3), mask logits.
    grad_logits = torch.cat([grad_offset, grad_mask * 0.25], dim=1)  # sigmoid' (0) = 1/4
    padded = F.pad(x, (1, 1, 1, 1))
    expected = torch.einsum("nkyx,ncyxij->kcij", grad_logits,
                            padded.unfold(2, 2, 1).unfold(3, 2, 1))  # fmt: skip
    torch.testing.assert_close(layer.conv_offset.weight.grad, expected)
    torch.testing.assert_close(layer.conv_offset.bias.grad, grad_logits.sum((0, 2, 3)))


@pytest.mark.parametrize("device", DEVICES)
def test_nan_and_inf_offsets_read_zero_as_mmcv(device):
    """mmcv-full's bounds test is false for NaN and inf: that sample reads 0, no gradient."""
    inp, offset, mask, weight, bias = deform_conv_inputs(CASES[0], modulated=True, device=device)
    bad = offset.clone()
    bad[0, 0, 1, 2] = float("nan")  # point 0, dy
    bad[1, 5, 0, 0] = float("inf")  # point 2, dx
    bad[1, 6, 3, 3] = -float("inf")  # point 3, dy
    far = offset.clone()
    far[0, 0, 1, 2], far[1, 5, 0, 0], far[1, 6, 3, 3] = -100.0, 100.0, -100.0
    bad.requires_grad_()
    out = modulated_deform_conv2d(inp, bad, mask, weight, bias, 1, 1)
    torch.testing.assert_close(out, modulated_deform_conv2d(inp, far, mask, weight, bias, 1, 1))
    out.sum().backward()
    assert torch.isfinite(bad.grad).all()
    assert bad.grad[0, :2, 1, 2].eq(0).all() and bad.grad[1, 4:6, 0, 0].eq(0).all()


def test_nan_input_or_mask_propagates_as_in_a_convolution():
    inp, offset, mask, weight, bias = deform_conv_inputs(CASES[0], modulated=True)
    inp[0, 0, 2, 2] = float("nan")
    mask[1, 0, 0, 0] = float("nan")
    out = modulated_deform_conv2d(inp, offset.zero_(), mask, weight, bias, 1, 1)
    assert out[0, :, 1:4, 1:4].isnan().all() and out[1, :, 0, 0].isnan().all()
    assert not out[1, :, 2:, 2:].isnan().any()


def test_empty_batch_forward_and_backward():
    inp, offset, mask, weight, bias = deform_conv_inputs(CASES[1], modulated=True, n_img=0)
    tensors = [t.requires_grad_() for t in (inp, offset, mask, weight, bias)]
    out = modulated_deform_conv2d(*tensors, 2, 1, 1, 2, 2)
    assert out.shape == (0, 4, 3, 3)
    out.sum().backward()
    assert all(t.grad is not None and t.grad.shape == t.shape for t in tensors)
    assert not weight.grad.any()
    layer = ModulatedDeformConv2dPack(4, 4, 3, padding=1, deform_groups=2).double()
    x = torch.zeros(0, 4, 5, 5, dtype=torch.float64, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad.shape == x.shape


def test_bad_parameters_and_shapes_name_them():
    inp, offset, mask, weight, bias = deform_conv_inputs(CASES[0], modulated=True)
    call = modulated_deform_conv2d
    with pytest.raises(ValueError, match="stride must be an int >= 1"):
        call(inp, offset, mask, weight, bias, 0, 1)
    with pytest.raises(ValueError, match="padding must be an int >= 0"):
        call(inp, offset, mask, weight, bias, 1, -1)
    with pytest.raises(ValueError, match="dilation must be an int >= 1"):
        call(inp, offset, mask, weight, bias, 1, 1, (1, 0))
    with pytest.raises(ValueError, match="groups must be an int >= 1"):
        call(inp, offset, mask, weight, bias, 1, 1, 1, 0)
    with pytest.raises(TypeError, match="groups must be an int"):
        call(inp, offset, mask, weight, bias, 1, 1, 1, 1.5)
    with pytest.raises(ValueError, match="deform_groups must be an int >= 1"):
        call(inp, offset, mask, weight, bias, 1, 1, 1, 1, 0)
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 9, 5, 6\)"):
        call(inp, offset, mask[:1], weight, bias, 1, 1)  # another batch size
    with pytest.raises(ValueError, match=r"offset must have shape \(2, 18, 5, 6\)"):
        call(inp, offset[:1], mask, weight, bias, 1, 1)
    with pytest.raises(ValueError, match="weight must be 4D"):
        call(inp, offset, mask, weight[:, :, :0], bias, 1, 1)
    with pytest.raises(TypeError, match="input must be floating point"):
        call(inp.long(), offset, mask, weight, bias, 1, 1)
    with pytest.raises(TypeError, match="bias must be floating point"):
        call(inp, offset, mask, weight, bias.long(), 1, 1)


def test_module_and_pack_bad_arguments():
    with pytest.raises(ValueError, match="divisible by groups") as info:
        ModulatedDeformConv2d(3, 2, 3, groups=2)
    assert isinstance(info.value, AssertionError)  # mmcv asserts it
    with pytest.raises(ValueError, match="divisible by deform_groups"):
        ModulatedDeformConv2d(3, 2, 3, deform_groups=2)
    with pytest.raises(ValueError, match="kernel_size must be an int >= 1"):
        ModulatedDeformConv2d(2, 2, 0)
    with pytest.raises(ValueError, match="stride must be an int >= 1"):
        ModulatedDeformConv2dPack(2, 2, 3, stride=0)
    with pytest.raises(TypeError, match="in_channels must be an int"):
        ModulatedDeformConv2d(2.5, 2, 3)
    layer = ModulatedDeformConv2dPack(2, 2, 3)
    with pytest.raises(ValueError, match=r"x must be \(N, in_channels=2, H, W\)"):
        layer(torch.zeros(1, 3, 5, 5))
    with pytest.raises(ValueError, match="x is too small"):
        layer(torch.zeros(1, 2, 2, 5))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        layer(torch.zeros(1, 2, 5, 5, dtype=torch.long))


def test_bias_that_is_not_a_tensor_and_pack_dtype():
    x, offset, mask = torch.zeros(1, 2, 5, 5), torch.zeros(1, 18, 3, 3), torch.ones(1, 9, 3, 3)
    with pytest.raises(TypeError, match="modulated_deform_conv2d: bias must be a tensor or None"):
        modulated_deform_conv2d(x, offset, mask, torch.zeros(2, 2, 3, 3), True)
    layer = ModulatedDeformConv2dPack(2, 2, 3)
    with pytest.raises(TypeError, match="ModulatedDeformConv2dPack: x must have the layer's dtype"):
        layer(x.half())
