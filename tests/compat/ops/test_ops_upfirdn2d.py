"""mmpar.compat.ops.upfirdn2d against zero insertion, padding and a direct correlation loop."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.upfirdn2d import upfirdn2d, upfirdn2d_native
from tests.compat.ops._reference import DEVICES, HALF_DTYPES


def reference(x: torch.Tensor, kernel: torch.Tensor, up, down, pads) -> torch.Tensor:
    """The definition, one output pixel at a time; ``up``/``down`` ``(x, y)``, ``pads``
    ``(x0, x1, y0, y1)``."""
    (up_x, up_y), (down_x, down_y), (px0, px1, py0, py1) = up, down, pads
    n, c, height, width = x.shape
    kh, kw = kernel.shape
    # Zero insertion: sample (i, j) at (i * up_y, j * up_x) of an (H * up_y, W * up_x) grid.
    big_h, big_w = height * up_y, width * up_x

    def padded(i: int, j: int) -> torch.Tensor:  # the padded (and cropped) signal
        i, j = i - py0, j - px0
        if 0 <= i < big_h and 0 <= j < big_w and i % up_y == 0 and j % up_x == 0:
            return x[:, :, i // up_y, j // up_x]
        return x.new_zeros(n, c)

    out_h = (big_h + py0 + py1 - kh) // down_y + 1
    out_w = (big_w + px0 + px1 - kw) // down_x + 1
    out = x.new_zeros(n, c, out_h, out_w)
    flipped = kernel.flip(0, 1)
    for oy in range(out_h):
        for ox in range(out_w):
            acc = x.new_zeros(n, c)
            for a in range(kh):
                for b in range(kw):
                    acc = acc + flipped[a, b] * padded(oy * down_y + a, ox * down_x + b)
            out[:, :, oy, ox] = acc
    return out


# (up, down, pad as given, pad as (x0, x1, y0, y1), kernel shape, input (H, W)).
CASES = [
    (2, 1, (2, 1), (2, 1, 2, 1), (4, 4), (4, 5)),  # StyleGAN2's upsampling
    (1, 2, (1, 1), (1, 1, 1, 1), (4, 4), (6, 5)),  # and downsampling
    (1, 1, (2, 1), (2, 1, 2, 1), (4, 4), (3, 4)),  # its blur
    ((2, 3), (1, 1), (0, 1, 1, 0), (0, 1, 1, 0), (3, 2), (3, 3)),
    (1, (3, 2), (0, 0), (0, 0, 0, 0), (2, 3), (7, 8)),
    (2, 2, (-1, 2, 1, -2), (-1, 2, 1, -2), (3, 3), (4, 4)),  # crops and pads
    (3, 2, (1, 0), (1, 0, 1, 0), (1, 1), (2, 3)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("up, down, pad, pads, kernel_shape, size", CASES)
def test_matches_loop(device, up, down, pad, pads, kernel_shape, size):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, *size, generator=gen, dtype=torch.float64)
    kernel = torch.randn(kernel_shape, generator=gen, dtype=torch.float64)
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    expected = reference(x, kernel, pair(up), pair(down), pads)
    got = upfirdn2d(x.to(device), kernel.to(device), up=up, down=down, pad=pad)
    torch.testing.assert_close(got.cpu(), expected)
    native = upfirdn2d_native(x.to(device), kernel.to(device), *pair(up), *pair(down), *pads)
    torch.testing.assert_close(native.cpu(), expected)


@pytest.mark.parametrize("up, down", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_gradcheck_and_gradgradcheck(up, down):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2, 3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    kernel = torch.randn(3, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    func = lambda a, k: upfirdn2d(a, k, up=up, down=down, pad=(1, 0, 2, -1))  # noqa: E731
    assert torch.autograd.gradcheck(func, (x, kernel))
    assert torch.autograd.gradgradcheck(func, (x, kernel))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(device, dtype):
    x = torch.randn(2, 3, 4, 4).to(dtype)
    kernel = torch.tensor([1.0, 3.0, 3.0, 1.0])
    kernel = (kernel[:, None] * kernel[None]) / 64
    got = upfirdn2d(x.to(device), kernel.to(device, dtype), up=2, pad=(2, 1))
    assert got.dtype == dtype and got.shape == (2, 3, 8, 8)
    expected = upfirdn2d(x.float(), kernel.to(dtype).float(), up=2, pad=(2, 1)).to(dtype)
    torch.testing.assert_close(got.cpu(), expected)


def test_empty():
    kernel = torch.ones(2, 2)
    for up in (1, 2):
        x = torch.zeros(0, 3, 4, 4, requires_grad=True)
        out = upfirdn2d(x, kernel, up=up)
        assert out.shape == (0, 3, 4 * up - 1, 4 * up - 1)
        out.sum().backward()
        assert x.grad.shape == x.shape
        # An empty map, padded to the kernel's size: zeros.
        x = torch.zeros(1, 2, 0, 3, requires_grad=True)
        out = upfirdn2d(x, kernel, up=up, pad=(1, 1))
        assert out.shape == (1, 2, 1, 3 * up + 1) and not out.any()
        out.sum().backward()


def test_bad_input():
    x, kernel = torch.zeros(1, 1, 4, 4), torch.ones(3, 3)
    with pytest.raises(ValueError, match=r"upfirdn2d: pad must be \(pad0, pad1\) or .* got \(1,"):
        upfirdn2d(x, kernel, pad=(1, 1, 1))
    with pytest.raises(ValueError, match="upfirdn2d: up must be >= 1, got 0"):
        upfirdn2d(x, kernel, up=0)
    with pytest.raises(TypeError, match=r"down must be an int or \(x, y\) ints, got 2.0"):
        upfirdn2d(x, kernel, down=2.0)
    with pytest.raises(ValueError, match=r"kernel must have shape \(kernel_h, kernel_w\)"):
        upfirdn2d(x, torch.ones(3))
    with pytest.raises(ValueError, match=r"input must have shape \(N, C, H, W\), got \(4, 4\)"):
        upfirdn2d(x[0, 0], kernel)
    with pytest.raises(ValueError, match=r"kernel \(3, 3\) is larger than the upsampled, padded"):
        upfirdn2d(x, kernel, pad=(-1, -1))
    with pytest.raises(TypeError, match="kernel must be floating point, found torch.int64"):
        upfirdn2d(x, kernel.long())


def test_signature_matches_mmcv():
    import ast
    import inspect
    from pathlib import Path

    mmcv = pytest.importorskip("mmcv")
    tree = ast.parse((Path(mmcv.__file__).parent / "ops" / "upfirdn2d.py").read_text())
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for ours in (upfirdn2d, upfirdn2d_native):
        func = funcs[ours.__name__]
        params = list(inspect.signature(ours).parameters.values())
        assert [p.name for p in params] == [a.arg for a in func.args.args]
        defaults = [p.default for p in params if p.default is not p.empty]
        assert defaults == [ast.literal_eval(d) for d in func.args.defaults]
