"""mmpar.compat.ops.saconv against SAC's definition, with explicit convolution loops.

SAConv2d subclasses mmcv.cnn's ConvAWS2d, so these tests need mmcv; the
deformable variant also needs this package's deform_conv (torchvision).
"""

from __future__ import annotations

import copy
import importlib.util
import pickle
import sys

import pytest
import torch

from tests.compat.ops._reference import DEVICES, bilinear_zero_padded

pytest.importorskip("mmcv")

from mmpar.compat.ops import saconv  # noqa: E402


def _has_deform_conv() -> bool:
    if importlib.util.find_spec("mmpar.compat.ops.deform_conv") is None:
        return False
    try:
        from mmpar.compat.ops.backend import torchvision_ops

        torchvision_ops()
    except ImportError:
        return False
    return True


needs_deform = pytest.mark.skipif(
    not _has_deform_conv(), reason="needs mmpar.compat.ops.deform_conv and torchvision"
)


def _conv_loop(x, weight, stride, padding, dilation, groups, offset=None):
    """Explicit convolution: every output pixel, every kernel tap; deformable with ``offset``.

    offset: (N, 2 * kh * kw, out_h, out_w), (dy, dx) per tap k = i * kw + j.
    """
    n, channels, height, width = x.shape
    out_channels, group_in, kh, kw = weight.shape
    group_out = out_channels // groups
    out_h = (height + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (width + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    pixels = []
    for b in range(n):
        for oy in range(out_h):
            for ox in range(out_w):
                acc = x.new_zeros(out_channels)
                for i in range(kh):
                    for j in range(kw):
                        y = oy * stride[0] - padding[0] + i * dilation[0]
                        xx = ox * stride[1] - padding[1] + j * dilation[1]
                        if offset is None:
                            inside = 0 <= y < height and 0 <= xx < width
                            sample = x[b, :, y, xx] if inside else x.new_zeros(channels)
                        else:
                            k = i * kw + j
                            dy, dx = offset[b, 2 * k, oy, ox], offset[b, 2 * k + 1, oy, ox]
                            sample = bilinear_zero_padded(x[b], y + dy, xx + dx)
                        for g in range(groups):
                            w = weight[g * group_out : (g + 1) * group_out, :, i, j]
                            part = sample[g * group_in : (g + 1) * group_in]
                            acc = acc.index_add(
                                0, torch.arange(g * group_out, (g + 1) * group_out), w @ part
                            )
                pixels.append(acc)
    return torch.stack(pixels).view(n, out_h, out_w, out_channels).permute(0, 3, 1, 2)


def _conv1x1(x, conv, stride=(1, 1)):
    x = x[:, :, :: stride[0], :: stride[1]]
    return torch.einsum("oc,nchw->nohw", conv.weight[:, :, 0, 0], x) + conv.bias[:, None, None]


def _reflect(i, n):
    return -i if i < 0 else (2 * (n - 1) - i if i >= n else i)


def _local_mean(x):
    """5x5 mean with reflection at the borders, per pixel."""
    _, _, height, width = x.shape
    out = torch.empty_like(x)
    for y in range(height):
        for xx in range(width):
            rows = [_reflect(y + d, height) for d in range(-2, 3)]
            cols = [_reflect(xx + d, width) for d in range(-2, 3)]
            out[:, :, y, xx] = x[:, :, rows][:, :, :, cols].mean((2, 3))
    return out


def _standardised(module):
    flat = module.weight.flatten(1)
    mean = flat.mean(1)
    std = ((flat - mean[:, None]).square().sum(1) / (flat.shape[1] - 1) + 1e-5).sqrt()
    weight = (module.weight - mean[:, None, None, None]) / std[:, None, None, None]
    return module.weight_gamma * weight + module.weight_beta


def _reference(module, x):
    """SAC's definition; no bias (mmcv never adds it)."""
    x = x + _conv1x1(x.mean((2, 3), keepdim=True), module.pre_context)
    local = _local_mean(x)
    switch = _conv1x1(local, module.switch, module.stride)
    weight = _standardised(module)
    stride, pad, dil, groups = module.stride, module.padding, module.dilation, module.groups
    offsets = [None, None]
    if module.use_deform:
        offsets = [
            _conv_loop(local, c.weight, module.stride, (1, 1), (1, 1), 1) + c.bias[:, None, None]
            for c in (module.offset_s, module.offset_l)
        ]
    small = _conv_loop(x, weight, stride, pad, dil, groups, offsets[0])
    large_pad = tuple(3 * p for p in pad)
    large_dil = tuple(3 * d for d in dil)
    large_weight = weight + module.weight_diff
    large = _conv_loop(x, large_weight, stride, large_pad, large_dil, groups, offsets[1])
    out = switch * small + (1 - switch) * large
    return out + _conv1x1(out.mean((2, 3), keepdim=True), module.post_context)


def _randomised(seed=0, **kwargs):
    torch.manual_seed(seed)
    module = saconv.SAConv2d(**kwargs).double()
    with torch.no_grad():
        for tensor in [*module.parameters(), module.weight_gamma, module.weight_beta]:
            tensor.copy_(torch.randn_like(tensor) * 0.5)
        if module.use_deform:  # offsets of a few pixels, for the bilinear sampling
            module.offset_s.weight.mul_(0.3)
            module.offset_l.weight.mul_(0.3)
    return module


GEOMETRIES = [
    dict(in_channels=4, out_channels=4, kernel_size=3, padding=1),
    dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=2, dilation=2, groups=2),
    dict(in_channels=4, out_channels=3, kernel_size=1, bias=False),
]


def _check_against_reference(module, x, device):
    """A copy of ``module`` on ``device`` against :func:`_reference` on the CPU: the output,
    and the gradients of the input and of every parameter but the (unused) bias, for one
    random upstream gradient.

    Returns:
        The copy, with its gradients.
    """
    ours = copy.deepcopy(module).to(device)
    ours_x = x.to(device).detach().clone().requires_grad_()
    ref_x = x.clone().requires_grad_()
    out = ours(ours_x)
    ref = _reference(module, ref_x)
    assert out.shape == ref.shape and out.device == ours_x.device
    torch.testing.assert_close(out.cpu(), ref)
    grad = torch.randn_like(ref)
    out.backward(grad.to(device))
    ref.backward(grad)
    torch.testing.assert_close(ours_x.grad.cpu(), ref_x.grad)
    for (name, a), b in zip(ours.named_parameters(), module.parameters()):
        if name != "bias":
            torch.testing.assert_close(a.grad.cpu(), b.grad, msg=name)
    return ours


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cfg", GEOMETRIES)
def test_forward_and_grads_match_definition(device, cfg):
    module = _randomised(**cfg)
    ours = _check_against_reference(module, torch.randn(2, 4, 5, 4, dtype=torch.float64), device)
    assert ours.bias is None or ours.bias.grad is None  # created, never used (as in mmcv)
    assert ours.padding == module.padding and ours.dilation == module.dilation


def test_gradcheck():
    module = _randomised(in_channels=2, out_channels=2, kernel_size=3, padding=1)
    x = torch.randn(1, 2, 4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,), fast_mode=True)


