"""mmpar.compat.ops.border_align against a per-box, per-point loop (mmcv's kernel's definition)."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.border_align import BorderAlign, border_align
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, roi_align_read

# The module: the package attribute of its name is the function, as in mmcv.
border_align_module = importlib.import_module("mmpar.compat.ops.border_align")

# mmcv's hand-checked case: a (1, 4, 3, 4) map, one box per pixel.
MMCV_INPUT = [[[[1.0, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],
               [[6, 7, 5, 8], [2, 1, 3, 4], [12, 9, 11, 10]],
               [[-2, -3, 2, 0], [-4, -5, 1, -1], [-1, -1, -1, -1]],
               [[0, -1, 2, 1], [-4, -3, -2, -1], [-1, -2, -3, -4]]]]  # fmt: skip
MMCV_BOXES = [[[0.0, 0, 2, 1], [1, 0, 3, 1], [1, 0, 2, 1], [0, 0, 3, 1], [0, 0, 1, 2],
               [0, 0, 2, 2], [1, 0, 2, 1], [1, 0, 3, 1], [0, 1, 1, 2], [0, 0, 3, 2],
               [1, 0, 3, 2], [2, 0, 3, 2]]]  # fmt: skip
# Rows: boxes; columns: top, left, bottom, right.
MMCV_OUTPUT = {
    1: [[3, 6, 1, 2], [4, 7, -1, 1], [3, 7, 1, 2], [4, 6, -1, 1], [2, 12, -1, -1],
        [3, 12, -1, 2], [3, 7, 1, 2], [4, 7, -1, 1], [6, 12, -1, -2], [4, 12, -1, 1],
        [4, 9, -1, 1], [4, 11, -1, 1]],
    2: [[3, 6, 1, 2], [4, 7, 1, 1], [3, 7, 1, 2], [4, 6, -1, 1], [2, 12, -1, -1],
        [3, 12, -1, 2], [3, 7, 1, 2], [4, 7, 1, 1], [6, 12, -1, -2], [4, 12, -1, 1],
        [4, 9, -1, 1], [4, 11, -1, 1]],
}  # fmt: skip
# The input's gradient for an all-ones output gradient.
MMCV_GRAD = {
    1: [[[0, 1, 4, 6], [0, 1, 0, 0], [0, 0, 0, 0]],
        [[2, 4, 0, 0], [0, 0, 0, 0], [4, 1, 1, 0]],
        [[0, 0, 0, 0], [0, 0, 3, 3], [0, 2, 1, 3]],
        [[0, 1, 4, 6], [0, 0, 0, 0], [0, 1, 0, 0]]],
    2: [[[0, 1, 4, 6], [0, 1, 0, 0], [0, 0, 0, 0]],
        [[2, 4, 0, 0], [0, 0, 0, 0], [4, 1, 1, 0]],
        [[0, 0, 0, 0], [0, 0, 5, 1], [0, 2, 1, 3]],
        [[0, 1, 4, 6], [0, 0, 0, 0], [0, 1, 0, 0]]],
}  # fmt: skip


def _reference(
    feat: torch.Tensor, boxes: torch.Tensor, pool_size: int, grad_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Output and input gradient, walking each border point by point as mmcv's kernel does
    (the position advanced by repeated addition, a value kept only if it beats the best)."""
    n, channels4, _, _ = feat.shape
    c, k = channels4 // 4, boxes.shape[1]
    maps, box_list, g = feat.tolist(), boxes.tolist(), grad_out.tolist()
    out = torch.zeros(n, c, k, 4, dtype=torch.float64)
    grad = torch.zeros(feat.shape, dtype=torch.float64)
    for b in range(n):
        for j, (x1, y1, x2, y2) in enumerate(box_list[b]):
            for border in range(4):
                x, y = (x1, y1) if border < 2 else (x2, y2)
                span = (x2 - x1) if border in (0, 2) else (y2 - y1)
                stride = span / pool_size if pool_size else 0.0
                sign = 1.0 if border < 2 else -1.0
                dx, dy = (sign * stride, 0.0) if border in (0, 2) else (0.0, sign * stride)
                for ch in range(c):
                    fmap = maps[b][border * c + ch]
                    px, py = x, y
                    best, taps = roi_align_read(fmap, py, px)
                    for _ in range(pool_size):
                        px, py = px + dx, py + dy
                        value, value_taps = roi_align_read(fmap, py, px)
                        if value > best:
                            best, taps = value, value_taps
                    out[b, ch, j, border] = best
                    for row, col, weight in taps:
                        grad[b, border * c + ch, row, col] += g[b][ch][j][border] * weight
    return out, grad


