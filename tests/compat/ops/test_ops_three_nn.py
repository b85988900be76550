"""mmpar.compat.ops.three_nn against mmcv's kernel's loop (its running best three)."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from mmpar.compat.ops.three_nn import three_nn
from tests.compat.ops._points_reference import ref_three_nn
from tests.compat.ops._reference import DEVICES

# mmcv's own test (tests/test_ops/test_three_nn.py).
KNOWN = [
    [
        [-1.8373, 3.5605, -0.7867],
        [0.7615, 2.9420, 0.2314],
        [-0.6503, 3.6637, -1.0622],
        [-1.8373, 3.5605, -0.7867],
        [-1.8373, 3.5605, -0.7867],
    ],
    [
        [-1.3399, 1.9991, -0.3698],
        [-0.0799, 0.9698, -0.8457],
        [0.0858, 2.4721, -0.1928],
        [-1.3399, 1.9991, -0.3698],
        [-1.3399, 1.9991, -0.3698],
    ],
]
UNKNOWN = [
    [
        [-1.8373, 3.5605, -0.7867],
        [0.7615, 2.9420, 0.2314],
        [-0.6503, 3.6637, -1.0622],
        [-1.5237, 2.3976, -0.8097],
        [-0.0722, 3.4017, -0.2880],
        [0.5198, 3.0661, -0.4605],
        [-2.0185, 3.5019, -0.3236],
        [0.5098, 3.1020, 0.5799],
        [-1.6137, 3.8443, -0.5269],
        [0.7341, 2.9626, -0.3189],
    ],
    [
        [-1.3399, 1.9991, -0.3698],
        [-0.0799, 0.9698, -0.8457],
        [0.0858, 2.4721, -0.1928],
        [-0.9022, 1.6560, -1.3090],
        [0.1156, 1.6901, -0.4366],
        [-0.6477, 2.3576, -0.1563],
        [-0.8482, 1.1466, -1.2704],
        [-0.8753, 2.0845, -0.3460],
        [-0.5621, 1.4233, -1.2858],
        [-0.5883, 1.3114, -1.2899],
    ],
]
EXPECTED_DIST = [
    [
        [0.0000, 0.0000, 0.0000],
        [0.0000, 2.0463, 2.8588],
        [0.0000, 1.2229, 1.2229],
        [1.2047, 1.2047, 1.2047],
        [1.0011, 1.0845, 1.8411],
        [0.7433, 1.4451, 2.4304],
        [0.5007, 0.5007, 0.5007],
        [0.4587, 2.0875, 2.7544],
        [0.4450, 0.4450, 0.4450],
        [0.5514, 1.7206, 2.6811],
    ],
    [
        [0.0000, 0.0000, 0.0000],
        [0.0000, 1.6464, 1.6952],
        [0.0000, 1.5125, 1.5125],
        [1.0915, 1.0915, 1.0915],
        [0.8197, 0.8511, 1.4894],
        [0.7433, 0.8082, 0.8082],
        [0.8955, 1.3340, 1.3340],
        [0.4730, 0.4730, 0.4730],
        [0.7949, 1.3325, 1.3325],
        [0.7566, 1.3727, 1.3727],
    ],
]
EXPECTED_IDX = [
    [[0, 3, 4], [1, 2, 0], [2, 0, 3], [0, 3, 4], [2, 1, 0]]
    + [[1, 2, 0], [0, 3, 4], [1, 2, 0], [0, 3, 4], [1, 2, 0]],
    [[0, 3, 4], [1, 2, 0], [2, 0, 3], [0, 3, 4], [2, 1, 0]]
    + [[2, 0, 3], [1, 0, 3], [0, 3, 4], [1, 0, 3], [1, 0, 3]],
]


def expected(target: torch.Tensor, source: torch.Tensor) -> tuple:
    """The kernel's ``(sqrt of dist2 in the dtype, idx)`` as nested lists."""
    dists, idxs = [], []
    for t, s in zip(target, source):
        rows = [ref_three_nn(s.tolist(), point, target.dtype) for point in t.tolist()]
        dists.append([r[0] for r in rows])
        idxs.append([r[1] for r in rows])
    dist2 = torch.tensor(dists, dtype=torch.float64).to(target.dtype).view(*target.shape[:2], 3)
    return dist2.sqrt(), idxs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_mmcv_numbers(device: str, dtype: torch.dtype) -> None:
    known = torch.tensor(KNOWN, dtype=dtype, device=device)
    unknown = torch.tensor(UNKNOWN, dtype=dtype, device=device)
    dist, idx = three_nn(unknown, known)
    assert dist.dtype == dtype and idx.dtype == torch.int32
    tol = 1e-3 if dtype == torch.float16 else 1e-4
    expected_dist = torch.tensor(EXPECTED_DIST, dtype=dtype)
    torch.testing.assert_close(dist.cpu(), expected_dist, atol=tol, rtol=tol)
    assert idx.tolist() == EXPECTED_IDX


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("m", [1, 2, 3, 12])
def test_matches_kernel_loop(device: str, dtype: torch.dtype, m: int) -> None:
    gen = torch.Generator().manual_seed(m)
    # A coarse grid: equal distances (ties by index), duplicates.
    target = (torch.randint(-3, 4, (2, 9, 3), generator=gen) / 4).to(dtype)
    source = (torch.randint(-3, 4, (2, m, 3), generator=gen) / 4).to(dtype)
    dist, idx = three_nn(target.to(device), source.to(device))
    ref_dist, ref_idx = expected(target, source)
    assert idx.tolist() == ref_idx
    assert torch.equal(dist.cpu(), ref_dist)


