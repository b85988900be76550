"""mmpar's ``mmcv.ops.roi_align_rotated`` against an explicit per-bin loop of rotated samples."""

from __future__ import annotations

import importlib
import inspect
import math
import warnings

import pytest
import torch

from mmpar.compat.ops.roi_align_rotated import (
    RoIAlignRotated,
    roi_align_rotated,
    rotated_roi_average,
)
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, roi_align_read, rotated_roi_samples

rar_module = importlib.import_module("mmpar.compat.ops.roi_align_rotated")
roi_align_module = importlib.import_module("mmpar.compat.ops.roi_align")

# Two images; angles 0, +-pi/2, a full-ish turn; a roi partly off the map, one of zero size.
ROIS = [
    [0, 5.0, 4.0, 6.0, 3.0, 0.0],
    [1, 6.5, 5.5, 7.0, 4.5, math.pi / 2],
    [1, 3.0, 7.0, 5.0, 9.0, -math.pi / 2],
    [0, 12.0, 1.0, 8.0, 5.0, 0.7],
    [1, 7.0, 6.0, 3.5, 2.5, -2.4],
    [0, 4.0, 4.0, 0.0, 0.0, 0.3],
    [1, 9.0, 3.0, 11.0, 1.2, 5.9],
]


def _reference(inp, rois, out_size, scale, sampling_ratio, aligned, clockwise, grad_out):
    """Output and input gradient (for ``grad_out``), one sample at a time, in float64."""
    inp, grad_out = inp.double().cpu(), grad_out.double().cpu()
    _, c, _, _ = inp.shape
    out = torch.zeros(rois.shape[0], c, *out_size, dtype=torch.float64)
    grad = torch.zeros_like(inp)
    for k, roi in enumerate(rois.double().cpu().tolist()):
        b = int(roi[0])
        points, count = rotated_roi_samples(
            roi, out_size, scale, sampling_ratio, aligned, clockwise
        )
        for ch in range(c):
            fmap = inp[b, ch].tolist()
            for ph, row in enumerate(points):
                for pw, samples in enumerate(row):
                    for y, x in samples:
                        value, taps = roi_align_read(fmap, y, x)
                        out[k, ch, ph, pw] += value / count
                        for r, col, wt in taps:
                            grad[b, ch, r, col] += grad_out[k, ch, ph, pw] * wt / count
    return out, grad