def _random_case(gen: torch.Generator, n: int, c: int, height: int, width: int, k: int):
    feat = torch.randn(n, 4 * c, height, width, generator=gen, dtype=torch.float64)
    # Corners from 2 pixels before the map to 2 past it: boxes partly or wholly off the map,
    # and some inverted (x2 < x1 or y2 < y1), which mmcv walks backwards.
    lo = torch.tensor([-2.0, -2.0], dtype=torch.float64)
    span = torch.tensor([width + 4.0, height + 4.0], dtype=torch.float64)
    first = lo + span * torch.rand(n, k, 2, generator=gen, dtype=torch.float64)
    second = lo + span * torch.rand(n, k, 2, generator=gen, dtype=torch.float64)
    upright = torch.rand(n, k, 1, generator=gen) < 0.8
    low, high = torch.minimum(first, second), torch.maximum(first, second)
    boxes = torch.cat([torch.where(upright, low, high), torch.where(upright, high, low)], -1)
    return feat, boxes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pool_size", [0, 1, 3, 10])
def test_matches_loop_forward_and_backward(device, pool_size):
    gen = torch.Generator().manual_seed(pool_size)
    feat, boxes = _random_case(gen, n=2, c=2, height=5, width=6, k=30)
    grad_out = torch.randn(2, 2, 30, 4, generator=gen, dtype=torch.float64)
    ref_out, ref_grad = _reference(feat, boxes, pool_size, grad_out)
    ours_in = feat.to(device).requires_grad_()
    out = border_align(ours_in, boxes.to(device), pool_size)
    assert out.shape == (2, 2, 30, 4) and out.dtype == torch.float64 and out.is_contiguous()
    # Boxes off the map read 0 on every border; the rest read the map.
    assert (ref_out == 0).any() and (ref_out != 0).any()
    torch.testing.assert_close(out.cpu(), ref_out, rtol=1e-12, atol=1e-12)
    out.backward(grad_out.to(device))
    torch.testing.assert_close(ours_in.grad.cpu(), ref_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_chunks_give_the_same_result(device, monkeypatch):
    gen = torch.Generator().manual_seed(7)
    feat, boxes = _random_case(gen, n=2, c=3, height=4, width=5, k=20)
    feat, boxes = feat.to(device), boxes.to(device)
    whole_in, chunked_in = feat.clone().requires_grad_(), feat.clone().requires_grad_()
    whole = border_align(whole_in, boxes, 4)
    whole.sum().backward()
    # A few boxes a chunk, forward and backward; chunks cross the images' boundary.
    monkeypatch.setattr(border_align_module, "_CHUNK_ELEMENTS", 3 * 4 * 5 * 15)
    chunked = border_align(chunked_in, boxes, 4)
    chunked.sum().backward()
    torch.testing.assert_close(chunked, whole, rtol=0, atol=0)
    # CUDA's index_add sums in no fixed order: the gradients agree to rounding there.
    torch.testing.assert_close(chunked_in.grad, whole_in.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("pool_size", [1, 2])
def test_mmcv_numbers(device, dtype, pool_size):
    feat = torch.tensor(MMCV_INPUT, dtype=dtype, device=device, requires_grad=True)
    boxes = torch.tensor(MMCV_BOXES, dtype=dtype, device=device)
    out = BorderAlign(pool_size)(feat, boxes)
    expected = torch.tensor(MMCV_OUTPUT[pool_size], dtype=dtype)[None, None]
    torch.testing.assert_close(out.detach().cpu(), expected, rtol=0, atol=1e-5)
    out.backward(torch.ones_like(out))
    grad = torch.tensor(MMCV_GRAD[pool_size], dtype=dtype)[None]
    torch.testing.assert_close(feat.grad.cpu(), grad, rtol=0, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_ties_pick_the_first_point_of_the_walk(device):
    # A constant map: every point ties, so each border's start wins (bottom and right
    # start at (x2, y2)), and the gradient goes to the starts' pixels alone.
    feat = torch.full((1, 4, 4, 5), 2.0, dtype=torch.float64, device=device, requires_grad=True)
    boxes = torch.tensor([[[1.0, 1.0, 3.0, 2.0]]], dtype=torch.float64, device=device)
    out = border_align(feat, boxes, 4)
    torch.testing.assert_close(out.detach().cpu(), torch.full((1, 1, 1, 4), 2.0).double())
    out.sum().backward()
    expected = torch.zeros(1, 4, 4, 5, dtype=torch.float64)
    expected[0, 0, 1, 1] = expected[0, 1, 1, 1] = 1  # top and left start at (x1, y1)
    expected[0, 2, 2, 3] = expected[0, 3, 2, 3] = 1  # bottom and right at (x2, y2)
    torch.testing.assert_close(feat.grad.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_follows_mmcvs_max_rule(device):
    feat = torch.arange(4 * 3 * 4, dtype=torch.float64).view(1, 4, 3, 4)
    feat[0, 0, 0, 0] = math.nan  # the top border's start point: the output is NaN
    feat[0, 1, 2, 0] = math.nan  # read by the left border's last point only: never wins
    feat = feat.to(device).requires_grad_()
    boxes = torch.tensor([[[0.0, 0.0, 3.0, 1.0]]], dtype=torch.float64, device=device)
    out = border_align(feat, boxes, 2)
    values = out.detach().cpu()[0, 0, 0]
    assert math.isnan(values[0])
    # Left: y = 0, 0.5, 1 read 12, 14 and NaN; bottom and right win at their start (3, 1).
    assert values[1:].tolist() == [14.0, 31.0, 43.0]
    out.backward(torch.tensor([[[[0.0, 1.0, 0.0, 0.0]]]], dtype=torch.float64, device=device))
    grad = feat.grad.cpu()
    assert grad[0, 1, 0, 0] == grad[0, 1, 1, 0] == 0.5 and grad[0, 1].sum() == 1.0


def test_gradcheck():
    gen = torch.Generator().manual_seed(3)
    feat = torch.randn(1, 8, 4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    # Fractional corners (no kinks of the bilinear read), one partly off the map.
    boxes = torch.tensor(
        [[[0.3, 0.4, 3.7, 2.6], [1.2, 0.7, 2.9, 3.3], [-0.6, 1.1, 4.4, 3.6]]],
        dtype=torch.float64,
    )
    assert torch.autograd.gradcheck(lambda f: border_align(f, boxes, 3), (feat,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_dtypes_match_float32(device, dtype):
    gen = torch.Generator().manual_seed(5)
    feat, boxes = _random_case(gen, n=2, c=3, height=6, width=7, k=42)
    feat, boxes = feat.to(dtype).to(device), boxes.to(dtype).to(device)
    half_in = feat.clone().requires_grad_()
    full_in = feat.float().requires_grad_()
    out = border_align(half_in, boxes, 5)
    ref = border_align(full_in, boxes.float(), 5)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref.to(dtype).float(), rtol=0, atol=0)
    grad = torch.randn(out.shape, generator=gen).to(dtype).to(device)
    out.backward(grad)
    ref.backward(grad.float())
    assert half_in.grad.dtype == dtype
    torch.testing.assert_close(half_in.grad, full_in.grad.to(dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "feat_shape, boxes_shape, out_shape",
    [
        ((0, 8, 3, 4), (0, 12, 4), (0, 2, 12, 4)),  # no images
        ((2, 8, 3, 4), (2, 0, 4), (2, 2, 0, 4)),  # no boxes
        ((2, 0, 3, 4), (2, 12, 4), (2, 0, 12, 4)),  # no channels
        ((1, 4, 0, 4), (1, 3, 4), (1, 1, 3, 4)),  # an empty map: every read is 0
    ],
)
def test_empty_inputs(device, feat_shape, boxes_shape, out_shape):
    feat = torch.randn(feat_shape, device=device, requires_grad=True)
    boxes = torch.rand(boxes_shape, device=device) * 3
    out = border_align(feat, boxes, 2)
    assert out.shape == out_shape and out.device == feat.device
    assert (out == 0).all()
    out.sum().backward()
    assert feat.grad.shape == feat_shape and (feat.grad == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_input(device):
    gen = torch.Generator().manual_seed(11)
    feat, boxes = _random_case(gen, n=2, c=2, height=5, width=6, k=30)
    channels_last = feat.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2).to(device)
    assert not channels_last.is_contiguous()
    out = border_align(channels_last.requires_grad_(), boxes.to(device), 3)
    ref_in = feat.to(device).requires_grad_()
    ref = border_align(ref_in, boxes.to(device), 3)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(channels_last.grad, ref_in.grad, rtol=1e-12, atol=1e-12)


def test_boxes_get_no_gradient():
    feat = torch.randn(1, 4, 3, 4, requires_grad=True)
    boxes = torch.tensor([[[0.5, 0.5, 2.5, 1.5]]], requires_grad=True)
    border_align(feat, boxes, 2).sum().backward()
    assert boxes.grad is None and feat.grad is not None and feat.grad.abs().sum() > 0


def _inputs():
    return torch.randn(1, 8, 3, 4), torch.rand(1, 12, 4) * 3


def test_rejects_non_tensor_input():
    _, boxes = _inputs()
    with pytest.raises(TypeError, match=r"mmcv\.ops\.border_align: input .*found list"):
        border_align([[1.0]], boxes, 2)


def test_rejects_integer_input():
    feat, boxes = _inputs()
    with pytest.raises(TypeError, match=r"border_align: input .*floating-point.*int64"):
        border_align(feat.long(), boxes, 2)


def test_rejects_non_tensor_boxes():
    feat, _ = _inputs()
    with pytest.raises(TypeError, match=r"border_align: boxes .*found tuple"):
        border_align(feat, (0.0, 0.0, 1.0, 1.0), 2)


def test_rejects_input_not_4d():
    feat, boxes = _inputs()
    with pytest.raises(ValueError, match=r"border_align: input must be \(N, 4C, H, W\)"):
        border_align(feat[0], boxes, 2)


def test_rejects_channels_not_divisible_by_4():
    feat, boxes = _inputs()
    with pytest.raises(ArgumentError, match=r"border_align: input's channels .* found 6"):
        border_align(feat[:, :6], boxes, 2)
    with pytest.raises(AssertionError):  # as mmcv's assert
        border_align(feat[:, :6], boxes, 2)


@pytest.mark.parametrize("shape", [(12, 4), (1, 12, 5), (1, 12, 4, 1)])
def test_rejects_boxes_of_wrong_shape(shape):
    feat, _ = _inputs()
    with pytest.raises(ArgumentError, match=r"border_align: boxes must be \(N, K, 4\)"):
        border_align(feat, torch.zeros(shape), 2)


def test_rejects_boxes_of_another_batch_size():
    feat, boxes = _inputs()
    with pytest.raises(ValueError, match=r"border_align: boxes must have input's batch size 1"):
        border_align(feat, boxes.expand(2, -1, -1), 2)


def test_rejects_boxes_of_another_dtype():
    feat, boxes = _inputs()
    with pytest.raises(TypeError, match=r"border_align: boxes must have input's dtype"):
        border_align(feat, boxes.double(), 2)
    with pytest.raises(TypeError, match=r"border_align: boxes .*floating-point.*int32"):
        border_align(feat, boxes.int(), 2)


def test_rejects_boxes_on_another_device():
    feat, boxes = _inputs()
    with pytest.raises(ValueError, match=r"border_align: boxes must be on input's device cpu"):
        border_align(feat, boxes.to("meta"), 2)


@pytest.mark.parametrize(
    "pool_size, error", [(-1, ValueError), (2.0, TypeError), (True, TypeError), ("2", TypeError)]
)
def test_rejects_bad_pool_size(pool_size, error):
    feat, boxes = _inputs()
    with pytest.raises(error, match=r"border_align: pool_size must be an int"):
        border_align(feat, boxes, pool_size)
    with pytest.raises(error, match=r"BorderAlign: pool_size must be an int"):
        BorderAlign(pool_size)


def test_module_attributes_and_repr():
    module = BorderAlign(10)
    assert module.pool_size == 10 and list(module.parameters()) == []
    assert repr(module) == "BorderAlign(pool_size=10)"
    feat, boxes = _inputs()
    torch.testing.assert_close(module(feat, boxes), border_align(feat, boxes, 10))
    assert module(feat, boxes).shape == (1, 2, 12, 4)