def test_init_is_the_small_branch_alone():
    from mmcv.cnn import ConvAWS2d

    module = saconv.SAConv2d(4, 6, 3, padding=1)
    assert isinstance(module, ConvAWS2d)
    assert (module.switch.weight == 0).all() and (module.switch.bias == 1).all()
    for param in [module.weight_diff, *module.pre_context.parameters()]:
        assert (param == 0).all()
    assert all((p == 0).all() for p in module.post_context.parameters())
    x = torch.randn(2, 4, 5, 5)
    expected = torch.nn.functional.conv2d(x, module._get_weight(module.weight), None, 1, 1)
    torch.testing.assert_close(module(x), expected)


def test_mmcv_names_and_checkpoint_loading():
    module = saconv.SAConv2d(4, 4, 3, padding=1)
    conv_keys = ["weight", "bias", "weight_gamma", "weight_beta", "weight_diff"]
    sub_keys = [
        f"{m}.{p}" for m in ("switch", "pre_context", "post_context") for p in ("weight", "bias")
    ]
    assert sorted(module.state_dict()) == sorted(conv_keys + sub_keys)
    assert saconv.SAConv2d.__module__ == "mmpar.compat.ops.saconv"
    assert (module.use_deform, module.in_channels, module.out_channels) == (False, 4, 4)
    # ConvAWS2d's loading: a plain conv checkpoint (no gamma/beta) keeps its outputs.
    state = {k: v for k, v in module.state_dict().items() if not k.startswith("weight_")}
    state["weight_diff"] = torch.zeros_like(module.weight)
    state["weight"] = torch.randn_like(module.weight)
    loaded = saconv.SAConv2d(4, 4, 3, padding=1)
    loaded.load_state_dict(state, strict=False)
    torch.testing.assert_close(
        loaded._get_weight(loaded.weight), state["weight"], atol=1e-4, rtol=0
    )


