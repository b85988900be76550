"""mmpar's ``mmcv.ops.roi_align`` against an explicit per-bin loop of bilinear samples."""

from __future__ import annotations

import importlib
import inspect
import math
import warnings

import pytest
import torch

from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.deform_roi_pool import deform_roi_pool
from mmpar.compat.ops.riroi_align_rotated import riroi_align_rotated
from mmpar.compat.ops.roi.roi_inputs import empty_bad_rois
from mmpar.compat.ops.roi_align import RoIAlign, roi_align
from mmpar.compat.ops.roi_align_rotated import roi_align_rotated
from tests.compat.ops._reference import (
    DEVICES,
    GRADCHECK_ROIS,
    HALF_DTYPES,
    assert_mmcv_roi_numbers,
    roi_align_corners,
    roi_inputs,
)

pytest.importorskip("torchvision")
roi_align_module = importlib.import_module("mmpar.compat.ops.roi_align")
sampling_module = importlib.import_module("mmpar.compat.ops.roi.roi_sampling")
sample_max_module = importlib.import_module("mmpar.compat.ops.roi.roi_sample_max")


def _small_chunks(monkeypatch, elements: int) -> None:
    """Search in chunks of at most ``elements`` (bins, or rows of one bin)."""
    monkeypatch.setattr(sample_max_module, "_SEARCH_ELEMENTS", elements)
    monkeypatch.setattr(sample_max_module, "_TAP_SLOTS", max(1, elements // 4))


def _bilinear(fmap: list[list[float]], y: float, x: float) -> tuple[float, list]:
    """mmcv's bilinear read of one sample: (value, [(row, col, weight)])."""
    hit = roi_align_corners(y, x, len(fmap), len(fmap[0]))
    if hit is None:
        return 0.0, []
    y_low, y_high, x_low, x_high, weights = hit
    corners = ((y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high))
    taps = [(r, c, w) for (r, c), w in zip(corners, weights)]
    return sum(w * fmap[r][c] for r, c, w in taps), taps


def _reference(inp, rois, out_size, scale, sampling_ratio, mode, aligned, grad_out):
    """Output and input gradient (for ``grad_out``), one bin at a time, in float64."""
    inp, rois, grad_out = inp.double().cpu(), rois.double().cpu(), grad_out.double().cpu()
    n, c, h, w = inp.shape
    ph_n, pw_n = out_size
    out = torch.zeros(rois.shape[0], c, ph_n, pw_n, dtype=torch.float64)
    grad = torch.zeros_like(inp)
    for k, roi in enumerate(rois.tolist()):
        b = int(roi[0])
        off = 0.5 if aligned else 0.0
        x1, y1, x2, y2 = (v * scale - off for v in roi[1:])
        roi_w, roi_h = x2 - x1, y2 - y1
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / ph_n, roi_w / pw_n
        grid_h = sampling_ratio if sampling_ratio > 0 else max(math.ceil(bin_h), 0)
        grid_w = sampling_ratio if sampling_ratio > 0 else max(math.ceil(bin_w), 0)
        for ch in range(c):
            fmap = inp[b, ch].tolist()
            for ph in range(ph_n):
                for pw in range(pw_n):
                    samples = []
                    for iy in range(grid_h):
                        y = y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                        for ix in range(grid_w):
                            x = x1 + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                            samples.append(_bilinear(fmap, y, x))
                    g = grad_out[k, ch, ph, pw].item()
                    if not samples:
                        continue
                    if mode == "avg":
                        out[k, ch, ph, pw] = sum(v for v, _ in samples) / len(samples)
                        for _, taps in samples:
                            for r, col, wt in taps:
                                grad[b, ch, r, col] += g * wt / len(samples)
                    else:
                        best = max(range(len(samples)), key=lambda i: (samples[i][0], -i))
                        out[k, ch, ph, pw] = samples[best][0]
                        for r, col, wt in samples[best][1]:
                            grad[b, ch, r, col] += g * wt
    return out, grad


# Rois inside, partly outside, fully outside, thin, and zero-sized.
_ROIS = [
    [0, 2.0, 3.0, 9.0, 10.0],
    [1, -3.0, -2.5, 4.5, 5.0],  # partly above and left of the map
    [0, 8.0, 6.0, 17.0, 15.0],  # partly below and right
    [1, 20.0, 20.0, 26.0, 24.0],  # entirely outside
    [1, 1.0, 1.0, 12.5, 2.0],  # thin
    [0, 5.0, 5.0, 5.0, 5.0],  # zero-sized
    [1, 0.0, 0.0, 13.0, 11.0],  # the whole map
]


def _case(device, dtype=torch.float32, seed=0):
    """Two images and :data:`_ROIS`."""
    return roi_inputs(_ROIS, device, dtype, seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mmcv_test_numbers(device, dtype):
    """The inputs and expected outputs/gradients of mmcv's own RoIAlign test (avg, ratio 2)."""
    expected = [
        ([[[[1.0, 1.25], [1.5, 1.75]]]], [[[[3.0625, 0.4375], [0.4375, 0.0625]]]]),
        (
            [[[[1.0, 1.25], [1.5, 1.75]], [[4.0, 3.75], [3.5, 3.25]]]],
            [[[[3.0625, 0.4375], [0.4375, 0.0625]], [[3.0625, 0.4375], [0.4375, 0.0625]]]],
        ),
        (
            [[[[1.9375, 4.75], [7.5625, 10.375]]]],
            [
                [
                    [
                        [0.47265625, 0.4296875, 0.4296875, 0.04296875],
                        [0.4296875, 0.390625, 0.390625, 0.0390625],
                        [0.4296875, 0.390625, 0.390625, 0.0390625],
                        [0.04296875, 0.0390625, 0.0390625, 0.00390625],
                    ]
                ]
            ],
        ),
    ]
    assert_mmcv_roi_numbers(
        lambda x, rois: roi_align(x, rois, (2, 2), 1.0, 2, "avg", True), expected, device, dtype
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_matches_reference(device, mode, aligned, sampling_ratio):
    inp, rois = _case(device, torch.float64)
    x = inp.clone().requires_grad_()
    grad_out = torch.randn(rois.shape[0], 3, 2, 3, dtype=torch.float64, device=device)
    out = roi_align(x, rois, (2, 3), 0.5, sampling_ratio, mode, aligned)
    out.backward(grad_out)
    out_ref, grad_ref = _reference(inp, rois, (2, 3), 0.5, sampling_ratio, mode, aligned, grad_out)
    torch.testing.assert_close(out.cpu(), out_ref)
    torch.testing.assert_close(x.grad.cpu(), grad_ref)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_float32_and_scale_one(mode):
    inp, rois = _case("cpu", torch.float32, seed=3)
    rois[:, 1:] /= 2
    x = inp.clone().requires_grad_()
    grad_out = torch.ones(rois.shape[0], 3, 3, 3)
    out = roi_align(x, rois, 3, 1.0, 0, mode, True)
    out.backward(grad_out)
    out_ref, grad_ref = _reference(inp, rois, (3, 3), 1.0, 0, mode, True, grad_out)
    torch.testing.assert_close(out, out_ref.float())
    torch.testing.assert_close(x.grad, grad_ref.float())


@pytest.mark.parametrize("ratio", [0, 2])
def test_max_search_in_chunks(monkeypatch, ratio):
    """rois of many grid sizes searched in several groups, a few bins or rows at a time,
    give the one-pass result and gradient (ties included: a map of whole numbers)."""
    inp, rois = _case("cpu", torch.float64, seed=5)
    inp = inp.mul(2).round()
    grad_out = torch.randn(rois.shape[0], 3, 2, 3, dtype=torch.float64)
    results = []
    for elements in (1 << 19, 64, 1):
        if elements < 1 << 19:
            _small_chunks(monkeypatch, elements)
        x = inp.clone().requires_grad_()
        out = roi_align(x, rois, (2, 3), 0.5, ratio, "max", True)
        out.backward(grad_out)
        results.append((out.detach(), x.grad))
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)
    torch.testing.assert_close(results[2], results[0], rtol=0, atol=0)
    chunks = sampling_module.size_groups(
        torch.tensor([3, 1, 2, 0, 5]), torch.tensor([1, 1, 4, 2, 2]), 6, 64
    )
    assert sorted(i for idx, _, _ in chunks for i in idx.tolist()) == [0, 1, 2, 3, 4]
    assert len(chunks) > 1


def test_max_ties_go_to_the_first_sample():
    """On a flat map every sample ties: the gradient goes to the first sample's pixels."""
    x = torch.ones(1, 1, 5, 5, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 0.3, 0.7, 3.9, 4.1]], dtype=torch.float64)
    out = roi_align(x, rois, 1, 1.0, 2, "max", True)
    out.sum().backward()
    _, grad_ref = _reference(x.detach(), rois, (1, 1), 1.0, 2, "max", True, torch.ones(1, 1, 1, 1))
    assert out.item() == 1.0
    torch.testing.assert_close(x.grad, grad_ref)
    assert int((x.grad != 0).sum()) <= 4


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [True, False])
def test_gradcheck(mode, aligned):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 2, 4, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    rois = torch.tensor(GRADCHECK_ROIS, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda t: roi_align(t, rois, (2, 2), 0.7, 0, mode, aligned), (x,), eps=1e-6, atol=1e-5
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_empty_rois(device, mode):
    x = torch.randn(2, 3, 4, 4, device=device, requires_grad=True)
    out = roi_align(x, torch.zeros(0, 5, device=device), (7, 7), 0.25, 0, mode, True)
    assert out.shape == (0, 3, 7, 7)
    out.sum().backward()
    assert x.grad is not None and not x.grad.any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_half_types(device, dtype, mode):
    inp, rois = _case(device, torch.float32, seed=2)
    x = inp.to(dtype).requires_grad_()
    out = roi_align(x, rois.to(dtype), (2, 3), 0.5, 2, mode, True)
    assert out.dtype == dtype
    out.float().sum().backward()
    assert x.grad.dtype == dtype
    expected = roi_align(inp.to(dtype).float(), rois.to(dtype).float(), (2, 3), 0.5, 2, mode)
    tol = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(out.float(), expected, atol=tol, rtol=tol)


def test_module_and_mmcv_names():
    layer = RoIAlign((7, 7), spatial_scale=0.25, sampling_ratio=2, pool_mode="max")
    assert layer.output_size == (7, 7) and layer.spatial_scale == 0.25
    assert repr(layer) == (
        "RoIAlign(output_size=(7, 7), spatial_scale=0.25, sampling_ratio=2, "
        "pool_mode=max, aligned=True, use_torchvision=False)"
    )
    assert list(inspect.signature(RoIAlign).parameters) == [
        "output_size", "spatial_scale", "sampling_ratio", "pool_mode", "aligned",
        "use_torchvision",
    ]  # fmt: skip
    with pytest.warns(DeprecationWarning) as record:
        old = RoIAlign(out_size=3, sample_num=2, spatial_scale=0.5)
    messages = " ".join(str(w.message) for w in record)
    assert '"out_size" is deprecated' in messages and '"sample_num" is deprecated' in messages
    assert old.output_size == (3, 3) and old.sampling_ratio == 2
    with pytest.raises(TypeError, match="out_size"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        RoIAlign(out_size=3, output_size=3)
    inp, rois = _case("cpu")
    assert torch.equal(layer(inp, rois), roi_align(inp, rois, 7, 0.25, 2, "max", True))
    # mmcv's use_torchvision path is torchvision's roi_align: average pooling.
    tv = RoIAlign(7, 0.25, 2, pool_mode="max", use_torchvision=True)
    assert torch.equal(tv(inp, rois), roi_align(inp, rois, 7, 0.25, 2, "avg", True))


def test_bad_arguments():
    x = torch.randn(1, 2, 4, 4)
    rois = torch.tensor([[0, 0.0, 0.0, 2.0, 2.0]])
    with pytest.raises(ValueError, match="pool_mode"):
        roi_align(x, rois, 2, 1.0, 0, "sum")
    with pytest.raises(ValueError, match="pool_mode"):
        RoIAlign(2, pool_mode="sum")
    with pytest.raises(ValueError, match=r"\(K, 5\)"):
        roi_align(x, rois[:, 1:], 2)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        roi_align(x[0], rois, 2)
    with pytest.raises(TypeError, match="floating-point"):
        roi_align(x.long(), rois, 2)
    with pytest.raises(TypeError, match="output_size"):
        roi_align(x, rois, (2, 2, 2))
    with pytest.raises(ValueError, match="output_size"):
        roi_align(x, rois, 0)
    with pytest.raises(ValueError, match="batch indices"):
        roi_align(x, torch.tensor([[1, 0.0, 0.0, 2.0, 2.0]]), 2)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            roi_align(x, torch.tensor([[0, 0.0, bad, 2.0, 2.0]]), 2)


def test_max_rois_without_samples(monkeypatch):
    """Zero-sized rois (aligned, adaptive grid) have no samples: 0 and no gradient, also
    when they make up a chunk of their own."""
    _small_chunks(monkeypatch, 1)
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 1.0, 1.0, 1.0, 1.0], [0, 1.0, 1.0, 1.0, 3.0], [0, 0.0, 0.0, 3.0, 3.0]])
    out = roi_align(x, rois.double(), 2, 1.0, 0, "max", True)
    out[:2].sum().backward()
    assert not out[:2].any() and not x.grad.any()
    assert out[2].ne(0).all()


