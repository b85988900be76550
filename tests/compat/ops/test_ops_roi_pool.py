"""mmpar's ``mmcv.ops.roi_pool`` against an explicit loop over each bin's pixels."""

from __future__ import annotations

import math

import pytest
import torch

from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.roi.roi_inputs import empty_bad_rois
from mmpar.compat.ops.roi_pool import RoIPool, roi_pool
from tests.compat.ops._reference import (
    DEVICES,
    GRADCHECK_ROIS,
    HALF_DTYPES,
    assert_mmcv_roi_numbers,
    roi_inputs,
)


def _reference(inp, rois, out_size, scale, grad_out):
    """mmcv's kernel, one bin at a time: output and input gradient (for ``grad_out``)."""
    inp, rois, grad_out = inp.double().cpu(), rois.double().cpu(), grad_out.double().cpu()
    n, c, h, w = inp.shape
    ph_n, pw_n = out_size
    out = torch.zeros(rois.shape[0], c, ph_n, pw_n, dtype=torch.float64)
    grad = torch.zeros_like(inp)
    for k, roi in enumerate(rois.tolist()):
        b = int(roi[0])
        x1, y1 = roi[1] * scale, roi[2] * scale
        x2, y2 = (roi[3] + 1) * scale, (roi[4] + 1) * scale
        roi_w, roi_h = x2 - x1, y2 - y1
        if roi_w <= 0 or roi_h <= 0:
            continue
        bin_w, bin_h = roi_w / pw_n, roi_h / ph_n
        for ch in range(c):
            for ph in range(ph_n):
                h0 = min(max(math.floor(ph * bin_h + y1), 0), h)
                h1 = min(max(math.ceil((ph + 1) * bin_h + y1), 0), h)
                for pw in range(pw_n):
                    w0 = min(max(math.floor(pw * bin_w + x1), 0), w)
                    w1 = min(max(math.ceil((pw + 1) * bin_w + x1), 0), w)
                    best, where = -math.inf, None
                    for y in range(h0, h1):
                        for x in range(w0, w1):
                            if inp[b, ch, y, x] > best:
                                best, where = inp[b, ch, y, x].item(), (y, x)
                    if where is not None:
                        out[k, ch, ph, pw] = best
                        grad[b, ch, where[0], where[1]] += grad_out[k, ch, ph, pw]
    return out, grad


# Rois inside, partly and fully outside, thin, degenerate and inverted.
_ROIS = [
    [0, 2.0, 3.0, 9.0, 10.0],
    [1, -3.0, -2.5, 4.5, 5.0],  # partly above and left of the map
    [0, 7.0, 6.0, 17.0, 15.0],  # partly below and right
    [1, 20.0, 20.0, 26.0, 24.0],  # entirely outside
    [1, 1.0, 1.0, 12.5, 2.0],  # thin
    [0, 5.0, 5.0, 5.0, 5.0],  # x1 == x2: one pixel wide, as mmcv's +1 makes it
    [0, 9.0, 5.0, 3.0, 8.0],  # x2 < x1 - 1: no width, all zeros
    [1, 0.0, 0.0, 13.0, 11.0],  # the whole map
]


