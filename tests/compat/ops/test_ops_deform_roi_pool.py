"""mmpar.compat.ops.deform_roi_pool against explicit loops of mmcv's kernel."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.deform_roi_pool import (
    DeformRoIPool,
    DeformRoIPoolPack,
    ModulatedDeformRoIPoolPack,
    deform_roi_pool,
)
from mmpar.compat.ops.roi.roi_inputs import empty_bad_rois
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, roi_align_corners

sample_pool_module = importlib.import_module("mmpar.compat.ops.roi.roi_sample_pool")


def reference(inp, rois, offset, size, scale, ratio, gamma, grad_out):
    """mmcv's forward, and its backward for ``grad_out``: (out, grad_input, grad_offset)."""
    _, channels, height, width = inp.shape
    ph_n, pw_n = size
    out = torch.zeros(rois.size(0), channels, ph_n, pw_n, dtype=torch.float64)
    grad_in = torch.zeros_like(inp)
    grad_off = torch.zeros(rois.size(0), 2, ph_n, pw_n, dtype=torch.float64)
    for n in range(rois.size(0)):
        b = int(rois[n, 0])
        x1, y1, x2, y2 = (float(v) * scale - 0.5 for v in rois[n, 1:])
        roi_w, roi_h = x2 - x1, y2 - y1
        bin_h, bin_w = roi_h / ph_n, roi_w / pw_n
        grid_h = ratio if ratio > 0 else math.ceil(roi_h / ph_n)
        grid_w = ratio if ratio > 0 else math.ceil(roi_w / pw_n)
        count = max(grid_h * grid_w, 1)
        for c in range(channels):
            img = inp[b, c]
            for ph in range(ph_n):
                for pw in range(pw_n):
                    start_h, start_w = y1, x1
                    if offset is not None:
                        start_w += gamma * roi_w * float(offset[n, 0, ph, pw])
                        start_h += gamma * roi_h * float(offset[n, 1, ph, pw])
                    g = float(grad_out[n, c, ph, pw]) / count
                    total = 0.0
                    for iy in range(grid_h):
                        y = start_h + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                        for ix in range(grid_w):
                            x = start_w + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                            hit = roi_align_corners(y, x, height, width)
                            if hit is None:
                                continue
                            yl, yh, xl, xh, w = hit
                            v00, v01 = float(img[yl, xl]), float(img[yl, xh])
                            v10, v11 = float(img[yh, xl]), float(img[yh, xh])
                            total += w[0] * v00 + w[1] * v01 + w[2] * v10 + w[3] * v11
                            for (yy, xx), wk in zip(((yl, xl), (yl, xh), (yh, xl), (yh, xh)), w):
                                grad_in[b, c, yy, xx] += g * wk
                            # mmcv's offset gradient: unclamped (y, x), clamped neighbours.
                            ogx = v11 * (y - yl) + v01 * (yh - y) + v10 * (yl - y) + v00 * (y - yh)
                            ogy = v11 * (x - xl) + v10 * (xh - x) + v01 * (xl - x) + v00 * (x - xh)
                            grad_off[n, 0, ph, pw] += gamma * roi_w * g * ogx
                            grad_off[n, 1, ph, pw] += gamma * roi_h * g * ogy
                    out[n, c, ph, pw] = total / count
    return out, grad_in, grad_off


