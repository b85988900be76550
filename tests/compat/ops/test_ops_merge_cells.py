"""mmpar.compat.ops.merge_cells: the resize rule written as loops, and parity with mmcv 1.x."""

from __future__ import annotations

import importlib.util
import math
import os

import pytest
import torch

from mmpar.compat.ops.merge_cells import BaseMergeCell, ConcatCell, GlobalPoolingCell, SumCell
from tests.compat.ops._reference import DEVICES

# ------------------------------------------------------------------------------ references


def ref_nearest(x, size):
    h, w = x.shape[-2:]
    out = torch.zeros(*x.shape[:-2], *size, dtype=x.dtype)
    for y in range(size[0]):
        for xx in range(size[1]):
            out[..., y, xx] = x[..., min(y * h // size[0], h - 1), min(xx * w // size[1], w - 1)]
    return out


def ref_bilinear(x, size):
    """align_corners=False: source = (dst + 0.5) * in / out - 0.5, clamped at 0."""
    h, w = x.shape[-2:]

    def taps(dst, n_in, n_out):
        src = max((dst + 0.5) * n_in / n_out - 0.5, 0.0)
        lo = min(int(math.floor(src)), n_in - 1)
        hi = min(lo + 1, n_in - 1)
        return lo, hi, src - lo

    out = torch.zeros(*x.shape[:-2], *size, dtype=x.dtype)
    for y in range(size[0]):
        y0, y1, fy = taps(y, h, size[0])
        for xx in range(size[1]):
            x0, x1, fx = taps(xx, w, size[1])
            out[..., y, xx] = (
                (1 - fy) * (1 - fx) * x[..., y0, x0]
                + (1 - fy) * fx * x[..., y0, x1]
                + fy * (1 - fx) * x[..., y1, x0]
                + fy * fx * x[..., y1, x1]
            )
    return out


def ref_downsample(x, size):
    """Zero-pad to a multiple of size (odd pixel bottom / right), max over stride-sized blocks."""
    h, w = x.shape[-2:]
    th, tw = size
    pad_h, pad_w = -h % th, -w % tw
    top, left = pad_h // 2, pad_w // 2
    padded = torch.zeros(*x.shape[:-2], h + pad_h, w + pad_w, dtype=x.dtype)
    padded[..., top : top + h, left : left + w] = x
    kh, kw = (h + pad_h) // th, (w + pad_w) // tw
    out = torch.zeros(*x.shape[:-2], th, tw, dtype=x.dtype)
    for y in range(th):
        for xx in range(tw):
            block = padded[..., y * kh : (y + 1) * kh, xx * kw : (xx + 1) * kw]
            out[..., y, xx] = block.amax(dim=(-2, -1))
    return out


def ref_resize(x, size, mode):
    """mmcv's rule: sizes compared as (h, w) tuples, smaller -> interpolate, larger -> pool."""
    current = tuple(x.shape[-2:])
    if current == tuple(size):
        return x
    if current < tuple(size):
        return ref_nearest(x, size) if mode == "nearest" else ref_bilinear(x, size)
    return ref_downsample(x, size)


RESIZES = [
    ((4, 4), (4, 4)),
    ((2, 3), (5, 7)),  # up in both
    ((4, 10), (8, 5)),  # h smaller, w larger: "smaller" as a tuple -> interpolate
    ((8, 3), (4, 6)),  # h larger, w smaller: "larger" -> zero-pad w to 6, pool (2, 1)
    ((8, 8), (4, 4)),  # divisible
    ((7, 9), (3, 4)),  # padded on both sides, the odd pixel bottom / right
    ((5, 5), (5, 2)),  # same h, w larger
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("current,size", RESIZES)
def test_resize_matches_rule(device, mode, current, size):
    cell = SumCell(2, 2, with_out_conv=False, upsample_mode=mode)
    x = torch.randn(1, 2, *current, dtype=torch.float64) - 0.5  # negatives: padding zeros win
    moved = x.to(device)
    out = cell._resize(moved, size)
    assert out.shape[-2:] == size
    torch.testing.assert_close(out.cpu(), ref_resize(x, size, mode))
    if current == size:
        assert out is moved


def test_resize_gradcheck():
    cell = SumCell(1, 1, with_out_conv=False, upsample_mode="bilinear")
    for current, size in [((2, 3), (4, 5)), ((5, 7), (2, 3))]:
        x = torch.rand(1, 1, *current, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda v, s=size: cell._resize(v, s), (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_cells_without_convs(device):
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(2, 3, 4, 6, generator=g).to(device)
    x2 = torch.randn(2, 3, 8, 3, generator=g).to(device)
    size = (8, 3)  # max((4, 6), (8, 3)) as tuples
    a, b = ref_resize(x1.cpu(), size, "nearest"), ref_resize(x2.cpu(), size, "nearest")
    torch.testing.assert_close(SumCell(3, 3, with_out_conv=False)(x1, x2).cpu(), a + b)
    torch.testing.assert_close(
        ConcatCell(3, 3, with_out_conv=False)(x1, x2).cpu(), torch.cat([a, b], 1)
    )
    gp = GlobalPoolingCell(with_out_conv=False)
    attention = torch.sigmoid(b.mean(dim=(2, 3), keepdim=True))
    torch.testing.assert_close(gp(x1, x2).cpu(), b + attention * a)
    out_size = (2, 2)
    a, b = ref_resize(x1.cpu(), out_size, "nearest"), ref_resize(x2.cpu(), out_size, "nearest")
    torch.testing.assert_close(SumCell(3, 3, with_out_conv=False)(x1, x2, out_size).cpu(), a + b)
    assert isinstance(gp.input1_conv, torch.nn.Sequential) and len(gp.input1_conv) == 0
    assert not hasattr(gp, "out_conv")


def test_bad_arguments():
    # What mmcv asserts is an AssertionError too.
    with pytest.raises(AssertionError, match="upsample_mode must be one of"):
        SumCell(2, 2, with_out_conv=False, upsample_mode="bicubic")
    cell = SumCell(2, 2, with_out_conv=False)
    with pytest.raises(AssertionError, match=r"x1 and x2 must share \(N, C\)"):
        cell(torch.zeros(1, 2, 3, 3), torch.zeros(1, 3, 3, 3))
    with pytest.raises(AssertionError, match=r"x1 and x2 must share \(N, C\)"):
        cell(torch.zeros(2, 2, 3, 3), torch.zeros(1, 2, 3, 3))  # batch sizes
    with pytest.raises(AssertionError, match=r"out_size must be \(H, W\)"):
        cell(torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3), (3, 3, 3))
    with pytest.raises(ValueError, match="out_size must be an int >= 1"):
        cell(torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3), (0, 3))
    with pytest.raises(TypeError, match="out_size must be an int"):
        cell(torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3), (2.5, 3))
    with pytest.raises(ValueError, match=r"x2 must be \(N, C, H, W\) with H, W >= 1"):
        cell(torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 0, 3))
    with pytest.raises(NotImplementedError):
        BaseMergeCell(with_out_conv=False)(torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3))