def _case(device="cpu", dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    inp = torch.randn(2, 3, 7, 9, generator=gen, dtype=torch.float64)
    return inp.to(device, dtype), torch.tensor(ROIS, dtype=torch.float64).to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mmcv_numbers(device, dtype):
    """mmcv's own expected numbers: a 4 x 4 map, a 3 x 3 roi at angle 0 and pi/2."""
    x = torch.tensor(
        [[[[1.0, 2, 5, 6], [3, 4, 7, 8], [9, 10, 13, 14], [11, 12, 15, 16]]]],
        dtype=dtype,
        device=device,
        requires_grad=True,
    )
    rois = torch.tensor([[0, 1.5, 1.5, 3, 3, 0], [0, 1.5, 1.5, 3, 3, math.pi / 2]], dtype=dtype)
    out = roi_align_rotated(x, rois.to(device), (2, 2), 1.0, 2, True)
    out.backward(torch.ones_like(out))
    expected = [[[[1.9375, 4.75], [7.5625, 10.375]]], [[[7.5625, 1.9375], [10.375, 4.75]]]]
    torch.testing.assert_close(out.cpu(), torch.tensor(expected, dtype=dtype))
    edge = [0.47265625, 0.4296875, 0.4296875, 0.04296875]
    inner = [0.4296875, 0.390625, 0.390625, 0.0390625]
    tail = [0.04296875, 0.0390625, 0.0390625, 0.00390625]
    grad = torch.tensor([[[edge, inner, inner, tail]]], dtype=dtype) * 2  # both rois
    torch.testing.assert_close(x.grad.cpu(), grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("clockwise", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_matches_reference(device, aligned, clockwise, sampling_ratio):
    inp, rois = _case(device)
    x = inp.clone().requires_grad_()
    grad_out = torch.randn(rois.shape[0], 3, 2, 3, dtype=torch.float64, device=device)
    out = roi_align_rotated(x, rois, (2, 3), 0.5, sampling_ratio, aligned, clockwise)
    out.backward(grad_out)
    ref_out, ref_grad = _reference(
        inp, rois, (2, 3), 0.5, sampling_ratio, aligned, clockwise, grad_out
    )
    torch.testing.assert_close(out.cpu(), ref_out)
    torch.testing.assert_close(x.grad.cpu(), ref_grad)


def test_float32_scale_one():
    inp, rois = _case(dtype=torch.float32, seed=3)
    rois[:, 1:5] /= 2
    x = inp.clone().requires_grad_()
    out = roi_align_rotated(x, rois, 3, 1.0)
    out.sum().backward()
    ref_out, ref_grad = _reference(inp, rois, (3, 3), 1.0, 0, True, False, torch.ones(7, 3, 3, 3))
    torch.testing.assert_close(out, ref_out.float())
    torch.testing.assert_close(x.grad, ref_grad.float())


def test_chunks_and_sample_blocks(monkeypatch):
    """rois read in many chunks, and a roi's samples in many blocks, give the one-pass result."""
    inp, rois = _case(seed=5)
    rois[1, 3:5] = torch.tensor([40.0, 30.0])  # a big adaptive grid
    x = inp.clone().requires_grad_()
    whole = roi_align_rotated(x, rois, (2, 3), 0.5)
    (grad_whole,) = torch.autograd.grad(whole.sum(), x)
    monkeypatch.setattr(roi_align_module, "_CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(rar_module, "_CHUNK_ENTRIES", 16)
    parts = roi_align_rotated(x, rois, (2, 3), 0.5)
    (grad_parts,) = torch.autograd.grad(parts.sum(), x)
    torch.testing.assert_close(parts, whole)
    torch.testing.assert_close(grad_parts, grad_whole)


@pytest.mark.parametrize("aligned, clockwise", [(True, False), (False, True)])
def test_large_grids_read_near_the_map_only(monkeypatch, aligned, clockwise):
    """An adaptive grid read by windows near the map gives the whole grid's average and
    gradient (every roi forced onto that path here)."""
    inp, _ = _case(seed=7)
    rois = torch.tensor(
        [
            [0, 4.0, 3.0, 60.0, 50.0, 0.3],  # over the whole map
            [1, -20.0, 10.0, 44.0, 70.0, -2.2],  # partly off it
            [1, 300.0, 200.0, 50.0, 40.0, 1.0],  # far off
            [0, 5.0, 4.0, 0.0, 7.0, 0.4],  # no samples when aligned
        ],
        dtype=torch.float64,
    )
    grad_out = torch.randn(4, 3, 2, 3, dtype=torch.float64)
    x = inp.clone().requires_grad_()
    whole = roi_align_rotated(x, rois, (2, 3), 0.5, 0, aligned, clockwise)
    (grad_whole,) = torch.autograd.grad(whole, x, grad_out)
    monkeypatch.setattr(rar_module, "_DENSE_SAMPLES", 16)
    near = roi_align_rotated(x, rois, (2, 3), 0.5, 0, aligned, clockwise)
    (grad_near,) = torch.autograd.grad(near, x, grad_out)
    torch.testing.assert_close(near, whole)
    torch.testing.assert_close(grad_near, grad_whole)


def test_huge_roi_is_bounded():
    """A roi 10^7 pixels a side (an adaptive grid of 2.5e13 samples a bin): its bins are
    the average over the samples that land near the map, which a float64 reference reads
    one by one (the rest read 0)."""
    gen = torch.Generator().manual_seed(3)
    inp = torch.rand(1, 2, 5, 6, generator=gen, dtype=torch.float64)
    size, angle = 1e7, 0.4
    cos, sin = math.cos(angle), math.sin(angle)
    # Bin (0, 0) of 2 x 2 spans offsets [-5e6, 0) from the centre, one sample per unit:
    # put the map's centre at offsets (-2.5e6 + 0.37, -2.5e6 + 0.21) in it.
    yy0, xx0 = -2.5e6 + 0.37, -2.5e6 + 0.21
    cy, cx = 2.5 - (yy0 * cos - xx0 * sin), 3.0 - (yy0 * sin + xx0 * cos)
    rois = torch.tensor([[0, cx + 0.5, cy + 0.5, size, size, angle]], dtype=torch.float64)
    out = roi_align_rotated(inp, rois, 2, 1.0)
    cells = math.ceil(size / 2)
    expected = torch.zeros(2)
    for i in range(round(yy0 + 5e6) - 12, round(yy0 + 5e6) + 12):
        for j in range(round(xx0 + 5e6) - 12, round(xx0 + 5e6) + 12):
            yy = -size / 2 + (i + 0.5) * (size / 2) / cells
            xx = -size / 2 + (j + 0.5) * (size / 2) / cells
            y, x = yy * cos - xx * sin + cy, yy * sin + xx * cos + cx
            for ch in range(2):
                expected[ch] += roi_align_read(inp[0, ch].tolist(), y, x)[0] / cells**2
    assert expected.min() > 0
    torch.testing.assert_close(out[0, :, 0, 0], expected.double())
    assert not out[0, :, 1].any() and not out[0, :, 0, 1].any()


def test_gradcheck():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 2, 5, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    rois = torch.tensor(
        [[0, 2.2, 2.1, 3.3, 2.4, 0.4], [1, 4.3, 1.2, 5.1, 3.3, -1.3], [1, 0.2, 4.1, 2.0, 2.0, 2.0]],
        dtype=torch.float64,
    )
    for aligned in (True, False):
        assert torch.autograd.gradcheck(
            lambda t: roi_align_rotated(t, rois, (2, 2), 1.0, 0, aligned, True),
            (x,),
            eps=1e-6,
            atol=1e-5,
        )


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rois(device):
    x = torch.randn(2, 3, 4, 4, device=device, requires_grad=True)
    out = roi_align_rotated(x, torch.zeros(0, 6, device=device), (7, 7), 0.25)
    assert out.shape == (0, 3, 7, 7)
    out.sum().backward()
    assert x.grad is not None and not x.grad.any()


def test_degenerate_rois():
    """A zero-sized roi has no samples when aligned (adaptive grid): 0 and no gradient; in
    the legacy mode it is a 1 x 1 roi."""
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 2.0, 2.0, 0.0, 0.0, 0.5], [0, 2.0, 2.0, 0.0, 3.0, 0.0]])
    out = roi_align_rotated(x, rois.double(), 2, 1.0)
    out.sum().backward()
    assert not out.any() and not x.grad.any()
    legacy = roi_align_rotated(x, rois.double(), 2, 1.0, 0, False)
    unit = rois.double().clone()
    unit[:, 3:5] = unit[:, 3:5].clamp(min=1.0)
    torch.testing.assert_close(legacy, roi_align_rotated(x, unit, 2, 1.0, 0, False))


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_bad_rois_pool_zeros_off_the_cpu(aligned, sampling_ratio):
    """The path of devices other than the CPU (no value check, which would sync): a roi
    of a batch index outside [0, N) or with NaN or inf pools zeros, with no gradient; the
    others are pooled as ever."""
    x = torch.rand(2, 3, 6, 6, dtype=torch.float64) + 1
    x.requires_grad_()
    good = [0.0, 3.0, 3.0, 4.0, 2.0, 0.3]
    bad = [
        [2.0, 3.0, 3.0, 4.0, 2.0, 0.3],  # read image 0 (table rows wrapped)
        [-1.0, 3.0, 3.0, 4.0, 2.0, 0.3],
        [math.nan, 3.0, 3.0, 4.0, 2.0, 0.3],
        [1.0, math.nan, 3.0, 4.0, 2.0, 0.3],
        [1.0, 3.0, 3.0, math.inf, 2.0, 0.3],
        [1.0, 3.0, 3.0, 4.0, 2.0, -math.inf],
    ]
    rois = torch.tensor([good, *bad, [1.9, *good[1:]]], dtype=torch.float64)
    out = rotated_roi_average(x, rois, (2, 3), 1.0, sampling_ratio, aligned, False)
    assert torch.equal(out[1:-1], torch.zeros_like(out[1:-1]))
    checked = roi_align_rotated(x, rois[[0, -1]], (2, 3), 1.0, sampling_ratio, aligned)
    torch.testing.assert_close(out[[0, -1]], checked, rtol=0, atol=0)
    (grad,) = torch.autograd.grad(out[1:-1].sum(), x)
    assert not grad.any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_types(device, dtype):
    inp, rois = _case(device, torch.float32, seed=2)
    x = inp.to(dtype).requires_grad_()
    out = roi_align_rotated(x, rois.to(dtype), (2, 3), 0.5, 2)
    assert out.dtype == dtype
    out.float().sum().backward()
    assert x.grad.dtype == dtype
    expected = roi_align_rotated(inp.to(dtype).float(), rois.to(dtype).float(), (2, 3), 0.5, 2)
    tol = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(out.float(), expected, atol=tol, rtol=tol)


def test_module_and_mmcv_names():
    layer = RoIAlignRotated((7, 7), spatial_scale=0.25, sampling_ratio=2, clockwise=True)
    assert repr(layer) == (
        "RoIAlignRotated(output_size=(7, 7), spatial_scale=0.25, sampling_ratio=2, "
        "aligned=True, clockwise=True)"
    )
    assert list(inspect.signature(RoIAlignRotated).parameters) == [
        "output_size", "spatial_scale", "sampling_ratio", "aligned", "clockwise",
    ]  # fmt: skip
    assert list(inspect.signature(roi_align_rotated).parameters) == [
        "input", "rois", "output_size", "spatial_scale", "sampling_ratio", "aligned",
        "clockwise",
    ]  # fmt: skip
    with pytest.warns(DeprecationWarning) as record:
        old = RoIAlignRotated(out_size=3, sample_num=2, spatial_scale=0.5)
    messages = " ".join(str(w.message) for w in record)
    assert '"out_size" is deprecated' in messages and '"sample_num" is deprecated' in messages
    assert old.output_size == (3, 3) and old.sampling_ratio == 2
    with pytest.raises(TypeError, match="out_size"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        RoIAlignRotated(out_size=3, output_size=3, spatial_scale=1.0)
    inp, rois = _case()
    assert torch.equal(layer(inp, rois), roi_align_rotated(inp, rois, 7, 0.25, 2, True, True))


def test_bad_arguments():
    x = torch.randn(2, 2, 4, 4)
    rois = torch.tensor([[0, 2.0, 2.0, 2.0, 2.0, 0.1]])
    with pytest.raises(ValueError, match=r"roi_align_rotated: rois must have shape \(K, 6\)"):
        roi_align_rotated(x, rois[:, :5], 2, 1.0)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        roi_align_rotated(x[0], rois, 2, 1.0)
    with pytest.raises(TypeError, match="floating-point"):
        roi_align_rotated(x.long(), rois, 2, 1.0)
    with pytest.raises(TypeError, match="output_size"):
        roi_align_rotated(x, rois, (2, 2, 2), 1.0)
    with pytest.raises(ValueError, match="output_size"):
        RoIAlignRotated(0, 1.0)
    for batch in (2.0, -1.0):
        with pytest.raises(ValueError, match=r"rois\[:, 0\] must be batch indices in \[0, 2\)"):
            roi_align_rotated(x, torch.tensor([[batch, 2.0, 2.0, 2.0, 2.0, 0.1]]), 2, 1.0)
    with pytest.raises(ValueError, match="finite"):
        roi_align_rotated(x, torch.tensor([[0, 2.0, 2.0, 2.0, 2.0, math.inf]]), 2, 1.0)
    with pytest.raises(ValueError, match="w, h >= 0 when aligned"):
        roi_align_rotated(x, torch.tensor([[0, 2.0, 2.0, -2.0, 2.0, 0.1]]), 2, 1.0)
    # The legacy mode clamps sizes to 1, as mmcv.
    roi_align_rotated(x, torch.tensor([[0, 2.0, 2.0, -2.0, 2.0, 0.1]]), 2, 1.0, 0, False)


def test_bad_scale_and_sampling_ratio():
    """spatial_scale and sampling_ratio are checked as roi_align's (a negative ratio stays
    adaptive, as mmcv's rotated kernels read it), in the function and the module."""
    x, rois = torch.randn(2, 2, 4, 4), torch.tensor([[0, 2.0, 2.0, 2.0, 2.0, 0.1]])
    for scale, error in ((None, TypeError), ("1", TypeError), (math.nan, ValueError),
                         (0.0, ValueError), (-0.5, ValueError)):  # fmt: skip
        with pytest.raises(error, match="roi_align_rotated: spatial_scale must"):
            roi_align_rotated(x, rois, 2, scale)
        with pytest.raises(error, match="RoIAlignRotated: spatial_scale must"):
            RoIAlignRotated(2, scale)
    for ratio in (2.5, None, math.nan):
        adaptive = r"roi_align_rotated: sampling_ratio must be an int \(<= 0: adaptive\)"
        with pytest.raises(TypeError, match=adaptive):
            roi_align_rotated(x, rois, 2, 1.0, ratio)
        with pytest.raises(TypeError, match="RoIAlignRotated: sampling_ratio must be an int"):
            RoIAlignRotated(2, 1.0, ratio)
    assert torch.equal(roi_align_rotated(x, rois, 2, 1.0, -1), roi_align_rotated(x, rois, 2, 1.0))


def test_no_channels():
    """A map of no channels gives (K, 0, PH, PW), forward and backward."""
    x = torch.randn(2, 0, 5, 5, requires_grad=True)
    out = roi_align_rotated(x, torch.tensor([[1, 2.0, 2.0, 3.0, 2.0, 0.3]]), (2, 3), 1.0)
    out.sum().backward()
    assert out.shape == (1, 0, 2, 3) and x.grad.shape == x.shape


def test_rois_beyond_float32_pixels():
    """Rois of 1e9 and 1e30 pixels in float32 (samples float32 cannot place to the pixel)
    give the float64 result, at once (their windows had grown with the rounding: half a
    minute for 1e9, a hang for 1e30)."""
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(1, 2, 6, 7, generator=gen, dtype=torch.float64)
    for size in (1e9, 1e30):
        rois = torch.tensor([[0, 3.0, 2.0, size, size, 0.4]], dtype=torch.float64)
        out = roi_align_rotated(x.float(), rois.float(), 2, 1.0)
        torch.testing.assert_close(out, roi_align_rotated(x, rois, 2, 1.0).float())