# ------------------------------------------------------------ boundary checks and defined results


def test_bad_scale_ratio_and_mode():
    x = torch.randn(1, 2, 4, 4)
    rois = torch.tensor([[0, 0.0, 0.0, 2.0, 2.0]])
    for scale in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="spatial_scale"):
            roi_align(x, rois, 2, scale)
        with pytest.raises(ValueError, match="spatial_scale"):
            RoIAlign(2, scale)
    with pytest.raises(TypeError, match="spatial_scale"):
        roi_align(x, rois, 2, "1")
    with pytest.raises(ValueError, match="sampling_ratio"):
        roi_align(x, rois, 2, 1.0, -1)
    for ratio in (2.5, "2", True, None):
        with pytest.raises(TypeError, match="sampling_ratio"):
            roi_align(x, rois, 2, 1.0, ratio)
        with pytest.raises(TypeError, match="sampling_ratio"):
            RoIAlign(2, 1.0, ratio)
    assert torch.equal(roi_align(x, rois, 2, 1.0, 2.0), roi_align(x, rois, 2, 1.0, 2))
    # mmcv asserts pool_mode and the rois' shape: the errors are AssertionErrors as well.
    for call in (
        lambda: roi_align(x, rois, 2, 1.0, 0, "sum"),
        lambda: RoIAlign(2, pool_mode="sum"),
        lambda: roi_align(x, rois[:, 1:], 2),
    ):
        with pytest.raises(ArgumentError, match=r"pool_mode|\(K, 5\)") as info:
            call()
        assert isinstance(info.value, AssertionError)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_inverted_box_has_no_samples(mode):
    """aligned, adaptive: a box with x2 < x1 has a grid of no samples, 0 and no gradient
    (torchvision's CPU kernel sizes a buffer from the negative count and raises)."""
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 4.0, 1.0, 1.0, 5.0], [0, 1.0, 1.0, 4.0, 5.0]], dtype=torch.float64)
    out = roi_align(x, rois, 2, 1.0, 0, mode, True)
    out[0].sum().backward()
    assert not out[0].any() and not x.grad.any() and out[1].any()
    ref, _ = _reference(x.detach(), rois, (2, 2), 1.0, 0, mode, True, torch.ones(2, 2, 2, 2))
    torch.testing.assert_close(out.detach(), ref)