# ------------------------------------------------------------------------------ mmcv parity


def _mmcv_merge_cells():
    """mmcv 1.x's own merge_cells.py (pure Python), loaded without mmcv.ops' compiled ops."""
    mmcv = pytest.importorskip("mmcv")
    path = os.path.join(os.path.dirname(mmcv.__file__), "ops", "merge_cells.py")
    spec = importlib.util.spec_from_file_location("mmcv.ops.merge_cells", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not put in sys.modules
    return module


CONFIGS = [
    ("SumCell", dict(in_channels=4, out_channels=4)),
    ("SumCell", dict(in_channels=4, out_channels=4, out_norm_cfg=dict(type="BN"))),
    ("ConcatCell", dict(in_channels=4, out_channels=4, with_input1_conv=True)),
    (
        "GlobalPoolingCell",
        dict(
            in_channels=4,
            out_channels=4,
            with_input1_conv=True,
            with_input2_conv=True,
            input_norm_cfg=dict(type="BN"),
            upsample_mode="bilinear",
            out_conv_order=("conv", "norm", "act"),
            out_norm_cfg=dict(type="BN"),
        ),
    ),
    ("GlobalPoolingCell", dict(with_out_conv=False)),
    ("SumCell", dict(in_channels=4, out_channels=4, out_conv_cfg=dict(kernel_size=1, bias=False))),
]


@pytest.mark.filterwarnings("ignore:Unnecessary conv bias")  # mmcv's ConvModule, for both
@pytest.mark.parametrize("name,kwargs", CONFIGS)
def test_parity_with_mmcv(name, kwargs):
    theirs_module = _mmcv_merge_cells()
    import mmpar.compat.ops.merge_cells as ours_module

    torch.manual_seed(0)
    ours = getattr(ours_module, name)(**kwargs)
    theirs = getattr(theirs_module, name)(**kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    theirs.load_state_dict(ours.state_dict())
    g = torch.Generator().manual_seed(1)
    for s1, s2, out_size in [
        ((6, 6), (3, 3), None),
        ((3, 5), (6, 2), None),
        ((7, 9), (7, 9), (3, 4)),
        ((2, 2), (9, 5), (4, 4)),
    ]:
        x1 = torch.randn(2, 4, *s1, generator=g)
        x2 = torch.randn(2, 4, *s2, generator=g)
        for mode in ("train", "eval"):
            getattr(ours, mode)()
            getattr(theirs, mode)()
            torch.testing.assert_close(
                ours(x1.clone(), x2.clone(), out_size), theirs(x1.clone(), x2.clone(), out_size)
            )


@pytest.mark.filterwarnings("ignore:Unnecessary conv bias")
def test_nas_fpn_style_cells_train():
    pytest.importorskip("mmcv")
    cell = SumCell(4, 4, out_norm_cfg=dict(type="BN", requires_grad=True))
    x1 = torch.randn(2, 4, 8, 8, requires_grad=True)
    x2 = torch.randn(2, 4, 4, 4, requires_grad=True)
    out = cell(x1, x2, out_size=x2.shape[-2:])
    assert out.shape == (2, 4, 4, 4)
    out.square().sum().backward()
    assert x1.grad is not None and x2.grad is not None
    assert cell.out_conv.conv.weight.grad is not None


def test_empty_batch_forward_and_backward():
    cell = GlobalPoolingCell(with_out_conv=False)
    x1 = torch.zeros(0, 2, 4, 4, requires_grad=True)
    x2 = torch.zeros(0, 2, 2, 3, requires_grad=True)
    out = cell(x1, x2, (3, 3))
    assert out.shape == (0, 2, 3, 3)
    out.sum().backward()
    assert x1.grad.shape == x1.shape and x2.grad.shape == x2.shape


def test_channels_the_convs_cannot_take_name_the_input():
    pytest.importorskip("mmcv.cnn")
    cell = SumCell(4, 4, with_input1_conv=True)
    with pytest.raises(ValueError, match="x1 must have 4 channels .*found 2"):
        cell(torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3))
    cell = SumCell(4, 4)
    with pytest.raises(ValueError, match="the merged map must have 4 channels"):
        cell(torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3))


def test_nan_goes_through_the_resize_as_mmcv():
    cell = SumCell(1, 1, with_out_conv=False)
    big = torch.zeros(1, 1, 4, 4)
    big[0, 0, 0, 0] = float("nan")
    out = cell(big, torch.zeros(1, 1, 2, 2), (2, 2))  # max-pooled: the NaN is kept
    assert out[0, 0, 0, 0].isnan() and not out[0, 0, 1].isnan().any()


def test_bad_input_dtype_and_out_size_not_a_pair():
    cell = SumCell(2, 2, with_out_conv=False)
    x = torch.zeros(1, 2, 3, 3)
    with pytest.raises(TypeError, match="SumCell: x1 must be a floating-point tensor"):
        cell(x.long(), x)
    with pytest.raises(AssertionError, match=r"out_size must be \(H, W\), found 3"):
        cell(x, x, 3)
    pytest.importorskip("mmcv.cnn")
    with pytest.raises(TypeError, match="SumCell: x1 must have the layer's dtype torch.float32"):
        SumCell(2, 2)(x.double(), x.double())
