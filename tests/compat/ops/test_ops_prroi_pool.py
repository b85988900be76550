"""mmpar's ``mmcv.ops.prroi_pool`` against the definition, integrated cell by cell in Python.

Each bin's value is the integral of the map's bilinear interpolant (pixels off the map read
0) over the bin, divided by its area. On a unit cell the interpolant is bilinear, so the
reference integrates it exactly with two Gauss-Legendre nodes per axis on each part of the
bin that lies in one cell, reading the map with an explicit bilinear read.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.prroi_pool import PrRoIPool, prroi_pool
from mmpar.compat.ops.roi.roi_inputs import empty_bad_rois
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, MMCV_ROI_CASES

# The module: the package attribute of its name is the function, as in mmcv.
prroi_module = importlib.import_module("mmpar.compat.ops.prroi_pool")

_GAUSS = ((0.5 - 0.5 / math.sqrt(3.0), 0.5), (0.5 + 0.5 / math.sqrt(3.0), 0.5))


def _nodes(lo, hi):
    """``[(t, weight)]`` integrating exactly over ``[lo, hi]`` any function that is a cubic
    or less on each unit interval ``[i, i + 1]``."""
    nodes, cell = [], math.floor(lo)
    while cell < hi:
        a, b = max(lo, cell), min(hi, cell + 1)
        nodes += [(a + (b - a) * t, (b - a) * w) for t, w in _GAUSS if b > a]
        cell += 1
    return nodes


def _taps(y, x, height, width):
    """``[(i, j, weight)]``: the map's pixels a bilinear read at ``(y, x)`` uses."""
    taps = []
    for i in (math.floor(y), math.floor(y) + 1):
        for j in (math.floor(x), math.floor(x) + 1):
            weight = max(0.0, 1 - abs(y - i)) * max(0.0, 1 - abs(x - j))
            if 0 <= i < height and 0 <= j < width and weight:
                taps.append((i, j, weight))
    return taps


def _reference(inp, rois, out_size, scale, grad_out):
    """``(out, input grad, rois grad)`` from the definition, for ``grad_out`` upstream."""
    inp, rois, grad_out = inp.double().cpu(), rois.double().cpu(), grad_out.double().cpu()
    _, channels, height, width = inp.shape
    n_ph, n_pw = out_size
    out = torch.zeros(rois.shape[0], channels, n_ph, n_pw, dtype=torch.float64)
    grad_in, grad_rois = torch.zeros_like(inp), torch.zeros_like(rois)
    fmap = inp.tolist()

    def read(b, c, y, x):
        return sum(w * fmap[b][c][i][j] for i, j, w in _taps(y, x, height, width))

    for k, (b, *box) in enumerate(rois.tolist()):
        b = int(b)
        x1, y1, x2, y2 = (v * scale for v in box)
        bh, bw = max(y2 - y1, 0.0) / n_ph, max(x2 - x1, 0.0) / n_pw
        area = bh * bw
        if area == 0:
            continue
        for p in range(n_ph):
            for q in range(n_pw):
                top, left = y1 + bh * p, x1 + bw * q
                bottom, right = top + bh, left + bw
                ys, xs = _nodes(top, bottom), _nodes(left, right)
                for c in range(channels):
                    g = grad_out[k, c, p, q].item()
                    value = 0.0
                    for y, wy in ys:
                        for x, wx in xs:
                            for i, j, w in _taps(y, x, height, width):
                                value += wy * wx * w * fmap[b][c][i][j]
                                grad_in[b, c, i, j] += g * wy * wx * w / area
                    value /= area
                    out[k, c, p, q] = value
                    # Moving an edge adds or removes f along it, and changes the area.
                    on_left = sum(wy * read(b, c, y, left) for y, wy in ys)
                    on_right = sum(wy * read(b, c, y, right) for y, wy in ys)
                    on_top = sum(wx * read(b, c, top, x) for x, wx in xs)
                    on_bottom = sum(wx * read(b, c, bottom, x) for x, wx in xs)
                    d_left, d_right = (bh * value - on_left) / area, (on_right - bh * value) / area
                    d_top, d_bottom = (bw * value - on_top) / area, (on_bottom - bw * value) / area
                    # The edges of bin (p, q) are at fractions q/PW, (q+1)/PW of the box.
                    fl, fr, ft, fb = q / n_pw, (q + 1) / n_pw, p / n_ph, (p + 1) / n_ph
                    grad_rois[k, 1] += g * scale * (d_left * (1 - fl) + d_right * (1 - fr))
                    grad_rois[k, 3] += g * scale * (d_left * fl + d_right * fr)
                    grad_rois[k, 2] += g * scale * (d_top * (1 - ft) + d_bottom * (1 - fb))
                    grad_rois[k, 4] += g * scale * (d_top * ft + d_bottom * fb)
    return out, grad_in, grad_rois