def test_fewer_than_three_points() -> None:
    # The kernel's start values stay: index 0 and sqrt(1e40 stored in the dtype).
    target, source = torch.zeros(1, 1, 3), torch.tensor([[[0.0, 0.0, 2.0]]])
    for dtype, far in [(torch.float32, math.inf), (torch.float64, 1e20), (torch.half, math.inf)]:
        dist, idx = three_nn(target.to(dtype), source.to(dtype))
        assert dist.tolist() == [[[2.0, far, far]]] and idx.tolist() == [[[0, 0, 0]]]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_points_are_never_taken(bad: float) -> None:
    source = torch.tensor([[[bad, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    dist, idx = three_nn(torch.zeros(1, 1, 3), source)
    assert dist.tolist() == [[[1.0, math.inf, math.inf]]] and idx.tolist() == [[[1, 0, 0]]]


def test_no_gradient() -> None:
    # As mmcv's ThreeNN: the distances are an autograd output whose gradient is None.
    target = torch.rand(1, 4, 3, requires_grad=True)
    source = torch.rand(1, 5, 3, requires_grad=True)
    dist, idx = three_nn(target, source)
    dist.sum().backward()
    assert target.grad is None and source.grad is None and not idx.requires_grad


def test_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    target, source = torch.rand(2, 30, 3), torch.rand(2, 17, 3)
    full = three_nn(target, source)
    monkeypatch.setattr(sys.modules["mmpar.compat.ops.three_nn"], "search_chunk", lambda d: 9)
    for got, ref in zip(three_nn(target, source), full):
        assert torch.equal(got, ref)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b, n, m", [(0, 4, 3), (2, 0, 3), (2, 4, 0)])
def test_empty(device: str, b: int, n: int, m: int) -> None:
    dist, idx = three_nn(torch.rand(b, n, 3, device=device), torch.rand(b, m, 3, device=device))
    assert dist.shape == idx.shape == (b, n, 3) and not idx.any()
    if m == 0:  # every slot the kernel's start value
        assert bool((dist == math.inf).all())


def test_bad_input() -> None:
    target, source = torch.rand(2, 5, 3), torch.rand(2, 4, 3)
    with pytest.raises(TypeError, match="three_nn: target must be a floating-point tensor"):
        three_nn(target.long(), source)
    with pytest.raises(ValueError, match="three_nn: source must have 3 coordinates per point"):
        three_nn(target, source[..., :2])
    with pytest.raises(ValueError, match=r"three_nn: source must have shape \(B, M, C\), found"):
        three_nn(target, source[0])
    with pytest.raises(TypeError, match="source must have the dtype of target"):
        three_nn(target, source.double())
    with pytest.raises(ValueError, match="same batch size, found 2 and 1"):
        three_nn(target, source[:1])


def test_points_of_more_values_are_read_as_the_kernel_reads_its_buffer() -> None:
    """mmdet3d's SASSD passes (B, N, 4) points: mmcv's kernel reads point i of cloud b at
    offset (b * N + i) * 3 of the buffer, so models trained with it saw those points."""
    gen = torch.Generator().manual_seed(5)
    target, source = torch.rand(2, 6, 4, generator=gen), torch.rand(2, 5, 4, generator=gen)

    def as_kernel_reads(x: torch.Tensor) -> list:
        flat = x.flatten().tolist()
        b, n = x.shape[:2]
        return [[flat[(i * n + j) * 3 : (i * n + j) * 3 + 3] for j in range(n)] for i in range(b)]

    dist, idx = three_nn(target, source)
    read_t, read_s = torch.tensor(as_kernel_reads(target)), torch.tensor(as_kernel_reads(source))
    ref_dist, ref_idx = expected(read_t, read_s)
    assert idx.tolist() == ref_idx
    assert torch.equal(dist, ref_dist)
