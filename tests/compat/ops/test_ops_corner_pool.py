"""mmpar.compat.ops.corner_pool against corner pooling's definition, written as loops."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.corner_pool import CornerPool
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

MODES = ["bottom", "left", "right", "top"]


def _scan(mode, h, w):
    """Per output pixel, the input pixels it pools, in the order the scan meets them."""
    for y in range(h):
        for x in range(w):
            if mode == "top":
                yield (y, x), [(yy, x) for yy in range(h - 1, y - 1, -1)]
            elif mode == "bottom":
                yield (y, x), [(yy, x) for yy in range(0, y + 1)]
            elif mode == "left":
                yield (y, x), [(y, xx) for xx in range(w - 1, x - 1, -1)]
            else:
                yield (y, x), [(y, xx) for xx in range(0, x + 1)]


def ref_corner_pool(x, mode, upstream):
    """The pooled map, and the input gradient: each output's to its maximum, the last one met."""
    n_b, chans, h, w = x.shape
    out = torch.zeros_like(x)
    grad = torch.zeros_like(x)
    values, up = x.tolist(), upstream.tolist()
    for n in range(n_b):
        for c in range(chans):
            plane = values[n][c]
            for (y, xx), pixels in _scan(mode, h, w):
                best = pixels[0]
                for p in pixels[1:]:
                    if plane[p[0]][p[1]] >= plane[best[0]][best[1]]:
                        best = p
                out[n, c, y, xx] = plane[best[0]][best[1]]
                grad[n, c, best[0], best[1]] += up[n][c][y][xx]
    return out, grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
def test_matches_definition(device, mode):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64)
    x[0, 0, 1, :] = x[0, 0, 2, :]  # ties along H
    x[1, 2, :, 3] = x[1, 2, :, 1]  # ties along W
    x[0, 1] = 0.5  # a constant plane: all ties
    upstream = torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64)
    expected, expected_grad = ref_corner_pool(x, mode, upstream)
    inp = x.to(device).requires_grad_()
    out = CornerPool(mode)(inp)
    torch.testing.assert_close(out.detach().cpu(), expected)
    (out * upstream.to(device)).sum().backward()
    torch.testing.assert_close(inp.grad.cpu(), expected_grad)


@pytest.mark.parametrize("mode", MODES)
def test_gradcheck(mode):
    x = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)  # no ties
    assert torch.autograd.gradcheck(CornerPool(mode), (x,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision(device, dtype):
    x = torch.randn(2, 2, 5, 6, device=device).to(dtype)
    for mode in MODES:
        out = CornerPool(mode)(x)
        assert out.dtype == dtype
        expected, _ = ref_corner_pool(x.double().cpu(), mode, torch.zeros(2, 2, 5, 6))
        torch.testing.assert_close(out.double().cpu(), expected)  # max picks, no rounding


def test_examples():
    x = torch.tensor([[[[1.0, 3.0, 2.0], [0.0, 5.0, -1.0]]]])
    assert CornerPool("right")(x).tolist() == [[[[1.0, 3.0, 3.0], [0.0, 5.0, 5.0]]]]
    assert CornerPool("left")(x).tolist() == [[[[3.0, 3.0, 2.0], [5.0, 5.0, -1.0]]]]
    assert CornerPool("bottom")(x).tolist() == [[[[1.0, 3.0, 2.0], [1.0, 5.0, 2.0]]]]
    assert CornerPool("top")(x).tolist() == [[[[1.0, 5.0, 2.0], [0.0, 5.0, -1.0]]]]


def test_empty_and_attributes():
    for shape in [(0, 2, 3, 3), (1, 2, 0, 3), (1, 2, 3, 0)]:
        for mode in MODES:
            x = torch.zeros(shape, requires_grad=True)
            out = CornerPool(mode)(x)
            assert out.shape == shape
            out.sum().backward()
            assert x.grad.shape == shape
    pool = CornerPool("top")
    assert pool.mode == "top" and pool.cummax_dim_flip["top"] == (2, True)


def test_bad_mode_and_input():
    with pytest.raises(
        ValueError, match=r"mode must be one of \['bottom', 'left', 'right', 'top'\], found 'up'"
    ):
        CornerPool("up")
    with pytest.raises(AssertionError, match="mode must be one of"):  # as mmcv's assert
        CornerPool(["top"])
    with pytest.raises(ValueError, match=r"x must be \(N, C, H, W\)"):
        CornerPool("top")(torch.zeros(2, 3, 4))


def test_mmcv_examples_on_integer_maps():
    # mmcv's own test (tests/test_ops/test_corner_pool.py): long tensors keep their type
    lr = torch.tensor(
        [[[[0, 0, 0, 0, 0], [2, 1, 3, 0, 2], [5, 4, 1, 1, 6], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]]]]
    )
    tb = torch.tensor(
        [[[[0, 3, 1, 0, 0], [0, 1, 1, 0, 0], [0, 3, 4, 0, 0], [0, 2, 2, 0, 0], [0, 0, 2, 0, 0]]]]
    )
    expected = {
        ("left", 0): [[0, 0, 0, 0, 0], [3, 3, 3, 2, 2], [6, 6, 6, 6, 6], [0] * 5, [0] * 5],
        ("right", 0): [[0, 0, 0, 0, 0], [2, 2, 3, 3, 3], [5, 5, 5, 5, 6], [0] * 5, [0] * 5],
        ("top", 1): [
            [0, 3, 4, 0, 0],
            [0, 3, 4, 0, 0],
            [0, 3, 4, 0, 0],
            [0, 2, 2, 0, 0],
            [0, 0, 2, 0, 0],
        ],
        ("bottom", 1): [
            [0, 3, 1, 0, 0],
            [0, 3, 1, 0, 0],
            [0, 3, 4, 0, 0],
            [0, 3, 4, 0, 0],
            [0, 3, 4, 0, 0],
        ],
    }
    for (mode, which), answer in expected.items():
        x = (lr, tb)[which]
        out = CornerPool(mode)(x)
        assert out.dtype == torch.long
        assert torch.equal(out, torch.tensor([[answer]]))


def test_nan_runs_on_to_the_border_as_mmcvs_cummax():
    x = torch.tensor([[[[1.0, float("nan"), 0.0, 2.0]]]])
    assert torch.equal(CornerPool("right")(x).isnan(), torch.tensor([[[[0, 1, 1, 1]]]]).bool())
    assert torch.equal(CornerPool("left")(x)[..., 2:], torch.tensor([[[[2.0, 2.0]]]]))
    assert CornerPool("left")(x)[..., :2].isnan().all()