@pytest.mark.parametrize("aligned", [True, False])
def test_sample_lists_match_the_kernel(monkeypatch, aligned):
    """Average pooling from the sample lists (what a roi too large for torchvision's buffer
    gets) gives the kernel's numbers, and its gradient."""
    inp, rois = _case("cpu", torch.float64, seed=4)
    grad_out = torch.randn(rois.shape[0], 3, 2, 3, dtype=torch.float64)
    results = []
    for limit in (1 << 20, 0):
        monkeypatch.setattr(roi_align_module, "_KERNEL_SAMPLES", limit)
        x = inp.clone().requires_grad_()
        out = roi_align(x, rois, (2, 3), 0.5, 0, "avg", aligned)
        out.backward(grad_out)
        results.append((out.detach(), x.grad))
    torch.testing.assert_close(results[0], results[1])


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_large_grids_list_only_the_samples_near_the_map(monkeypatch, mode):
    """Boxes far larger than the map (an adaptive grid of ~60 x 60 per bin): only a window
    of each grid is listed, and the results are the whole grid's."""
    monkeypatch.setattr(roi_align_module, "_KERNEL_SAMPLES", 0)
    gen = torch.Generator().manual_seed(6)
    inp = torch.randn(2, 1, 5, 6, dtype=torch.float64, generator=gen)
    rois = torch.tensor(
        [[0, -50.0, -60.0, 70.0, 55.0], [1, 3.0, -100.0, 120.0, 4.0], [1, -90, 2, 2, 30]],
        dtype=torch.float64,
    )
    x = inp.clone().requires_grad_()
    grad_out = torch.randn(3, 1, 2, 2, dtype=torch.float64, generator=gen)
    out = roi_align(x, rois, (2, 2), 1.0, 0, mode, True)
    out.backward(grad_out)
    ref, grad_ref = _reference(inp, rois, (2, 2), 1.0, 0, mode, True, grad_out)
    torch.testing.assert_close(out.detach(), ref)
    torch.testing.assert_close(x.grad, grad_ref)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_huge_box_is_bounded_by_the_map(mode):
    """One box of 10^14 pixels (an adaptive grid of 10^12 samples per bin): memory and time
    of the map's size, not the box's (torchvision's CPU kernel ends in bad_alloc)."""
    x = torch.randn(1, 4, 30, 40, requires_grad=True)
    rois = torch.tensor([[0, -5e6, -5e6, 5e6, 5e6], [0, 2.0, 3.0, 20.0, 25.0]])
    out = roi_align(x, rois, 7, 1.0, 0, mode, True)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert out[0, :, 3, 3].any() and not out[0, :, 0].any()  # the map lies in the middle bin


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_overflowing_box_pools_zeros(mode):
    """A box of 10^30 pixels: float32's samples overflow to inf, which read 0 (mmcv's
    bounds test), not NaN (inf times a zero weight), in both modes, and backward."""
    x = torch.randn(1, 2, 8, 8, requires_grad=True)
    rois = torch.tensor([[0, -1e30, -1e30, 1e30, 1e30]])
    out = roi_align(x, rois, 2, 1.0, 0, mode, True)
    out.sum().backward()
    assert torch.equal(out, torch.zeros_like(out)) and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [True, False])
