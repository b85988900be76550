"""mmpar.compat.ops.psa_mask against an explicit per-position loop (mmcv's kernel's definition)."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.psa_mask import PSAMask, PSAMaskFunction, psa_mask
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

# (H, W, h_mask, w_mask): PSANet's full mask (2H-1, 2W-1), smaller, even, larger than needed.
CASES = [(3, 4, 5, 7), (4, 3, 3, 3), (3, 5, 4, 2), (2, 3, 7, 9), (1, 1, 1, 1)]


def _reference(mask: torch.Tensor, kind: str, h_mask: int, w_mask: int) -> torch.Tensor:
    n, _, height, width = mask.shape
    half_h, half_w = (h_mask - 1) // 2, (w_mask - 1) // 2
    out = mask.new_zeros(n, height * width, height, width)
    for b in range(n):
        for y in range(height):
            for x in range(width):
                for i in range(h_mask):
                    for j in range(w_mask):
                        ty, tx = y + i - half_h, x + j - half_w
                        if not (0 <= ty < height and 0 <= tx < width):
                            continue
                        v = mask[b, i * w_mask + j, y, x]
                        if kind == "collect":
                            out[b, ty * width + tx, y, x] = v
                        else:
                            out[b, y * width + x, ty, tx] = v
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["collect", "distribute"])
@pytest.mark.parametrize("height, width, h_mask, w_mask", CASES)
def test_matches_loop_forward_and_backward(device, kind, height, width, h_mask, w_mask):
    gen = torch.Generator().manual_seed(0)
    mask = torch.randn(2, h_mask * w_mask, height, width, generator=gen, dtype=torch.float64)
    ours_in = mask.to(device).detach().clone().requires_grad_()
    ref_in = mask.detach().clone().requires_grad_()
    out = PSAMask(kind, (h_mask, w_mask))(ours_in)
    ref = _reference(ref_in, kind, h_mask, w_mask)
    assert out.shape == (2, height * width, height, width) and out.device == ours_in.device
    assert out.is_contiguous()  # as mmcv's kernels write it: PSANet's heads view(-1) it
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)
    grad = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    out.backward(grad.to(device))
    ref.backward(grad)
    # Mask entries whose pair falls outside the map get no gradient.
    torch.testing.assert_close(ours_in.grad.cpu(), ref_in.grad, rtol=0, atol=0)


@pytest.mark.parametrize("kind", [0, 1])
def test_gradcheck(kind):
    mask = torch.randn(1, 3 * 5, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda m: psa_mask(m, kind, (3, 5)), (mask,))


def test_collect_and_distribute_are_transposes():
    mask = torch.randn(2, 25, 3, 3)
    collect = psa_mask(mask, "collect", 5).view(2, 9, 9)
    distribute = psa_mask(mask, "distribute", 5).view(2, 9, 9)
    torch.testing.assert_close(collect, distribute.transpose(1, 2), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_dtypes_are_exact(device, dtype):
    mask = torch.randn(2, 15, 3, 4, device=device)
    for kind in ("collect", "distribute"):
        out = PSAMask(kind, (3, 5))(mask.to(dtype))
        assert out.dtype == dtype
        torch.testing.assert_close(out, psa_mask(mask, kind, (3, 5)).to(dtype), rtol=0, atol=0)


def test_empty_batch():
    assert psa_mask(torch.zeros(0, 9, 2, 2), 0, 3).shape == (0, 4, 2, 2)


def test_function_apply_and_int_types():
    mask = torch.randn(1, 9, 3, 3)
    torch.testing.assert_close(PSAMaskFunction.apply(mask, 1, (3, 3)), psa_mask(mask, 1, 3))
    torch.testing.assert_close(psa_mask(mask, 0, (3, 3)), psa_mask(mask, "collect", 3))


def test_module_attributes_and_repr():
    module = PSAMask("distribute", (3, 3))
    assert (module.psa_type, module.psa_type_enum, module.mask_size) == ("distribute", 1, (3, 3))
    assert repr(module) == "PSAMask(psa_type=distribute, mask_size=(3, 3))"
    assert PSAMask("collect").psa_type_enum == 0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: PSAMask("gather", (3, 3)), "psa_type"),
        (lambda: PSAMask("collect")(torch.zeros(1, 9, 2, 2)), "mask_size is required"),
        (lambda: psa_mask(torch.zeros(1, 8, 2, 2), 0, (3, 3)), r"h_mask \* w_mask = 9"),
        (lambda: psa_mask(torch.zeros(9, 2, 2), 0, (3, 3)), r"found \(9, 2, 2\)"),
        (lambda: psa_mask(torch.zeros(1, 9, 2, 2), 2, (3, 3)), "psa_type"),
        (lambda: psa_mask(torch.zeros(1, 9, 2, 2), 0, (3, 0)), "mask_size"),
        (lambda: psa_mask(torch.zeros(1, 9, 2, 2), 0, -3), "mask_size must be a positive int"),
        (lambda: psa_mask(torch.zeros(1, 9, 2, 2), ["collect"], 3), "psa_type"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda: PSAMask("gather", (3, 3)),
        lambda: psa_mask(torch.zeros(1, 9, 2, 2), "gather", 3),
        lambda: psa_mask(torch.zeros(1, 8, 2, 2), 0, 3),
    ],
)
def test_what_mmcv_asserts_is_an_assertion_error_too(call):
    with pytest.raises(AssertionError, match="psa_type|h_mask"):
        call()


@pytest.mark.parametrize("shape", [(0, 9, 3, 4), (1, 9, 0, 4), (1, 9, 3, 0)])
@pytest.mark.parametrize("kind", ["collect", "distribute"])
def test_empty_forward_and_backward(shape, kind):
    x = torch.zeros(shape, requires_grad=True)
    out = psa_mask(x, kind, 3)
    assert out.shape == (shape[0], shape[2] * shape[3], shape[2], shape[3])
    out.sum().backward()
    assert x.grad.shape == shape
