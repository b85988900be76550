"""mmpar's ``mmcv.ops.riroi_align_rotated`` against a per-bin, per-orientation loop."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from mmpar.compat.ops.riroi_align_rotated import (
    RiRoIAlignRotated,
    riroi_align_rotated,
    rotation_invariant_pool,
)
from mmpar.compat.ops.roi_align_rotated import roi_align_rotated
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, roi_align_read, rotated_roi_samples

# Angles of every sign and size: past 2 pi, below -2 pi, on an orientation step (pi / 2).
ROIS = [
    [0, 4.0, 3.0, 5.0, 3.0, math.pi / 3],
    [1, 6.5, 5.5, 7.0, 4.5, math.pi / 2],
    [1, 3.0, 7.0, 5.0, 9.0, -math.pi / 2],
    [0, 9.0, 1.0, 6.0, 5.0, 7.1],
    [1, 7.0, 6.0, 3.5, 2.5, -8.0],
    [0, 4.0, 4.0, 0.0, 0.5, 0.3],
]


def _reference(inp, rois, out_size, scale, num_samples, orients, clockwise, grad_out):
    """Output and input gradient (for ``grad_out``), in float64: each output channel
    ``c * O + o`` mixes two input orientation channels, each pooled sample by sample."""
    inp, grad_out = inp.double().cpu(), grad_out.double().cpu()
    channels = inp.shape[1]
    out = torch.zeros(rois.shape[0], channels, *out_size, dtype=torch.float64)
    grad = torch.zeros_like(inp)
    for k, roi in enumerate(rois.double().cpu().tolist()):
        b = int(roi[0])
        points, count = rotated_roi_samples(roi, out_size, scale, num_samples, False, clockwise)
        turn = roi[5] * orients / (2 * math.pi)
        shift, frac = math.floor(turn), turn - math.floor(turn)
        for ch in range(channels):
            group, o = divmod(ch, orients)
            sources = (
                (group * orients + (o - shift) % orients, 1 - frac),
                (group * orients + (o - shift + 1) % orients, frac),
            )
            for src, mix in sources:
                fmap = inp[b, src].tolist()
                for ph, row in enumerate(points):
                    for pw, samples in enumerate(row):
                        for y, x in samples:
                            value, taps = roi_align_read(fmap, y, x)
                            out[k, ch, ph, pw] += mix * value / count
                            for r, col, wt in taps:
                                g = grad_out[k, ch, ph, pw] * mix * wt / count
                                grad[b, src, r, col] += g
    return out, grad


def _case(device="cpu", dtype=torch.float64, orients=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    inp = torch.randn(2, 2 * orients, 6, 8, generator=gen, dtype=torch.float64)
    return inp.to(device, dtype), torch.tensor(ROIS, dtype=torch.float64).to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device):
    """mmcv's own expected numbers (its test runs on CUDA only)."""
    feature = [
        [[1, 2], [3, 4]], [[1, 2], [4, 3]], [[4, 3], [2, 1]], [[1, 2], [5, 6]],
        [[3, 4], [7, 8]], [[9, 10], [13, 14]], [[11, 12], [15, 16]], [[1, 1], [2, 2]],
    ]  # fmt: skip
    x = torch.tensor([feature], dtype=torch.float, device=device, requires_grad=True)
    rois = torch.tensor([[0, 0.5, 0.5, 1, 1, math.pi / 3], [0, 1, 1, 3, 3, math.pi / 2]])
    out = RiRoIAlignRotated((2, 2), 1.0, 2, 8, False)(x, rois.to(device))
    out.backward(torch.ones_like(out))
    expected = [
        [
            [[1.8425, 1.3516], [2.3151, 1.8241]], [[2.4779, 1.7416], [3.2173, 2.5632]],
            [[2.7149, 2.2638], [2.6540, 2.3673]], [[2.9461, 2.8638], [2.8028, 2.7205]],
            [[4.1943, 2.7214], [5.6119, 4.1391]], [[7.5276, 6.0547], [8.9453, 7.4724]],
            [[12.1943, 10.7214], [13.6119, 12.1391]], [[9.5489, 8.4237], [10.5763, 9.4511]],
        ],
        [
            [[7.6562, 12.5625], [4.0000, 6.6250]], [[1.0000, 1.3125], [0.5000, 0.6562]],
            [[1.6562, 1.9375], [1.0000, 1.3125]], [[1.8438, 2.0547], [0.7500, 1.1562]],
            [[0.8438, 3.0625], [0.2500, 1.1875]], [[2.6562, 2.5625], [1.5000, 1.6250]],
            [[3.6562, 4.5625], [2.0000, 2.6250]], [[6.6562, 10.5625], [3.5000, 5.6250]],
        ],
    ]  # fmt: skip
    grad = torch.tensor([[1.4727, 1.5586], [1.5586, 1.6602]]).expand(1, 8, 2, 2)
    torch.testing.assert_close(out.cpu(), torch.tensor(expected), atol=1e-3, rtol=0)
    torch.testing.assert_close(x.grad.cpu(), grad, atol=1e-3, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("clockwise", [False, True])
@pytest.mark.parametrize("num_samples", [0, 2])
def test_matches_reference(device, clockwise, num_samples):
    inp, rois = _case(device)
    x = inp.clone().requires_grad_()
    grad_out = torch.randn(rois.shape[0], 8, 2, 3, dtype=torch.float64, device=device)
    out = riroi_align_rotated(x, rois, (2, 3), 0.5, num_samples, 4, clockwise)
    out.backward(grad_out)
    ref_out, ref_grad = _reference(inp, rois, (2, 3), 0.5, num_samples, 4, clockwise, grad_out)
    torch.testing.assert_close(out.cpu(), ref_out)
    torch.testing.assert_close(x.grad.cpu(), ref_grad)


def test_float32_one_group_of_eight():
    inp, rois = _case(dtype=torch.float32, orients=8, seed=4)
    inp = inp[:, :8]
    # Off the orientation steps, where float32 and float64 may floor differently (and
    # mmcv's mixing jumps by two orientations: see test_orientation_steps).
    rois[:, 5] += 0.01
    x = inp.clone().requires_grad_()
    out = riroi_align_rotated(x, rois, 2, 0.5)
    out.sum().backward()
    ref_out, ref_grad = _reference(inp, rois, (2, 2), 0.5, 0, 8, False, torch.ones(6, 8, 2, 2))
    torch.testing.assert_close(out, ref_out.float())
    torch.testing.assert_close(x.grad, ref_grad.float())


def test_orientation_steps():
    """As mmcv's kernel, the mixing jumps where the angle crosses an orientation step: just
    below it reads orientation ``o - i + 2`` (``i`` the step), at it ``o - i``."""
    x = torch.arange(4.0).view(1, 4, 1, 1).expand(1, 4, 3, 3).contiguous()
    step = 2 * math.pi / 4
    rois = torch.tensor([[0, 1, 1, 1, 1, step - 1e-9], [0, 1, 1, 1, 1, step]], dtype=torch.float64)
    out = riroi_align_rotated(x.double(), rois, 1, 1.0, 1, 4)
    torch.testing.assert_close(out[0, :, 0, 0], torch.tensor([1.0, 2, 3, 0], dtype=torch.float64))
    torch.testing.assert_close(out[1, :, 0, 0], torch.tensor([3.0, 0, 1, 2], dtype=torch.float64))


def test_gradcheck():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 4, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    rois = torch.tensor(
        [[0, 2.2, 2.1, 3.3, 2.4, 0.4], [1, 3.3, 1.2, 4.1, 3.3, -2.3], [1, 0.2, 3.1, 2.0, 2.0, 4.0]],
        dtype=torch.float64,
    )
    assert torch.autograd.gradcheck(
        lambda t: riroi_align_rotated(t, rois, (2, 2), 1.0, 0, 4, True), (x,), eps=1e-6, atol=1e-5
    )


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rois(device):
    x = torch.randn(2, 8, 4, 4, device=device, requires_grad=True)
    out = riroi_align_rotated(x, torch.zeros(0, 6, device=device), 3, 0.25)
    assert out.shape == (0, 8, 3, 3)
    out.sum().backward()
    assert x.grad is not None and not x.grad.any()


@pytest.mark.parametrize("num_samples", [0, 2])
def test_bad_rois_give_zeros_off_the_cpu(num_samples):
    """The path of devices other than the CPU (no value check, which would sync): a roi
    of a batch index outside [0, N) or with NaN or inf gives zeros, not NaN."""
    x = torch.rand(2, 8, 6, 6, dtype=torch.float64) + 1
    x.requires_grad_()
    good = [1.0, 3.0, 3.0, 4.0, 2.0, 0.3]
    bad = [
        [2.0, 3.0, 3.0, 4.0, 2.0, 0.3],
        [-1.0, 3.0, 3.0, 4.0, 2.0, 0.3],
        [0.0, math.inf, 3.0, 4.0, 2.0, 0.3],
        [0.0, 3.0, 3.0, 4.0, 2.0, math.nan],
        [0.0, 3.0, 3.0, 4.0, 2.0, math.inf],
    ]
    rois = torch.tensor([good, *bad], dtype=torch.float64)
    out = rotation_invariant_pool(x, rois, (2, 2), 1.0, num_samples, 8, False)
    assert torch.equal(out[1:], torch.zeros_like(out[1:]))
    torch.testing.assert_close(out[:1], riroi_align_rotated(x, rois[:1], 2, 1.0, num_samples))
    (grad,) = torch.autograd.grad(out[1:].sum(), x)
    assert not grad.any()


def test_huge_roi_is_bounded():
    """riroi pools as roi_align_rotated (legacy mode), which reads a roi of 10^7 pixels a
    side only near the map; one orientation channel: no turn."""
    x = torch.rand(1, 2, 5, 6, dtype=torch.float64)
    rois = torch.tensor([[0, -2.5e6, 4e6, 1e7, 1e7, 0.4]], dtype=torch.float64)
    out = riroi_align_rotated(x, rois, 2, 1.0, 0, 1)
    ref = roi_align_rotated(x, rois, 2, 1.0, 0, False)
    assert ref.any()
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_types(device, dtype):
    inp, rois = _case(device, torch.float32, seed=2)
    x = inp.to(dtype).requires_grad_()
    out = riroi_align_rotated(x, rois.to(dtype), (2, 3), 0.5, 2, 4)
    assert out.dtype == dtype
    out.float().sum().backward()
    assert x.grad.dtype == dtype
    expected = riroi_align_rotated(inp.to(dtype).float(), rois.to(dtype).float(), (2, 3), 0.5, 2, 4)
    tol = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(out.float(), expected, atol=tol, rtol=tol)


def test_module_keeps_out_size():
    """mmrotate reads ``out_size`` back from the layer (``_pair(layer.out_size)``)."""
    layer = RiRoIAlignRotated(7, spatial_scale=0.25, num_samples=2, num_orientations=4)
    assert layer.out_size == 7 and layer.num_orientations == 4 and layer.spatial_scale == 0.25
    assert list(inspect.signature(RiRoIAlignRotated).parameters) == [
        "out_size", "spatial_scale", "num_samples", "num_orientations", "clockwise",
    ]  # fmt: skip
    assert list(inspect.signature(riroi_align_rotated).parameters) == [
        "features", "rois", "out_size", "spatial_scale", "num_samples", "num_orientations",
        "clockwise",
    ]  # fmt: skip
    inp, rois = _case()
    assert torch.equal(layer(inp, rois), riroi_align_rotated(inp, rois, 7, 0.25, 2, 4))


def test_bad_arguments():
    x = torch.randn(2, 8, 4, 4)
    rois = torch.tensor([[0, 2.0, 2.0, 2.0, 2.0, 0.1]])
    with pytest.raises(ValueError, match=r"riroi_align_rotated: rois must have shape \(K, 6\)"):
        riroi_align_rotated(x, rois[:, :5], 2, 1.0)
    with pytest.raises(ValueError, match="num_orientations must be positive and divide the 8"):
        riroi_align_rotated(x, rois, 2, 1.0, 0, 3)
    with pytest.raises(TypeError, match="num_orientations must be an int"):
        riroi_align_rotated(x, rois, 2, 1.0, 0, 4.0)
    with pytest.raises(TypeError, match="out_size"):
        riroi_align_rotated(x, rois, (2, 2, 2), 1.0)
    with pytest.raises(ValueError, match="out_size"):
        RiRoIAlignRotated(0, 1.0)
    with pytest.raises(ValueError, match=r"batch indices in \[0, 2\)"):
        riroi_align_rotated(x, torch.tensor([[2.0, 2.0, 2.0, 2.0, 2.0, 0.1]]), 2, 1.0)
    with pytest.raises(ValueError, match="finite"):
        riroi_align_rotated(x, torch.tensor([[0, 2.0, 2.0, 2.0, 2.0, math.nan]]), 2, 1.0)
    with pytest.raises(TypeError, match="floating-point"):
        riroi_align_rotated(x.int(), rois, 2, 1.0)


def test_bad_scale_samples_and_orientations():
    """spatial_scale, num_samples and the module's num_orientations get one-line errors
    naming them (a negative num_samples stays adaptive, as mmcv's kernel reads it)."""
    x, rois = torch.randn(2, 8, 4, 4), torch.tensor([[0, 2.0, 2.0, 2.0, 2.0, 0.1]])
    for scale, error in ((None, TypeError), (math.inf, ValueError), (0.0, ValueError)):
        with pytest.raises(error, match="riroi_align_rotated: spatial_scale must"):
            riroi_align_rotated(x, rois, 2, scale)
        with pytest.raises(error, match="RiRoIAlignRotated: spatial_scale must"):
            RiRoIAlignRotated(2, scale)
    for samples in (1.5, None, math.nan):
        with pytest.raises(TypeError, match="riroi_align_rotated: num_samples must be an int"):
            riroi_align_rotated(x, rois, 2, 1.0, samples)
        with pytest.raises(TypeError, match="RiRoIAlignRotated: num_samples must be an int"):
            RiRoIAlignRotated(2, 1.0, samples)
    for orientations, error in ((None, TypeError), (2.0, TypeError), (0, ValueError)):
        with pytest.raises(error, match="RiRoIAlignRotated: num_orientations must be an int"):
            RiRoIAlignRotated(2, 1.0, 0, orientations)
    expected = riroi_align_rotated(x, rois, 2, 1.0, 0)
    assert torch.equal(riroi_align_rotated(x, rois, 2, 1.0, -1), expected)