def test_replaced_rois_pool_zeros(mode, aligned):
    """Off the CPU, a roi with a bad batch index or NaN is replaced on the device (no sync)
    by a box that pools 0; the replacement itself, checked here on the CPU."""
    x = torch.randn(2, 3, 5, 5) + 10
    rois = torch.tensor([[2, 0.0, 0.0, 3.0, 3.0], [0, 0.0, float("inf"), 3.0, 3.0]])
    for scale, ratio in ((1.0, 0), (0.25, 2), (8.0, 0)):
        boxes, replaced = empty_bad_rois(rois, 2, scale)
        assert replaced.all()
        assert not roi_align(x, boxes, 2, scale, ratio, mode, aligned).any()


def test_max_without_gradient_is_the_same():
    """The search keeps the chosen taps only for a backward pass; the values are alike."""
    inp, rois = _case("cpu", torch.float32, seed=7)
    with torch.no_grad():
        plain = roi_align(inp, rois, (2, 3), 0.5, 0, "max", True)
    tracked = roi_align(inp.clone().requires_grad_(), rois, (2, 3), 0.5, 0, "max", True)
    assert torch.equal(plain, tracked.detach())


@pytest.mark.parametrize(
    "name, call",
    [
        ("roi_align", lambda x, r, rr, n: roi_align(x, r, 7, 1.0, n, "max")),
        ("roi_align", lambda x, r, rr, n: roi_align(x, r, 7, 1.0, n)),
        ("deform_roi_pool", lambda x, r, rr, n: deform_roi_pool(x, r, None, 7, 1.0, n)),
        ("roi_align_rotated", lambda x, r, rr, n: roi_align_rotated(x, rr, 7, 1.0, n)),
        ("riroi_align_rotated", lambda x, r, rr, n: riroi_align_rotated(x, rr, 7, 1.0, n, 8)),
    ],
)
def test_a_fixed_sampling_ratio_of_too_many_samples_is_refused(name, call) -> None:  # noqa: ANN001
    # 128 rois x 7 x 7 bins x 10**6 ** 2 samples: mmcv's kernels loop for days on such a
    # typo, mmpar's ran out of memory or hung. 0 (adaptive) and small ratios still run.
    x = torch.rand(1, 8, 20, 20)
    rois = torch.tensor([[0, 1, 1, 10, 10.0]] * 128)
    rotated = torch.tensor([[0, 5, 5, 4, 4, 0.3]] * 128)
    param = "num_samples" if name == "riroi_align_rotated" else "sampling_ratio"
    with pytest.raises(ValueError, match=rf"mmcv.ops.{name}: {param}=1000000 asks for 6.27e\+15"):
        call(x, rois, rotated, 10**6)
    for ratio in (0, 4):
        assert call(x, rois, rotated, ratio).shape == (128, 8, 7, 7)
