"""mmpar.compat.ops.deform_conv against a per-output-pixel reference of DCNv1."""

from __future__ import annotations

import inspect
import warnings
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mmpar.compat.ops.deform_conv import DeformConv2d, DeformConv2dPack, deform_conv2d
from tests.compat.ops._reference import (
    DEVICES,
    HALF_DTYPES,
    deform_conv_grad_reference,
    deform_conv_inputs,
    deform_conv_reference,
)

pytest.importorskip("torchvision")

# (channels, out_channels, kernel, stride, padding, dilation, groups, deform_groups)
CASES = [
    (2, 3, 3, 1, 1, 1, 1, 1),
    (4, 4, 3, 2, 1, 1, 2, 2),
    (4, 2, (2, 3), 1, 0, 2, 1, 2),
    (2, 4, 1, 1, 0, 1, 2, 1),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
def test_forward_matches_reference(case, device):
    inp, offset, weight = deform_conv_inputs(case, device=device)
    _, _, _, stride, padding, dilation, groups, dgroups = case
    out = deform_conv2d(inp, offset, weight, stride, padding, dilation, groups, dgroups)
    expected = deform_conv_reference(
        inp.cpu(), offset.cpu(), weight.cpu(), stride, padding, dilation, groups, dgroups
    )
    assert out.shape == expected.shape and out.dtype == torch.float64
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-10, atol=1e-10)


def test_per_channel_sampling_as_mmdet_tood():
    # mmdet's TOOD samples each channel at its own offset: 1x1 weight, groups = deform_groups = C.
    gen = torch.Generator().manual_seed(2)
    feat = torch.randn(2, 4, 5, 6, generator=gen, dtype=torch.float64)
    offset = torch.randn(2, 8, 5, 6, generator=gen, dtype=torch.float64) * 2
    weight = feat.new_ones(4, 1, 1, 1)
    out = deform_conv2d(feat, offset, weight, 1, 0, 1, 4, 4)
    torch.testing.assert_close(out, deform_conv_reference(feat, offset, weight, 1, 0, 1, 4, 4))


def test_offsets_are_dy_dx_pairs_per_kernel_point():
    # One channel, a 1x2 kernel of ones: moving point 1 by dx=+1 reads the next column.
    inp = torch.arange(12.0, dtype=torch.float64).reshape(1, 1, 3, 4)
    weight = torch.tensor([[[[0.0, 1.0]]]], dtype=torch.float64)
    offset = torch.zeros(1, 4, 3, 3, dtype=torch.float64)
    offset[:, 3] = 1.0  # point 1, dx
    out = deform_conv2d(inp, offset, weight)
    expected = F.pad(inp[..., 2:], (0, 1))  # column x + 2; beyond the map: 0
    torch.testing.assert_close(out, expected)
    offset.zero_()
    offset[:, 2] = 0.5  # point 1, dy: half a row down (the last row blends with 0)
    out = deform_conv2d(inp, offset, weight)
    below = F.pad(inp[:, :, 1:, 1:], (0, 0, 0, 1))
    torch.testing.assert_close(out, 0.5 * inp[..., 1:] + 0.5 * below)