def make(device="cpu", dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    inp = torch.randn(2, 2, 6, 7, generator=gen, dtype=torch.float64)
    rois = torch.tensor(
        [
            [0, 1.0, 1.2, 10.3, 8.1],  # inside
            [1, 2.5, 0.3, 6.1, 11.7],  # reaches the bottom rows
            [1, -3.0, -2.0, 4.0, 3.0],  # partly outside, top left
            [0, 9.0, 7.0, 18.0, 16.0],  # mostly outside, bottom right
            [0, 4.0, 4.0, 4.0, 6.0],  # zero width: no samples
        ],
        dtype=torch.float64,
    )
    offset = torch.randn(rois.size(0), 2, 2, 3, generator=gen, dtype=torch.float64) * 0.6
    return inp.to(device, dtype), rois.to(device, dtype), offset.to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("with_offset", [True, False])
def test_forward_and_backward_match_mmcv_kernel(device, ratio, with_offset):
    inp, rois, offset = make(device)
    inp.requires_grad_()
    offset = offset.requires_grad_() if with_offset else None
    out = deform_roi_pool(inp, rois, offset, (2, 3), 0.5, ratio, 0.1)
    grad_out = torch.randn(
        out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    out.backward(grad_out.to(device))
    cpu_offset = None if offset is None else offset.detach().cpu()
    expected, grad_in, grad_off = reference(
        inp.detach().cpu(), rois.cpu(), cpu_offset, (2, 3), 0.5, ratio, 0.1, grad_out
    )
    assert out.shape == (5, 2, 2, 3)
    torch.testing.assert_close(out.detach().cpu(), expected)
    if ratio == 0:
        assert not out[4].any()  # a RoI of zero width has no adaptive samples
    torch.testing.assert_close(inp.grad.cpu(), grad_in)
    if offset is not None:
        torch.testing.assert_close(offset.grad.cpu(), grad_off)


def test_empty_offset_is_no_offset():
    inp, rois, _ = make()
    plain = deform_roi_pool(inp, rois, None, 2, 0.5)
    torch.testing.assert_close(deform_roi_pool(inp, rois, inp.new_zeros(0), 2, 0.5), plain)
    torch.testing.assert_close(deform_roi_pool(inp, rois, inp.new_zeros(5, 2, 2, 2), 2, 0.5), plain)


def test_offset_moves_bins_by_gamma_times_roi_size():
    # A horizontal ramp: moving every bin right by dx * gamma * roi_w adds that to the output.
    inp = torch.arange(10.0, dtype=torch.float64).expand(1, 1, 4, 10).contiguous()
    rois = torch.tensor([[0, 2.5, 0.5, 4.5, 2.5]], dtype=torch.float64)  # roi_w = 2
    offset = torch.zeros(1, 2, 1, 1, dtype=torch.float64)
    offset[0, 0] = 5.0  # dx: 0.1 * 2 * 5 = 1 pixel
    plain = deform_roi_pool(inp, rois, None, 1, 1.0, 2, 0.1)
    moved = deform_roi_pool(inp, rois, offset, 1, 1.0, 2, 0.1)
    torch.testing.assert_close(moved - plain, torch.ones_like(plain))
    torch.testing.assert_close(plain, torch.full_like(plain, 3.0))  # centre x = 3.5 - 0.5


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_inside_the_map(device):
    # mmcv's offset gradient is the derivative away from the map's edges.
    inp, rois, offset = make(device)
    rois, offset = rois[:1], (offset[:1] * 0.5).requires_grad_()
    inp.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda i, o: deform_roi_pool(i, rois, o, (2, 3), 0.5, 0, 0.1), (inp, offset), fast_mode=True
    )


def test_empty_rois():
    inp, rois, offset = make()
    inp.requires_grad_()
    out = deform_roi_pool(inp, rois[:0], offset[:0], (2, 3), 0.5)
    assert out.shape == (0, 2, 2, 3)
    out.sum().backward()
    assert inp.grad is not None and not inp.grad.any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_close_to_float32(device, dtype):
    inp, rois, offset = make(device, dtype)
    out = deform_roi_pool(inp, rois, offset, (2, 3), 0.5)
    expected = deform_roi_pool(inp.float(), rois.float(), offset.float(), (2, 3), 0.5)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=2e-2)


def test_bad_arguments():
    inp, rois, offset = make()
    with pytest.raises(ValueError, match="rois"):
        deform_roi_pool(inp, rois[:, :4], None, 2)
    with pytest.raises(ValueError, match="offset"):
        deform_roi_pool(inp, rois, offset, 2)
    with pytest.raises(ValueError, match="output_size"):
        deform_roi_pool(inp, rois, None, 0)
    with pytest.raises(TypeError, match="input"):
        deform_roi_pool(inp.long(), rois, None, 2)


def test_module_settings():
    pool = DeformRoIPool((2, 3), spatial_scale=0.5, sampling_ratio=2, gamma=0.2)
    assert pool.output_size == (2, 3) and pool.spatial_scale == 0.5
    assert pool.sampling_ratio == 2 and pool.gamma == 0.2
    inp, rois, offset = make()
    torch.testing.assert_close(
        pool(inp, rois, offset), deform_roi_pool(inp, rois, offset, (2, 3), 0.5, 2, 0.2)
    )


def test_pack_starts_without_offsets_and_learns_them():
    pack = DeformRoIPoolPack((2, 3), 2, deform_fc_channels=8, spatial_scale=0.5).double()
    assert [type(m).__name__ for m in pack.offset_fc] == [
        "Linear", "ReLU", "Linear", "ReLU", "Linear",
    ]  # fmt: skip
    assert pack.offset_fc[0].in_features == 2 * 3 * 2 and pack.offset_fc[-1].out_features == 12
    assert not pack.offset_fc[-1].weight.any() and not pack.offset_fc[-1].bias.any()
    inp, rois, _ = make()
    inp.requires_grad_()
    out = pack(inp, rois)
    torch.testing.assert_close(out, deform_roi_pool(inp, rois, None, (2, 3), 0.5))
    out.square().sum().backward()
    assert pack.offset_fc[-1].weight.grad.any()


