"""mmpar's ``mmcv.ops.active_rotated_filter`` against a per-entry loop."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.active_rotated_filter import active_rotated_filter
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

# A 3 x 3 kernel's places, 1-based row-major, around its ring (clockwise from the top left).
RING = (1, 2, 3, 6, 9, 8, 7, 4)


def turned_3x3(steps: int) -> list:
    """Per place of a 3 x 3 kernel, where a turn by ``steps`` 45-degree steps takes it."""
    return [5 if p == 5 else RING[(RING.index(p) + steps) % 8] for p in range(1, 10)]


def orconv_indices(orients: int, rotations: int) -> torch.Tensor:
    """``(O, 3, 3, R)`` int32 indices of ORConv2d with ``O`` orientations, ``R`` rotations:
    rotation ``k`` turns the kernel by ``k * 360 / R`` degrees and its orientation channels by
    as many ``360 / O`` steps."""
    indices = torch.zeros(orients * 9, rotations, dtype=torch.int32)
    for i in range(orients):
        for j in range(9):
            for k in range(rotations):
                angle = 360 // rotations * k
                layer = (i + angle // (360 // orients)) % orients
                indices[i * 9 + j, k] = layer * 9 + turned_3x3(angle // 45)[j]
    return indices.view(orients, 3, 3, rotations)


def _reference(weight, indices, grad_out):
    """Output and weight gradient (for ``grad_out``), one entry at a time, in float64."""
    planes_out, planes_in, orients, kh, kw = weight.shape
    rotations = indices.shape[3]
    table = indices.reshape(-1, rotations).tolist()
    src, g_out = weight.double().cpu().tolist(), grad_out.double().cpu().tolist()
    out = torch.zeros(planes_out * rotations, planes_in * orients, kh, kw, dtype=torch.float64)
    out = out.tolist()
    grad = torch.zeros(weight.shape, dtype=torch.float64).tolist()
    for i in range(planes_out):
        for j in range(planes_in):
            for o in range(orients):
                for y in range(kh):
                    for x in range(kw):
                        entry = (o * kh + y) * kw + x
                        for r in range(rotations):
                            to_o, rest = divmod(table[entry][r] - 1, kh * kw)
                            to_y, to_x = divmod(rest, kw)
                            row, col = i * rotations + r, j * orients + to_o
                            out[row][col][to_y][to_x] = src[i][j][o][y][x]
                            grad[i][j][o][y][x] += g_out[row][col][to_y][to_x]
    return torch.tensor(out, dtype=torch.float64), torch.tensor(grad, dtype=torch.float64)


def _case(orients=4, rotations=4, device="cpu", dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(3, 2, orients, 3, 3, generator=gen, dtype=torch.float64)
    return weight.to(device, dtype), orconv_indices(orients, rotations).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("orients,rotations", [(8, 8), (4, 2), (1, 8)])
def test_matches_reference(device, orients, rotations):
    weight, indices = _case(orients, rotations, device)
    x = weight.clone().requires_grad_()
    out = active_rotated_filter(x, indices)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref_out, ref_grad = _reference(weight, indices, grad_out)
    torch.testing.assert_close(out.cpu(), ref_out)
    torch.testing.assert_close(x.grad.cpu(), ref_grad)


def test_random_permutations_and_index_dtypes():
    """Any permutation per rotation, given as any integer dtype."""
    gen = torch.Generator().manual_seed(4)
    weight = torch.randn(2, 3, 2, 2, 3, generator=gen, dtype=torch.float64)
    perms = torch.stack([torch.randperm(12, generator=gen) + 1 for _ in range(3)], dim=1)
    indices = perms.view(2, 2, 3, 3)
    ref_out, _ = _reference(weight, indices, torch.zeros(6, 6, 2, 3))
    for dtype in (torch.int32, torch.int64, torch.int16, torch.uint8):
        torch.testing.assert_close(active_rotated_filter(weight, indices.to(dtype)), ref_out)


def test_gradcheck():
    weight, indices = _case(2, 2, seed=1)
    x = weight.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: active_rotated_filter(t, indices), (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device):
    for planes_out, planes_in in ((0, 2), (3, 0)):
        x = torch.randn(planes_out, planes_in, 4, 3, 3, device=device, requires_grad=True)
        out = active_rotated_filter(x, orconv_indices(4, 2).to(device))
        assert out.shape == (planes_out * 2, planes_in * 4, 3, 3)
        out.sum().backward()
        assert x.grad is not None and x.grad.shape == x.shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_types(device, dtype):
    weight, indices = _case(device=device, dtype=torch.float32, seed=2)
    x = weight.to(dtype).requires_grad_()
    out = active_rotated_filter(x, indices)
    assert out.dtype == dtype
    out.float().sum().backward()
    assert x.grad.dtype == dtype
    torch.testing.assert_close(out.float(), active_rotated_filter(x.detach().float(), indices))


def test_bad_arguments():
    weight, indices = _case()
    with pytest.raises(ValueError, match=r"indices must lie in \[1, 36\].*got 0\.\.36"):
        active_rotated_filter(weight, indices - (indices == 1).int())
    with pytest.raises(ValueError, match=r"indices must lie in \[1, 36\].*got 1\.\.37"):
        active_rotated_filter(weight, indices + (indices == 36).int())
    with pytest.raises(TypeError, match="indices must be an integer tensor"):
        active_rotated_filter(weight, indices.float())
    with pytest.raises(TypeError, match="input must be floating point"):
        active_rotated_filter(weight.long(), indices)
    with pytest.raises(ValueError, match=r"indices must have shape \(O, kH, kW, R\)"):
        active_rotated_filter(weight, indices[:2])
    with pytest.raises(ValueError, match=r"input must have shape \(I, J, O, kH, kW\)"):
        active_rotated_filter(weight[0], indices)
    with pytest.raises(TypeError, match="must be tensors"):
        active_rotated_filter(weight, indices.tolist())
