"""mmpar's ``mmcv.ops.rotated_feature_align`` against a per-pixel loop of bilinear reads."""

from __future__ import annotations

import math

import pytest
import torch

from mmpar.compat.ops.rotated_feature_align import rotated_feature_align
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, roi_align_read


def _read_points(box, scale, points):
    """The ``(y, x)`` places a pixel with box ``box`` reads (mmcv's field order: row first)."""
    y, x = box[0] * scale, box[1] * scale
    places = [(y, x)]
    if points == 5:
        half_w, half_h, angle = box[2] * scale / 2, box[3] * scale / 2, box[4]
        # The box's corners: +-half_w along its width axis, +-half_h along its height axis.
        width_axis = (math.sin(angle), math.cos(angle))
        height_axis = (math.cos(angle), -math.sin(angle))
        for sw, sh in ((1, 1), (-1, 1), (-1, -1), (1, -1)):
            places.append(
                (
                    y + sw * half_w * width_axis[0] + sh * half_h * height_axis[0],
                    x + sw * half_w * width_axis[1] + sh * half_h * height_axis[1],
                )
            )
    return places


def _reference(feat, boxes, scale, points, grad_out):
    """Output and input gradient (for ``grad_out``), one pixel at a time, in float64."""
    feat, grad_out = feat.double().cpu(), grad_out.double().cpu()
    n, c, h, w = feat.shape
    boxes = boxes.double().cpu().reshape(n, h, w, 5)
    out, grad = feat.clone(), grad_out.clone()
    for b in range(n):
        for ch in range(c):
            fmap = feat[b, ch].tolist()
            for i in range(h):
                for j in range(w):
                    for y, x in _read_points(boxes[b, i, j].tolist(), scale, points):
                        value, taps = roi_align_read(fmap, y, x)
                        out[b, ch, i, j] += value
                        for r, col, wt in taps:
                            grad[b, ch, r, col] += grad_out[b, ch, i, j] * wt
    return out, grad


def _case(device="cpu", dtype=torch.float64, seed=0):
    """Two images; boxes in image coordinates (scale 1/4) with many reads off the map."""
    gen = torch.Generator().manual_seed(seed)
    feat = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64)
    centres = torch.rand(2, 4, 5, 2, generator=gen, dtype=torch.float64) * 28 - 4
    sizes = torch.rand(2, 4, 5, 2, generator=gen, dtype=torch.float64) * 20
    angles = (torch.rand(2, 4, 5, 1, generator=gen, dtype=torch.float64) - 0.5) * 2 * math.pi
    angles[0, 0, :2, 0] = torch.tensor([math.pi / 2, -math.pi / 2], dtype=torch.float64)
    boxes = torch.cat([centres, sizes, angles], dim=-1)
    return feat.to(device, dtype), boxes.to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("points", [1, 5])
@pytest.mark.parametrize("flat", [False, True])
def test_matches_reference(device, points, flat):
    feat, boxes = _case(device)
    if flat:  # mmrotate passes (N * H * W, 5)
        boxes = boxes.reshape(-1, 5)
    x = feat.clone().requires_grad_()
    grad_out = torch.randn_like(feat)
    out = rotated_feature_align(x, boxes, 0.25, points)
    out.backward(grad_out)
    ref_out, ref_grad = _reference(feat, boxes, 0.25, points, grad_out)
    torch.testing.assert_close(out.cpu(), ref_out)
    torch.testing.assert_close(x.grad.cpu(), ref_grad)


def test_float32_default_scale():
    feat, boxes = _case(dtype=torch.float32, seed=3)
    boxes[..., :4] *= 2
    x = feat.clone().requires_grad_()
    out = rotated_feature_align(x, boxes)
    out.sum().backward()
    ref_out, ref_grad = _reference(feat, boxes, 1 / 8, 1, torch.ones_like(feat))
    torch.testing.assert_close(out, ref_out.float())
    torch.testing.assert_close(x.grad, ref_grad.float())


def test_gradcheck():
    feat, boxes = _case(seed=1)
    x = feat.clone().requires_grad_()
    for points in (1, 5):
        assert torch.autograd.gradcheck(
            lambda t: rotated_feature_align(t, boxes, 0.25, points), (x,), eps=1e-6, atol=1e-5
        )


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device):
    for shape in ((0, 3, 4, 4), (2, 3, 0, 4), (2, 0, 3, 3)):
        x = torch.randn(*shape, device=device, requires_grad=True)
        boxes = torch.zeros(shape[0], shape[2], shape[3], 5, device=device)
        out = rotated_feature_align(x, boxes, 0.5, 5)
        assert out.shape == shape
        out.sum().backward()
        assert x.grad is not None and x.grad.shape == shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_types(device, dtype):
    feat, boxes = _case(device, torch.float32, seed=2)
    x = feat.to(dtype).requires_grad_()
    out = rotated_feature_align(x, boxes.to(dtype), 0.25, 5)
    assert out.dtype == dtype
    out.float().sum().backward()
    assert x.grad.dtype == dtype
    expected = rotated_feature_align(feat.to(dtype).float(), boxes.to(dtype).float(), 0.25, 5)
    tol = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(out.float(), expected, atol=tol, rtol=tol)


def test_bad_arguments():
    feat, boxes = _case()
    with pytest.raises(ValueError, match="rotated_feature_align: points must be 1 or 5, got 3"):
        rotated_feature_align(feat, boxes, 0.25, 3)
    with pytest.raises(ValueError, match=r"best_rbboxes must hold one \(5,\) box per pixel"):
        rotated_feature_align(feat, boxes[:, :3], 0.25)
    with pytest.raises(ValueError, match=r"best_rbboxes must hold one \(5,\) box per pixel"):
        rotated_feature_align(feat, boxes[..., :4], 0.25)
    with pytest.raises(ValueError, match=r"features must have shape \(N, C, H, W\)"):
        rotated_feature_align(feat[0], boxes[0], 0.25)
    with pytest.raises(TypeError, match="features must be floating point"):
        rotated_feature_align(feat.long(), boxes, 0.25)
    with pytest.raises(TypeError, match="best_rbboxes must be floating point"):
        rotated_feature_align(feat, boxes.long(), 0.25)
    with pytest.raises(TypeError, match="must be tensors"):
        rotated_feature_align(feat, boxes.tolist(), 0.25)


def test_bad_spatial_scale():
    """A NaN or inf scale (NaN everywhere before), or one that is not a number, is refused."""
    feat, boxes = _case()
    for scale, error in ((math.nan, ValueError), (math.inf, ValueError), (0.0, ValueError),
                         (None, TypeError), ("0.25", TypeError)):  # fmt: skip
        with pytest.raises(error, match="rotated_feature_align: spatial_scale must"):
            rotated_feature_align(feat, boxes, scale)