def test_modulated_pack_starts_at_half():
    pack = ModulatedDeformRoIPoolPack(2, 2, deform_fc_channels=8, spatial_scale=0.5).double()
    assert not isinstance(pack, DeformRoIPoolPack)  # as mmcv: both derive from DeformRoIPool
    assert [type(m).__name__ for m in pack.mask_fc] == ["Linear", "ReLU", "Linear", "Sigmoid"]
    assert not pack.mask_fc[2].weight.any() and pack.mask_fc[2].out_features == 4
    inp, rois, _ = make()
    out = pack(inp, rois)
    torch.testing.assert_close(out, 0.5 * deform_roi_pool(inp, rois, None, 2, 0.5))
    out.square().sum().backward()
    assert pack.offset_fc[-1].weight.grad.any() and pack.mask_fc[2].weight.grad.any()


def test_pack_checks_channels():
    inp, rois, _ = make()
    with pytest.raises(ValueError, match="output_channels"):
        DeformRoIPoolPack(2, 3, 8).double()(inp, rois)
    with pytest.raises(ValueError, match="output_channels"):
        ModulatedDeformRoIPoolPack(2, 3, 8).double()(inp, rois)


def test_offset_gradient_alone():
    inp, rois, offset = make()
    offset.requires_grad_()
    out = deform_roi_pool(inp, rois, offset, (2, 3), 0.5)
    grad_out = torch.ones_like(out)
    out.backward(grad_out)
    _, _, grad_off = reference(inp, rois, offset.detach(), (2, 3), 0.5, 0, 0.1, grad_out)
    torch.testing.assert_close(offset.grad, grad_off)
    assert not inp.requires_grad


# ------------------------------------------------------------ boundary checks and defined results


def test_bad_settings():
    inp, rois, offset = make()
    for call in (
        lambda v: deform_roi_pool(inp, rois, offset, (2, 3), v),
        lambda v: DeformRoIPool((2, 3), v),
    ):
        for bad in (0.0, -0.5, float("nan")):
            with pytest.raises(ValueError, match="spatial_scale"):
                call(bad)
        with pytest.raises(TypeError, match="spatial_scale"):
            call("0.5")
    with pytest.raises(ValueError, match="sampling_ratio"):
        deform_roi_pool(inp, rois, offset, (2, 3), 0.5, -2)
    with pytest.raises(TypeError, match="sampling_ratio"):
        DeformRoIPool((2, 3), 0.5, 1.5)
    with pytest.raises(ValueError, match="gamma"):
        deform_roi_pool(inp, rois, offset, (2, 3), 0.5, 0, float("inf"))
    with pytest.raises(TypeError, match="gamma"):
        DeformRoIPool((2, 3), 0.5, 0, "0.1")
    with pytest.raises(TypeError, match="output_size"):
        DeformRoIPool((2, 3, 4))
    with pytest.raises(ValueError, match="output_size"):
        DeformRoIPoolPack(0, 2)
    with pytest.raises(TypeError, match="offset"):
        deform_roi_pool(inp, rois, offset.int(), (2, 3))
    with pytest.raises(TypeError, match="offset"):
        deform_roi_pool(inp, rois, offset.tolist(), (2, 3))
    # mmcv asserts the rois' shape and the Packs' channels: AssertionErrors as well.
    for call in (
        lambda: deform_roi_pool(inp, rois[:, 1:], None, 2),
        lambda: DeformRoIPoolPack(2, 3, 8).double()(inp, rois),
    ):
        with pytest.raises(ArgumentError, match=r"\(K, 5\)|output_channels") as info:
            call()
        assert isinstance(info.value, AssertionError)


@pytest.mark.parametrize("pack_type", [DeformRoIPoolPack, ModulatedDeformRoIPoolPack])
def test_pack_channels_must_be_positive_ints(pack_type):
    for name, args, error in (
        ("output_channels", (2, -1), ValueError),
        ("output_channels", (2, 2.0), TypeError),
        ("deform_fc_channels", (2, 2, 0), ValueError),
        ("deform_fc_channels", (2, 2, None), TypeError),
    ):
        with pytest.raises(error, match=f"{pack_type.__name__}: {name} must be an int"):
            pack_type(*args)