def test_samples_outside_blend_within_one_pixel():
    inp = torch.ones(1, 1, 2, 2, dtype=torch.float64)
    weight = torch.ones(1, 1, 1, 1, dtype=torch.float64)
    offset = torch.zeros(1, 2, 2, 2, dtype=torch.float64)
    offset[0, 0, 0, 0] = -0.25  # y = -0.25: 0.75 of row 0
    offset[0, 1, 1, 1] = 0.5  # x = 1.5: half of column 1
    offset[0, 0, 0, 1] = -1.0  # y = -1: outside
    out = deform_conv2d(inp, offset, weight)
    torch.testing.assert_close(
        out, torch.tensor([[[[0.75, 0.0], [1.0, 0.5]]]], dtype=torch.float64)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    case = (4, 2, 3, 2, 1, 1, 2, 2)
    inp, offset, weight = deform_conv_inputs(case, n_img=1, size=(4, 5), scale=1.5, device=device)
    tensors = tuple(t.requires_grad_() for t in (inp, offset, weight))
    # torchvision's CUDA backward adds with atomics: float64 sums in any order.
    assert torch.autograd.gradcheck(
        lambda i, o, w: deform_conv2d(i, o, w, 2, 1, 1, 2, 2),
        tensors,
        fast_mode=True,
        nondet_tol=1e-12 if device == "cuda" else 0.0,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_close_to_float32(device, dtype):
    inp, offset, weight = deform_conv_inputs(
        CASES[1], dtype=torch.float32, device=device, scale=1.0
    )
    inp, offset, weight = (t.to(dtype) for t in (inp, offset, weight))
    out = deform_conv2d(inp, offset, weight, 2, 1, 1, 2, 2)
    expected = deform_conv2d(inp.float(), offset.float(), weight.float(), 2, 1, 1, 2, 2)
    assert out.dtype == dtype
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    torch.testing.assert_close(out.float(), expected, rtol=tol, atol=tol)
    inp.requires_grad_()
    deform_conv2d(inp, offset, weight, 2, 1, 1, 2, 2).sum().backward()
    assert inp.grad is not None and inp.grad.dtype == dtype


def test_mixed_precision_follows_offset_dtype():
    inp, offset, weight = deform_conv_inputs(CASES[0], dtype=torch.float32)
    out = deform_conv2d(inp, offset.half(), weight, 1, 1)
    assert out.dtype == torch.float16
    out = deform_conv2d(inp.half(), offset, weight.half(), 1, 1)
    assert out.dtype == torch.float32


def test_empty_batch():
    inp, offset, weight = deform_conv_inputs(CASES[0], n_img=0)
    out = deform_conv2d(inp, offset, weight, 1, 1)
    assert out.shape == (0, 3, 5, 6)


def test_keyword_and_positional_signature():
    params = list(inspect.signature(deform_conv2d).parameters)
    assert params == [
        "input", "offset", "weight", "stride", "padding", "dilation", "groups",
        "deform_groups", "bias", "im2col_step",
    ]  # fmt: skip
    inp, offset, weight = deform_conv_inputs(CASES[1])
    a = deform_conv2d(inp, offset, weight, 2, 1, 1, 2, 2, False, 1)
    b = deform_conv2d(
        inp, offset, weight, stride=2, padding=1, groups=2, deform_groups=2, im2col_step=7
    )
    torch.testing.assert_close(a, b)


def test_bad_arguments():
    inp, offset, weight = deform_conv_inputs(CASES[0])
    with pytest.raises(AssertionError, match="bias must be False"):
        deform_conv2d(inp, offset, weight, 1, 1, bias=True)
    with pytest.raises(ValueError, match="bias must be False"):
        deform_conv2d(inp, offset, weight, 1, 1, bias=None)
    with pytest.raises(ValueError, match=r"offset must have shape \(2, 18, 5, 6\)"):
        deform_conv2d(inp, offset[:1], weight, 1, 1)  # another batch size
    with pytest.raises(ValueError, match="groups must be an int >= 1"):
        deform_conv2d(inp, offset, weight, 1, 1, 1, 0)
    with pytest.raises(ValueError, match="dilation must be an int >= 1"):
        deform_conv2d(inp, offset, weight, 1, 1, 0)
    with pytest.raises(ValueError, match="weight must be 4D"):
        deform_conv2d(inp, offset, weight[..., :0], 1, 1)
    with pytest.raises(ValueError, match="offset"):
        deform_conv2d(inp, offset[:, :-2], weight, 1, 1)
    with pytest.raises(ValueError, match="offset"):
        deform_conv2d(inp, offset[..., :-1], weight, 1, 1)
    with pytest.raises(ValueError, match="4D"):
        deform_conv2d(inp[0], offset, weight, 1, 1)
    with pytest.raises(ValueError, match="groups"):
        deform_conv2d(inp, offset, weight, 1, 1, groups=2)
    with pytest.raises(ValueError, match="deform_groups"):
        deform_conv2d(inp, offset, weight, 1, 1, deform_groups=3)
    with pytest.raises(ValueError, match="too small"):
        deform_conv2d(inp[..., :1, :1], offset, weight)
    with pytest.raises(ValueError, match="stride"):
        deform_conv2d(inp, offset, weight, 0, 1)
    with pytest.raises(ValueError, match="padding"):
        deform_conv2d(inp, offset, weight, 1, 1.5)
    with pytest.raises(TypeError, match="offset"):
        deform_conv2d(inp, offset.long(), weight, 1, 1)


def test_a_larger_batch_must_be_divisible_by_im2col_step_as_in_mmcv():
    inp, offset, weight = deform_conv_inputs(CASES[0], n_img=3)
    for error in (AssertionError, ValueError):
        with pytest.raises(error, match="batch size must be divisible by im2col_step.*3.*2"):
            deform_conv2d(inp, offset, weight, 1, 1, im2col_step=2)
    with pytest.raises(AssertionError, match="batch size must be divisible by im2col_step"):
        DeformConv2d(2, 3, 3, padding=1, im2col_step=2)(inp, offset)
    want = deform_conv2d(inp, offset, weight, 1, 1, im2col_step=1)
    for step in (3, 4, 32):  # divides it, or larger than the batch
        torch.testing.assert_close(deform_conv2d(inp, offset, weight, 1, 1, im2col_step=step), want)
    with pytest.raises(ValueError, match="im2col_step must be an int >= 1, found 0"):
        deform_conv2d(inp, offset, weight, 1, 1, im2col_step=0)
    with pytest.raises(TypeError, match="im2col_step must be an int, found 1.5"):
        deform_conv2d(inp, offset, weight, 1, 1, im2col_step=1.5)


def test_module_attributes_init_and_repr():
    torch.manual_seed(3)
    layer = DeformConv2d(4, 6, 3, stride=2, padding=1, groups=2, deform_groups=2)
    torch.manual_seed(3)
    expected = torch.empty(6, 2, 3, 3)
    nn.init.kaiming_uniform_(expected, nonlinearity="relu")
    torch.testing.assert_close(layer.weight.data, expected)
    assert isinstance(layer.weight, nn.Parameter)
    assert [name for name, _ in layer.named_parameters()] == ["weight"]
    assert layer.kernel_size == (3, 3) and layer.stride == (2, 2) and layer.padding == (1, 1)
    assert layer.dilation == (1, 1) and layer.im2col_step == 32
    assert layer.transposed is False and layer.output_padding == (0,)
    assert repr(layer) == (
        "DeformConv2d(in_channels=4,\nout_channels=6,\nkernel_size=(3, 3),\nstride=(2, 2),\n"
        "padding=(1, 1),\ndilation=(1, 1),\ngroups=2,\ndeform_groups=2,\nbias=False)"
    )


def test_module_rejects_bias_and_bad_groups():
    # mmcv asserts these: the error is an AssertionError too.
    with pytest.raises(AssertionError, match="bias must be False"):
        DeformConv2d(2, 2, 3, bias=True)
    with pytest.raises(AssertionError, match="divisible by groups"):
        DeformConv2d(3, 2, 3, groups=2)
    with pytest.raises(ValueError, match="divisible by groups"):
        DeformConv2d(3, 4, 3, groups=3)
    with pytest.raises(ValueError, match="divisible by deform_groups"):
        DeformConv2d(3, 3, 3, deform_groups=2)
    with pytest.raises(ValueError, match="dilation must be an int >= 1"):
        DeformConv2dPack(2, 2, 3, dilation=0)
    with pytest.raises(ValueError, match="padding must be an int >= 0"):
        DeformConv2dPack(2, 2, 3, padding=-1)


def test_deprecated_deformable_groups():
    with pytest.warns(DeprecationWarning, match="deformable_groups"):
        layer = DeformConv2dPack(4, 4, 3, deformable_groups=2)
    assert layer.deform_groups == 2 and layer.conv_offset.out_channels == 36
    with pytest.raises(TypeError, match="deform_groups"):
        DeformConv2d(4, 4, 3, deform_groups=2, deformable_groups=2)


def test_module_forward_matches_reference():
    layer = DeformConv2d(4, 4, 3, stride=2, padding=1, groups=2, deform_groups=2).double()
    inp, offset, _ = deform_conv_inputs(CASES[1])
    out = layer(inp, offset)
    expected = deform_conv_reference(inp, offset, layer.weight.detach(), 2, 1, 1, 2, 2)
    torch.testing.assert_close(out, expected)


def test_module_pads_input_smaller_than_kernel():
    layer = DeformConv2d(2, 3, 3, padding=1).double()
    gen = torch.Generator().manual_seed(1)
    inp = torch.randn(1, 2, 2, 2, generator=gen, dtype=torch.float64)
    offset = torch.randn(1, 18, 2, 2, generator=gen, dtype=torch.float64)
    out = layer(inp, offset)
    expected = deform_conv_reference(inp, offset, layer.weight.detach(), 1, 1, 1, 1, 1)
    assert out.shape == (1, 3, 2, 2)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_pack_starts_as_plain_conv(device):
    layer = DeformConv2dPack(4, 6, 3, stride=2, padding=1, dilation=1, groups=2, deform_groups=2)
    layer = layer.to(device)
    assert layer.conv_offset.out_channels == 2 * 2 * 9
    assert layer.conv_offset.stride == (2, 2) and layer.conv_offset.padding == (1, 1)
    assert not layer.conv_offset.weight.any() and not layer.conv_offset.bias.any()
    x = torch.randn(2, 4, 7, 6, device=device, requires_grad=True)
    out = layer(x)
    expected = F.conv2d(x, layer.weight, stride=2, padding=1, groups=2)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    # The offsets learn: their convolution gets a gradient from the start.
    assert layer.conv_offset.weight.grad is not None and layer.conv_offset.weight.grad.any()
    assert layer.weight.grad is not None and x.grad is not None


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv2 = DeformConv2dPack(2, 2, 3, padding=1)


def _old_checkpoint(source: _Net) -> dict[str, torch.Tensor]:
    """A version-1 checkpoint: the offset conv beside the Pack, no version metadata."""
    state = source.state_dict()
    return {
        "conv2.weight": state["conv2.weight"],
        "conv2_offset.weight": state["conv2.conv_offset.weight"],
        "conv2_offset.bias": state["conv2.conv_offset.bias"],
    }


def _randomised_net() -> _Net:
    net = _Net()
    with torch.no_grad():
        net.conv2.conv_offset.weight.normal_()
        net.conv2.conv_offset.bias.normal_()
    return net


def test_pack_renames_old_offset_keys():
    source = _randomised_net()
    state = _old_checkpoint(source)
    missing: list[str] = []
    errors: list[str] = []
    target = _Net()
    # As mmcv's checkpoint loader: every module sees the whole state dict.
    for prefix, module in (
        ("conv2.", target.conv2),
        ("conv2.conv_offset.", target.conv2.conv_offset),
    ):
        module._load_from_state_dict(state, prefix, {}, True, missing, [], errors)
    assert not missing and not errors
    assert "conv2.conv_offset.weight" in state and "conv2_offset.weight" not in state
    for key, value in source.state_dict().items():
        torch.testing.assert_close(target.state_dict()[key], value)


def test_pack_loads_old_checkpoint_with_mmcv_loader():
    checkpoint = pytest.importorskip("mmcv.runner.checkpoint")
    source = _randomised_net()
    target = _Net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # mmcv reports the old keys as unexpected at the parent, then the Pack takes them.
        checkpoint.load_state_dict(target, _old_checkpoint(source), strict=False)
    for key, value in source.state_dict().items():
        torch.testing.assert_close(target.state_dict()[key], value)


def test_pack_keeps_version_2_keys():
    source = _Net()
    state = source.state_dict()
    assert state._metadata["conv2"]["version"] == 2  # type: ignore[attr-defined]
    target = _Net()
    target.load_state_dict(state)
    # A version-2 checkpoint is not renamed: old-style keys stay unexpected.
    renamed = OrderedDict(
        (k.replace("conv2.conv_offset", "conv2_offset"), v) for k, v in state.items()
    )
    renamed._metadata = state._metadata  # type: ignore[attr-defined]
    result = target.load_state_dict(renamed, strict=False)
    assert set(result.unexpected_keys) == {"conv2_offset.weight", "conv2_offset.bias"}
    assert set(result.missing_keys) == {"conv2.conv_offset.weight", "conv2.conv_offset.bias"}


def test_pack_gradcheck_through_offsets():
    layer = DeformConv2dPack(2, 2, 3, padding=1).double()
    with torch.no_grad():
        layer.conv_offset.weight.normal_(std=0.3)
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.autograd.gradcheck(layer, (x,), fast_mode=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [CASES[0], CASES[1]])
@pytest.mark.parametrize("step", [1.0, 0.5, None])
def test_offset_gradient_follows_mmcvs_border_rule(case, step, device):
    """Samples exactly on the border (-1 or H) get no offset gradient, as in mmcv-full."""
    inp, offset, weight = deform_conv_inputs(case, size=(3, 4), scale=1.5)
    if step is not None:
        offset = (offset / step).round() * step
    grad_out = torch.randn(inp.size(0), weight.size(0), *offset.shape[2:], dtype=torch.float64)
    grad = offset.clone().to(device).requires_grad_()
    deform_conv2d(inp.to(device), grad, weight.to(device), *case[3:]).backward(grad_out.to(device))
    expected, _ = deform_conv_grad_reference(inp, offset, weight, grad_out, *case[3:])
    torch.testing.assert_close(grad.grad.cpu(), expected, rtol=1e-10, atol=1e-10)


def test_pack_offset_gradient_from_the_border_is_mmcvs():
    layer = DeformConv2dPack(1, 1, 2, padding=1).double()
    with torch.no_grad():
        layer.weight.fill_(1.0)
    x = torch.tensor([[[[1.0, 2.0, 3.0], [4.0, 0.0, 1.0], [2.0, 2.0, 5.0]]]], dtype=torch.float64)
    out = layer(x)
    out.sum().backward()
    expected, _ = deform_conv_grad_reference(
        x, torch.zeros(1, 8, 4, 4, dtype=torch.float64), layer.weight.detach(),
        torch.ones_like(out), 1, 1, 1, 1, 1,
    )  # fmt: skip
    patches = F.pad(x, (1, 1, 1, 1)).unfold(2, 2, 1).unfold(3, 2, 1)
    torch.testing.assert_close(
        layer.conv_offset.weight.grad, torch.einsum("nkyx,ncyxij->kcij", expected, patches)
    )


def test_nan_and_inf_offsets_read_zero_as_mmcv():
    # torchvision's kernel alone crashes on a NaN offset; mmcv-full's reads 0 there.
    inp, offset, weight = deform_conv_inputs(CASES[0])
    bad, far = offset.clone(), offset.clone()
    bad[0, 2, 1, 1], bad[1, 17, 4, 5] = float("nan"), float("inf")
    far[0, 2, 1, 1], far[1, 17, 4, 5] = -50.0, 50.0
    bad.requires_grad_()
    out = deform_conv2d(inp, bad, weight, 1, 1)
    torch.testing.assert_close(out, deform_conv2d(inp, far, weight, 1, 1))
    out.sum().backward()
    assert torch.isfinite(bad.grad).all() and not bad.grad[0, 2:4, 1, 1].any()


def test_empty_batch_backward():
    inp, offset, weight = deform_conv_inputs(CASES[1], n_img=0)
    tensors = [t.requires_grad_() for t in (inp, offset, weight)]
    deform_conv2d(*tensors, 2, 1, 1, 2, 2).sum().backward()
    assert all(t.grad is not None and t.grad.shape == t.shape for t in tensors)
    layer = DeformConv2dPack(2, 3, 3, padding=1)
    x = torch.zeros(0, 2, 4, 4, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad.shape == x.shape


def test_pack_checks_its_input():
    layer = DeformConv2dPack(2, 3, 3)
    with pytest.raises(ValueError, match=r"x must be \(N, in_channels=2, H, W\)"):
        layer(torch.zeros(1, 4, 5, 5))
    with pytest.raises(ValueError, match="x is too small"):
        layer(torch.zeros(1, 2, 5, 2))


def test_pack_input_of_another_dtype_than_the_layer():
    layer = DeformConv2dPack(2, 2, 3)
    with pytest.raises(TypeError, match=r"DeformConv2dPack: x must have the layer's dtype torch\."):
        layer(torch.zeros(1, 2, 5, 5, dtype=torch.float64))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts: no error
        assert layer(torch.zeros(1, 2, 5, 5, dtype=torch.bfloat16)).shape == (1, 2, 3, 3)