def test_pickle_and_deepcopy():
    module = saconv.SAConv2d(2, 2, 3, padding=1)
    x = torch.randn(1, 2, 4, 4)
    for clone in (pickle.loads(pickle.dumps(module)), copy.deepcopy(module)):
        assert type(clone) is saconv.SAConv2d
        torch.testing.assert_close(clone(x), module(x))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kernel_size=3, padding="same"), "padding"),
        (dict(kernel_size=1, use_deform=True), "kernel_size"),
        (dict(kernel_size=3, stride=0), "SAConv2d: stride must be"),
        (dict(kernel_size=3, stride=(1, 0)), "SAConv2d: stride must be"),
        (dict(kernel_size=3, dilation=-1), "SAConv2d: dilation must be"),
        (dict(kernel_size=3, groups=0), "SAConv2d: groups must be"),
        (dict(kernel_size=3, groups=4), "SAConv2d: groups=4 must divide in_channels=2"),
    ],
)
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        saconv.SAConv2d(2, 2, **kwargs)


@pytest.mark.parametrize("use_deform", [False, pytest.param(True, marks=needs_deform)])
def test_bad_input_and_empty_batch(use_deform):
    module = saconv.SAConv2d(4, 4, 3, padding=1, use_deform=use_deform)
    with pytest.raises(ValueError, match=r"x must be \(N, in_channels=4, H, W\) with H, W >= 3"):
        module(torch.zeros(1, 3, 5, 5))
    with pytest.raises(ValueError, match="H, W >= 3 .* found \\(1, 4, 2, 5\\)"):
        module(torch.zeros(1, 4, 2, 5))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        module(torch.zeros(1, 4, 5, 5, dtype=torch.long))
    x = torch.zeros(0, 4, 5, 5, requires_grad=True)
    out = module(x)
    assert out.shape == (0, 4, 5, 5)
    out.sum().backward()
    assert x.grad.shape == x.shape


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        saconv.Nope  # noqa: B018


def test_module_imports_without_mmcv(monkeypatch):
    monkeypatch.setitem(sys.modules, "mmcv", None)
    monkeypatch.setitem(sys.modules, "mmcv.cnn", None)
    spec = importlib.util.spec_from_file_location("_saconv_without_mmcv", saconv.__file__)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    with pytest.raises(ImportError, match="ConvAWS2d"):
        fresh.SAConv2d  # noqa: B018


@needs_deform
def test_deform_at_init_is_the_plain_conv():
    torch.manual_seed(0)
    plain = saconv.SAConv2d(4, 4, 3, padding=1)
    deform = saconv.SAConv2d(4, 4, 3, padding=1, use_deform=True)
    deform.load_state_dict(plain.state_dict(), strict=False)
    for conv in (deform.offset_s, deform.offset_l):
        assert conv.out_channels == 18 and (conv.weight == 0).all() and (conv.bias == 0).all()
    x = torch.randn(2, 4, 5, 6)
    torch.testing.assert_close(deform(x), plain(x), atol=1e-5, rtol=1e-5)


@needs_deform
@pytest.mark.parametrize("device", DEVICES)
def test_deform_matches_definition(device):
    module = _randomised(
        in_channels=2, out_channels=2, kernel_size=3, padding=1, stride=2, use_deform=True
    )
    _check_against_reference(module, torch.randn(1, 2, 5, 6, dtype=torch.float64), device)


def test_input_of_another_dtype_and_errors_name_the_op():
    module = saconv.SAConv2d(4, 4, 3, padding=1)
    with pytest.raises(TypeError, match="mmcv.ops.SAConv2d: x must have the layer's dtype"):
        module(torch.zeros(1, 4, 5, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="^mmcv.ops.SAConv2d: padding must be"):
        saconv.SAConv2d(4, 4, 3, padding="same")