@pytest.mark.parametrize("pack_type", [DeformRoIPoolPack, ModulatedDeformRoIPoolPack])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_pack_of_another_dtype_than_its_input(pack_type, dtype):
    """A float32 Pack on a half or double input (no autocast): the heads run in their
    dtype, the pooling and the result in the input's (Linear refused the mix)."""
    inp, rois, _ = make()
    layer = pack_type((2, 3), inp.shape[1], 8, 0.5)
    out = layer(inp.to(dtype), rois.to(dtype))
    assert out.dtype == dtype
    expected = layer(inp.float(), rois.float())
    torch.testing.assert_close(out.float(), expected, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("pack_type", [DeformRoIPoolPack, ModulatedDeformRoIPoolPack])
def test_packs_with_no_rois(pack_type):
    """Zero rois through a Pack: an empty output, and a backward pass through it."""
    pack = pack_type((2, 3), 2, deform_fc_channels=8, spatial_scale=0.5).double()
    inp, rois, _ = make()
    inp.requires_grad_()
    out = pack(inp, rois[:0])
    assert out.shape == (0, 2, 2, 3)
    out.sum().backward()
    assert inp.grad is not None and not inp.grad.any()


def test_empty_rois_with_offsets_that_need_a_gradient():
    inp, rois, offset = make()
    offset = offset[:0].clone().requires_grad_()
    inp.requires_grad_()
    out = deform_roi_pool(inp, rois[:0], offset, (2, 3), 0.5)
    out.sum().backward()
    assert out.shape == (0, 2, 2, 3) and not inp.grad.any()


def test_chunks_split_inside_a_bin(monkeypatch):
    """Samples listed a few at a time (bins split across chunks) give the one-pass result."""
    inp, rois, offset = make(seed=3)
    rois[1, 3:] = torch.tensor([30.0, 25.0])  # a large adaptive grid
    results = []
    for per_chunk in (1 << 15, 7):
        monkeypatch.setattr(sample_pool_module, "_SAMPLES_PER_CHUNK", per_chunk)
        x, off = inp.clone().requires_grad_(), offset.clone().requires_grad_()
        out = deform_roi_pool(x, rois, off, (2, 3), 0.5, 0)
        out.square().sum().backward()
        results.append((out.detach(), x.grad, off.grad))
    torch.testing.assert_close(results[0], results[1])


def test_huge_box_is_bounded_by_the_map():
    """One box of 10^14 pixels with offsets: the map's cost, the reference's numbers where
    a sample lands (its bins overlap the map; the rest are zero)."""
    inp, _, _ = make()
    rois = torch.tensor([[0, -5e6, -5e6, 5e6, 5e6]], dtype=torch.float64)
    offset = torch.zeros(1, 2, 2, 3, dtype=torch.float64)
    offset[0, :, 0, 0] = 0.02  # moves bin (0, 0) by 2e4 pixels: off the map
    out = deform_roi_pool(inp, rois, offset.requires_grad_(), (2, 3), 1.0, 0, 0.1)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(offset.grad).all()
    assert not out[0, :, 0, 0].any() and out[0, :, 1, 1].any()


def test_nan_offset_reads_zero():
    """A NaN offset moves its bin nowhere (0, no gradient); the other bins are untouched."""
    inp, rois, offset = make()
    offset[1, 0, 1, 2] = float("nan")
    x = inp.clone().requires_grad_()
    out = deform_roi_pool(x, rois, offset, (2, 3), 0.5, 2)
    expected = deform_roi_pool(inp, rois, offset.nan_to_num(), (2, 3), 0.5, 2)
    assert out[1, :, 1, 2].eq(0).all()
    mask = torch.ones_like(out, dtype=torch.bool)
    mask[1, :, 1, 2] = False
    torch.testing.assert_close(out[mask], expected[mask])


def test_replaced_rois_pool_zeros():
    """Off the CPU, a roi with a bad batch index or NaN (and its offsets) is replaced on the
    device (no sync) by a box that pools 0; the replacement, checked here on the CPU."""
    inp, rois, offset = make()
    rois[0, 0], rois[2, 1] = 7, float("nan")
    boxes, replaced = empty_bad_rois(rois, 2, 0.5)
    assert replaced.tolist() == [True, False, True, False, False]
    out = deform_roi_pool(inp, boxes, offset * ~replaced[:, None, None, None], (2, 3), 0.5)
    assert not out[replaced].any()