# Rois inside, partly and fully outside, with integer edges, bins thinner than a pixel,
# zero width or height, inverted.
_ROIS = [
    [0, 1.3, 0.7, 8.6, 9.1],
    [1, -3.0, -2.5, 4.5, 5.0],  # partly above and left of the map
    [0, 7.2, 6.1, 17.9, 15.3],  # partly below and right
    [1, 20.0, 20.0, 26.0, 24.0],  # entirely outside
    [1, 2.0, 2.0, 10.0, 8.0],  # integer edges
    [0, 4.1, 3.3, 4.3, 3.35],  # bins far thinner than a pixel
    [1, 1.0, 1.0, 12.5, 2.0],  # thin
    [0, 5.0, 2.0, 5.0, 9.0],  # zero width: zeros, no gradient
    [0, 9.0, 5.0, 3.0, 8.0],  # inverted: zeros, no gradient
    [1, -1.9, -1.9, 0.2, 0.1],  # mostly in the fading border outside the map
]


def _case(device, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    inp = torch.randn(2, 3, 6, 7, generator=gen, dtype=torch.float64)
    return inp.to(device, dtype), torch.tensor(_ROIS, dtype=torch.float64).to(device, dtype)


def _run(inp, rois, out_size, scale, grad_out):
    x, r = inp.clone().requires_grad_(), rois.clone().requires_grad_()
    out = prroi_pool(x, r, out_size, scale)
    out.backward(grad_out)
    return out, x.grad, r.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", [1.0, 0.5, 1 / 3])
@pytest.mark.parametrize("out_size", [(2, 3), (3, 3)])
def test_matches_reference(device, scale, out_size):
    inp, rois = _case(device)
    gen = torch.Generator().manual_seed(3)
    grad_out = torch.randn(rois.shape[0], 3, *out_size, dtype=torch.float64, generator=gen)
    out, grad_in, grad_rois = _run(inp, rois, out_size, scale, grad_out.to(device))
    ref_out, ref_in, ref_rois = _reference(inp, rois, out_size, scale, grad_out)
    torch.testing.assert_close(out.cpu(), ref_out)
    torch.testing.assert_close(grad_in.cpu(), ref_in)
    torch.testing.assert_close(grad_rois.cpu(), ref_rois)
    assert not out[7:9].any() and not grad_rois[7:9].any()  # zero width, inverted
    assert not grad_rois[:, 0].any()  # the batch index gets no gradient


@pytest.mark.parametrize("device", DEVICES)
def test_float32_matches_reference(device):
    inp, rois = _case(device, torch.float32, seed=1)
    # Seeded: the global generator's state depends on which tests ran before in the worker.
    gen = torch.Generator().manual_seed(1)
    grad_out = torch.randn(rois.shape[0], 3, 2, 2, dtype=torch.float64, generator=gen)
    out, grad_in, grad_rois = _run(inp, rois, (2, 2), 0.5, grad_out.float().to(device))
    ref_out, ref_in, ref_rois = _reference(inp, rois, (2, 2), 0.5, grad_out.float())
    torch.testing.assert_close(out.cpu().double(), ref_out, rtol=1e-4, atol=1e-5)
    # A pixel's float32 gradient sums the products of every bin that reads it: about 0.5%
    # of random upstream gradients leave an entry up to 1.5e-5 from the float64 reference.
    torch.testing.assert_close(grad_in.cpu().double(), ref_in, rtol=1e-4, atol=3e-5)
    torch.testing.assert_close(grad_rois.cpu().double(), ref_rois, rtol=1e-3, atol=1e-3)


# mmcv's test: outputs, input gradients and roi gradients for an all-ones upstream
# gradient, 2 x 2 bins at scale 1, on MMCV_ROI_CASES.
_MMCV_EXPECTED = [
    ([[[[1.75, 2.25], [2.75, 3.25]]]], [[[[1.0, 1.0], [1.0, 1.0]]]], [[0.0, 2.0, 4.0, 2.0, 4.0]]),
    (
        [[[[1.75, 2.25], [2.75, 3.25]], [[3.25, 2.75], [2.25, 1.75]]]],
        [[[[1.0, 1.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]]],
        [[0.0, 0.0, 0.0, 0.0, 0.0]],
    ),
    (
        [[[[3.75, 6.91666651], [10.08333302, 13.25]]]],
        [
            [
                [
                    [0.11111111, 0.22222224, 0.22222222, 0.11111111],
                    [0.22222224, 0.444444448, 0.44444448, 0.22222224],
                    [0.22222224, 0.44444448, 0.44444448, 0.22222224],
                    [0.11111111, 0.22222224, 0.22222224, 0.11111111],
                ]
            ]
        ],
        [[0.0, 3.33333302, 6.66666603, 3.33333349, 6.66666698]],
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mmcv_test_numbers(device, dtype):
    for (inp, rois), (out_ref, grad_ref, rois_ref) in zip(MMCV_ROI_CASES, _MMCV_EXPECTED):
        x = torch.tensor(inp, dtype=dtype, device=device)
        r = torch.tensor(rois, dtype=dtype, device=device)
        out, grad_in, grad_rois = _run(
            x, r, (2, 2), 1.0, torch.ones(1, x.shape[1], 2, 2, dtype=dtype, device=device)
        )
        for found, expected in ((out, out_ref), (grad_in, grad_ref), (grad_rois, rois_ref)):
            expected = torch.tensor(expected, dtype=dtype)
            torch.testing.assert_close(found.cpu(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 2, 5, 6, dtype=torch.float64, generator=gen).to(device)
    rois = torch.tensor(
        [[0, 0.6, 0.4, 6.2, 5.3], [1, -1.5, 1.2, 3.1, 9.0], [1, 2.2, 0.1, 3.5, 1.9]],
        dtype=torch.float64,
        device=device,
    )
    batch, coords = rois[:, :1], rois[:, 1:].clone()
    x.requires_grad_()
    coords.requires_grad_()

    # The batch index is a step function: finite differences on it are meaningless.
    def pool(inp, box):
        return prroi_pool(inp, torch.cat([batch, box], 1), (2, 3), 0.7)

    assert torch.autograd.gradcheck(pool, (x, coords))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_types(device, dtype):
    """Computed in float32 on the half values, then cast back."""
    inp, rois = _case(device, torch.float32, seed=2)
    x, r = inp.to(dtype).requires_grad_(), rois.to(dtype).requires_grad_()
    out = prroi_pool(x, r, (2, 3), 0.5)
    assert out.dtype == dtype
    out.float().sum().backward()
    assert x.grad.dtype == dtype and r.grad.dtype == dtype
    x32, r32 = inp.to(dtype).float().requires_grad_(), rois.to(dtype).float().requires_grad_()
    expected = prroi_pool(x32, r32, (2, 3), 0.5)
    expected.sum().backward()
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype == torch.float16 else {"atol": 5e-2, "rtol": 2e-2}
    torch.testing.assert_close(out.float(), expected, **tol)
    torch.testing.assert_close(x.grad.float(), x32.grad, **tol)
    torch.testing.assert_close(r.grad.float(), r32.grad, **tol)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rois(device):
    x = torch.randn(2, 3, 4, 4, device=device, requires_grad=True)
    rois = torch.zeros(0, 5, device=device, requires_grad=True)
    out = prroi_pool(x, rois, (7, 7), 0.25)
    assert out.shape == (0, 3, 7, 7)
    out.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape and not x.grad.any()
    assert rois.grad is not None and rois.grad.shape == (0, 5)


@pytest.mark.parametrize("device", DEVICES)
def test_chunks_give_the_same_result(device, monkeypatch):
    """Rois pooled one per chunk (windows of their own sizes) equal one chunk for all."""
    inp, rois = _case(device)
    grad_out = torch.randn(rois.shape[0], 3, 3, 2, dtype=torch.float64, device=device)
    together = _run(inp, rois, (3, 2), 0.5, grad_out)
    monkeypatch.setattr(prroi_module, "_CHUNK_ELEMENTS", {"cpu": 1})
    monkeypatch.setattr(prroi_module, "_DEVICE_CHUNK_ELEMENTS", 1)
    assert len(prroi_module._windows(rois, 0.5, (3, 2), (6, 7), 3)) == rois.shape[0]
    for one_by_one, at_once in zip(_run(inp, rois, (3, 2), 0.5, grad_out), together):
        torch.testing.assert_close(one_by_one, at_once)


@pytest.mark.parametrize("device", DEVICES)
def test_huge_roi_is_bounded_by_the_map(device):
    """A box of 10^14 pixels reads only the map: its middle bin holds the whole map, where
    each pixel's interpolant integrates to 1, so that bin is the map's sum over the area."""
    x = torch.randn(1, 2, 6, 7, dtype=torch.float64, device=device)
    big = torch.tensor([[0, -5e6, -5e6, 5e6, 5e6]], dtype=torch.float64, device=device)
    # Unbounded, its (10^7)^2 window would not fit in memory.
    out, grad_in, grad_rois = _run(x, big, (3, 3), 1.0, torch.ones(1, 2, 3, 3, device=device))
    area = (1e7 / 3) ** 2
    torch.testing.assert_close(out[0, :, 1, 1], x.sum((2, 3))[0] / area)
    assert not out[0, :, 0].any() and not out[0, :, 2].any()
    torch.testing.assert_close(grad_in, torch.full_like(x, 2 / area))
    assert torch.isfinite(grad_rois).all()
    big32 = prroi_pool(x.float(), big.float(), (3, 3), 1.0)
    torch.testing.assert_close(big32.double(), out, rtol=1e-4, atol=1e-20)


@pytest.mark.parametrize("device", DEVICES)
def test_rois_that_read_no_pixel_are_zero_beside_a_nan(device):
    """Empty, inverted and off-map rois give 0 and no roi gradient, as mmcv, even where
    their clamped window holds a NaN pixel."""
    x = torch.randn(1, 1, 8, 8, dtype=torch.float64, device=device)
    x[0, 0, 0, 0] = float("nan")
    rois = torch.tensor(
        [[0, 1, 1, 1, 3], [0, -20, -20, -15, -15], [0, 3, 3, 1, 1]],
        dtype=torch.float64,
        device=device,
    )
    out, _, grad_rois = _run(
        x, rois, (2, 2), 1.0, torch.ones(3, 1, 2, 2, dtype=x.dtype, device=device)
    )
    assert not out.any() and not out.isnan().any()
    assert not grad_rois.any() and not grad_rois.isnan().any()


def test_no_channels_forward_and_backward():
    x = torch.randn(1, 0, 6, 7, requires_grad=True)
    rois = torch.tensor([[0, 1, 1, 4, 5.0]], requires_grad=True)
    out = prroi_pool(x, rois, 2)
    assert out.shape == (1, 0, 2, 2)
    out.sum().backward()
    assert x.grad.shape == x.shape and rois.grad.shape == rois.shape


def test_nan_pixel_spreads_over_its_rois_window():
    """Documented: a NaN pixel makes NaN every bin, in its channel, of the rois whose window
    holds it (mmcv only the bins that read it); other rois and channels are untouched."""
    x = torch.randn(1, 2, 8, 8)
    x[0, 0, 1, 1] = float("nan")
    rois = torch.tensor([[0, 0.0, 0.0, 3.0, 3.0], [0, 4.0, 4.0, 7.0, 7.0]])
    out = prroi_pool(x, rois, 2, 1.0)
    assert out[0, 0].isnan().all()
    assert torch.isfinite(out[0, 1]).all() and torch.isfinite(out[1]).all()


def test_replaced_rois_pool_zeros():
    """Off the CPU a roi with a bad batch index or NaN is replaced on the device (no sync)
    by an empty box: it pools 0 with no gradient. The replacement, checked on the CPU."""
    x = torch.randn(2, 3, 5, 5) + 10
    rois = torch.tensor([[5, 0.0, 0.0, 3.0, 3.0], [0, float("nan"), 0, 3, 3], [1, 0, 0, 4, 4]])
    for scale in (1.0, 0.25, 8.0):
        boxes, replaced = empty_bad_rois(rois, 2, scale)
        assert replaced.tolist() == [True, True, False]
        boxes.requires_grad_()
        out = prroi_pool(x, boxes, 2, scale)
        out.sum().backward()
        assert not out[:2].any() and not boxes.grad[:2].any()
        torch.testing.assert_close(out[2:], prroi_pool(x, rois[2:], 2, scale))


# ------------------------------------------------------------------------ bad inputs


_X = torch.randn(1, 2, 4, 4)
_ROI = torch.tensor([[0, 0.0, 0.0, 2.0, 2.0]])


def test_input_not_a_tensor():
    with pytest.raises(TypeError, match=r"mmcv\.ops\.prroi_pool: input must be .*list"):
        prroi_pool(_X.tolist(), _ROI, 2)


def test_input_not_float():
    with pytest.raises(TypeError, match="input must be a floating-point tensor.*int64"):
        prroi_pool(_X.long(), _ROI, 2)


def test_input_not_4d():
    with pytest.raises(ValueError, match=r"input must have shape \(N, C, H, W\), got \(2, 4, 4\)"):
        prroi_pool(_X[0], _ROI, 2)


@pytest.mark.parametrize("shape", [(1, 4), (5,), (1, 5, 1)])
def test_rois_wrong_shape(shape):
    # mmcv's kernel asserts the rois' shape: an AssertionError as well.
    with pytest.raises(ArgumentError, match=r"rois must have shape \(K, 5\)") as info:
        prroi_pool(_X, torch.zeros(shape), 2)
    assert isinstance(info.value, AssertionError) and isinstance(info.value, ValueError)


def test_rois_not_a_tensor():
    with pytest.raises(TypeError, match="rois must be a real-valued tensor, got list"):
        prroi_pool(_X, _ROI.tolist(), 2)


@pytest.mark.parametrize("batch", [1.0, -1.0, 7.0])
def test_image_index_outside_the_batch(batch):
    with pytest.raises(ValueError, match=r"rois\[:, 0\] must be batch indices in \[0, 1\)"):
        prroi_pool(_X, torch.tensor([[batch, 0.0, 0.0, 2.0, 2.0]]), 2)


def test_rois_not_finite():
    with pytest.raises(ValueError, match="rois must be finite"):
        prroi_pool(_X, torch.tensor([[0, float("inf"), 0.0, 2.0, 2.0]]), 2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int64])
def test_rois_of_another_dtype(dtype):
    with pytest.raises(TypeError, match=f"rois must have input's dtype torch.float32, got {dtype}"):
        prroi_pool(_X, _ROI.to(dtype), 2)


def test_rois_on_another_device():
    with pytest.raises(ValueError, match="rois must be on input's device cpu, got meta"):
        prroi_pool(_X, _ROI.to("meta"), 2)


@pytest.mark.parametrize("size", ["7", (2,), (2, 2.5), 2.0, True, None])
def test_output_size_not_ints(size):
    with pytest.raises(TypeError, match="output_size must be an int or"):
        prroi_pool(_X, _ROI, size)
    with pytest.raises(TypeError, match="output_size"):
        PrRoIPool(size)


@pytest.mark.parametrize("size", [0, (2, 0), (-1, 3)])
def test_output_size_not_positive(size):
    with pytest.raises(ValueError, match="output_size must be positive"):
        prroi_pool(_X, _ROI, size)
    with pytest.raises(ValueError, match="output_size must be positive"):
        PrRoIPool(size)


@pytest.mark.parametrize("scale", [0.0, -0.25, float("nan"), float("inf")])
def test_spatial_scale_not_positive_finite(scale):
    with pytest.raises(ValueError, match="mmcv.ops.prroi_pool: spatial_scale must be"):
        prroi_pool(_X, _ROI, 2, scale)
    with pytest.raises(ValueError, match="spatial_scale"):
        PrRoIPool(2, scale)


@pytest.mark.parametrize("scale", ["0.25", None, True])
def test_spatial_scale_not_a_number(scale):
    with pytest.raises(TypeError, match="spatial_scale must be a number"):
        prroi_pool(_X, _ROI, 2, scale)


# ------------------------------------------------------------------------ the module


def test_module_attributes_and_repr():
    layer = PrRoIPool(7, spatial_scale=0.0625)
    assert layer.output_size == (7, 7) and layer.spatial_scale == 0.0625
    assert repr(layer) == "PrRoIPool(output_size=(7, 7), spatial_scale=0.0625)"
    layer = PrRoIPool((2, 3))
    assert layer.output_size == (2, 3) and isinstance(layer.spatial_scale, float)
    assert repr(layer) == "PrRoIPool(output_size=(2, 3), spatial_scale=1.0)"
    inp, rois = _case("cpu")
    assert torch.equal(layer(inp, rois), prroi_pool(inp, rois, (2, 3), 1.0))
    assert not list(layer.parameters())