def _case(device, dtype=torch.float64, seed=0):
    """Two images and :data:`_ROIS`."""
    return roi_inputs(_ROIS, device, dtype, seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mmcv_test_numbers(device, dtype):
    """The inputs and expected outputs/gradients of mmcv's own RoIPool test."""
    expected = [
        ([[[[1.0, 2.0], [3.0, 4.0]]]], [[[[1.0, 1.0], [1.0, 1.0]]]]),
        (
            [[[[1.0, 2.0], [3.0, 4.0]], [[4.0, 3.0], [2.0, 1.0]]]],
            [[[[1.0, 1.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]]],
        ),
        (
            [[[[4.0, 8.0], [12.0, 16.0]]]],
            [[[[0.0, 0, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0], [0, 1, 0, 1]]]],
        ),
    ]
    assert_mmcv_roi_numbers(lambda x, rois: roi_pool(x, rois, (2, 2), 1.0), expected, device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", [1.0, 0.5, 1 / 3])
@pytest.mark.parametrize("out_size", [(2, 3), (3, 3)])
def test_matches_reference(device, scale, out_size):
    inp, rois = _case(device)
    x = inp.clone().requires_grad_()
    grad_out = torch.randn(rois.shape[0], 3, *out_size, dtype=torch.float64, device=device)
    out = roi_pool(x, rois, out_size, scale)
    out.backward(grad_out)
    out_ref, grad_ref = _reference(inp, rois, out_size, scale, grad_out)
    torch.testing.assert_close(out.cpu(), out_ref)
    torch.testing.assert_close(x.grad.cpu(), grad_ref)


def test_no_rounding_of_the_box():
    """mmcv does not round ``x * spatial_scale`` (torchvision's roi_pool does): the box
    [2, 3) scaled by 1/4 is [0.5, 0.75), which lies in pixel 0 (rounding gives pixel 1)."""
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    out = roi_pool(x, torch.tensor([[0, 2.0, 2.0, 2.0, 2.0]]), 1, 0.25)
    assert out.item() == 0.0


def test_ties_go_to_the_first_pixel():
    x = torch.ones(1, 1, 4, 4, requires_grad=True)
    out = roi_pool(x, torch.tensor([[0, 1.0, 1.0, 2.0, 3.0]]), 1, 1.0)
    out.backward()
    assert x.grad[0, 0, 1, 1] == 1 and int((x.grad != 0).sum()) == 1


def test_gradcheck():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 2, 5, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    rois = torch.tensor(GRADCHECK_ROIS, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: roi_pool(t, rois, (2, 2), 0.7), (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rois(device):
    x = torch.randn(2, 3, 4, 4, device=device, requires_grad=True)
    out = roi_pool(x, torch.zeros(0, 5, device=device), (7, 7), 0.25)
    assert out.shape == (0, 3, 7, 7)
    out.sum().backward()
    assert x.grad is not None and not x.grad.any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_types(device, dtype):
    """Max pooling only selects values: exactly the float32 result on the same values."""
    inp, rois = _case(device, torch.float32, seed=2)
    x = inp.to(dtype).requires_grad_()
    out = roi_pool(x, rois.to(dtype), (2, 3), 0.5)
    assert out.dtype == dtype
    out.float().sum().backward()
    assert x.grad.dtype == dtype
    expected = roi_pool(inp.to(dtype).float(), rois.to(dtype).float(), (2, 3), 0.5)
    torch.testing.assert_close(out.float(), expected, atol=0, rtol=0)


def test_module_and_bad_arguments():
    layer = RoIPool(7, spatial_scale=0.0625)
    assert layer.output_size == (7, 7)
    assert repr(layer) == "RoIPool(output_size=(7, 7), spatial_scale=0.0625)"
    inp, rois = _case("cpu")
    assert torch.equal(layer(inp, rois), roi_pool(inp, rois, (7, 7), 0.0625))
    x = torch.randn(1, 2, 4, 4)
    with pytest.raises(ValueError, match=r"\(K, 5\)"):
        roi_pool(x, torch.zeros(3, 4), 2)
    with pytest.raises(ValueError, match="batch indices"):
        roi_pool(x, torch.tensor([[-1, 0.0, 0.0, 2.0, 2.0]]), 2)
    with pytest.raises(TypeError, match="output_size"):
        RoIPool("7")
    with pytest.raises(ValueError, match="finite"):
        roi_pool(x, torch.tensor([[0, float("nan"), 0.0, 2.0, 2.0]]), 2)


# ------------------------------------------------------------ boundary checks and defined results


def test_bad_scale_and_rois_shape():
    x = torch.randn(1, 2, 4, 4)
    rois = torch.tensor([[0, 0.0, 0.0, 2.0, 2.0]])
    for scale in (0.0, -0.25, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="spatial_scale"):
            roi_pool(x, rois, 2, scale)
        with pytest.raises(ValueError, match="spatial_scale"):
            RoIPool(2, scale)
    for scale in ("0.25", None, True):
        with pytest.raises(TypeError, match="spatial_scale"):
            roi_pool(x, rois, 2, scale)
    # mmcv asserts the rois' shape: the error is an AssertionError as well.
    with pytest.raises(ArgumentError, match=r"rois must have shape \(K, 5\)") as info:
        roi_pool(x, rois[:, 1:], 2)
    assert isinstance(info.value, AssertionError) and isinstance(info.value, ValueError)


def test_nan_never_wins_a_bin():
    """As mmcv's kernel (``value > max``): a NaN pixel is never a bin's max."""
    x = torch.tensor([[[[float("nan"), 1.0], [2.0, float("nan")]]]], requires_grad=True)
    out = roi_pool(x, torch.tensor([[0, 0.0, 0.0, 1.0, 1.0]]), 1, 1.0)
    assert out.item() == 2.0
    out.backward()
    assert x.grad[0, 0, 1, 0] == 1 and int((x.grad != 0).sum()) == 1


def test_huge_box_is_bounded_by_the_map():
    """A box of 10^14 pixels pools the map's pixels it covers, at the map's cost."""
    x = torch.randn(1, 2, 6, 7, dtype=torch.float64)
    big = torch.tensor([[0, -5e6, -5e6, 5e6, 5e6]], dtype=torch.float64)
    out = roi_pool(x, big, (3, 3), 1.0)
    ref, _ = _reference(x, big, (3, 3), 1.0, torch.zeros(1, 2, 3, 3))
    torch.testing.assert_close(out, ref)
    assert out[0, :, 1, 1].eq(x.amax(dim=(2, 3))[0]).all()  # the middle bin holds the map


def test_replaced_rois_pool_zeros():
    """Off the CPU, a roi with a bad batch index or NaN is replaced on the device (no sync)
    by a box that pools 0; the replacement itself, checked here on the CPU."""
    x = torch.randn(2, 3, 5, 5) + 10
    rois = torch.tensor(
        [[5, 0.0, 0.0, 3.0, 3.0], [0, float("nan"), 0.0, 3.0, 3.0], [1, 0, 0, 4, 4]]
    )
    for scale in (1.0, 0.25, 8.0):
        boxes, replaced = empty_bad_rois(rois, 2, scale)
        assert replaced.tolist() == [True, True, False]
        out = roi_pool(x, boxes, 2, scale)
        assert not out[:2].any()
        torch.testing.assert_close(out[2:], roi_pool(x, rois[2:], 2, scale))
