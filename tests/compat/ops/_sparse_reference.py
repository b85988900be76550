"""Dense references for the tests of mmpar's sparse convolution (tests only).

A sparse tensor ``(features (N, C), indices (N, D + 1))`` is scattered into a dense
``(B, C, *spatial)`` tensor (summing rows at one site, differentiably); torch's own
``conv{2,3}d`` / ``conv_transpose{2,3}d`` / ``max_pool{2,3}d`` run on it with the
sparse weight ``(*kernel_size, C_in, C_out)`` permuted to torch's layout, and the
result is read back at the sparse output sites. The output sites of a strided or
transposed convolution are where the same convolution of the sites' indicator with
a kernel of ones is positive.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

CONV = {2: F.conv2d, 3: F.conv3d}
CONV_T = {2: F.conv_transpose2d, 3: F.conv_transpose3d}
MAX_POOL = {2: F.max_pool2d, 3: F.max_pool3d}


def random_sites(
    n: int, shape: Sequence[int], batch_size: int, seed: int = 0, device: str = "cpu"
) -> Tensor:
    """``(n', D + 1)`` int32 distinct sites (``n' <= n``), in random order."""
    gen = torch.Generator().manual_seed(seed)
    cols = [torch.randint(0, batch_size, (n,), generator=gen)]
    cols += [torch.randint(0, s, (n,), generator=gen) for s in shape]
    sites = torch.unique(torch.stack(cols, 1), dim=0)
    sites = sites[torch.randperm(sites.shape[0], generator=gen)]
    return sites.to(torch.int32).to(device)


def to_dense(features: Tensor, indices: Tensor, shape: Sequence[int], batch_size: int) -> Tensor:
    """``(B, C, *shape)``: the features summed into their sites (differentiable)."""
    channels = features.shape[1]
    dense = features.new_zeros(batch_size, *shape, channels)
    index = tuple(indices[:, i].long() for i in range(indices.shape[1]))
    dense = dense.index_put(index, features, accumulate=True)
    return dense.movedim(-1, 1)


def read(dense: Tensor, sites: Tensor) -> Tensor:
    """``(M, C)``: ``dense`` ``(B, C, *shape)`` at ``sites`` ``(M, D + 1)``."""
    moved = dense.movedim(1, -1)
    return moved[tuple(sites[:, i].long() for i in range(sites.shape[1]))]


def torch_weight(weight: Tensor, transposed: bool = False) -> Tensor:
    """mmcv's ``(*k, C_in, C_out)`` as torch's ``(C_out, C_in, *k)`` (``(C_in, C_out, *k)``
    for a transposed convolution)."""
    nd = weight.dim() - 2
    first = (nd, nd + 1) if transposed else (nd + 1, nd)
    return weight.permute(*first, *range(nd))


def sites_of(dense: Tensor) -> Tensor:
    """``(M, D + 1)`` int32 sites where ``dense`` ``(B, 1, *shape)`` is positive, in
    row-major order (mmpar's order of output sites)."""
    return (dense[:, 0] > 0).nonzero().to(torch.int32)


def conv_reference(
    features: Tensor,
    indices: Tensor,
    shape: Sequence[int],
    batch_size: int,
    weight: Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> Tuple[Tensor, Tensor]:
    """A strided sparse convolution: ``(out_sites, out_features)``."""
    nd = len(shape)
    x = to_dense(features, indices, shape, batch_size)
    out = CONV[nd](x, torch_weight(weight), None, list(stride), list(padding), list(dilation))
    ones = torch.ones(1, 1, *weight.shape[:nd], dtype=features.dtype, device=features.device)
    mark = to_dense(torch.ones_like(features[:, :1]), indices, shape, batch_size)
    reach = CONV[nd](mark, ones, None, list(stride), list(padding), list(dilation))
    sites = sites_of(reach)
    return sites, read(out, sites)


def subm_reference(
    features: Tensor,
    indices: Tensor,
    shape: Sequence[int],
    batch_size: int,
    weight: Tensor,
    dilation: Sequence[int],
) -> Tensor:
    """A submanifold convolution (padding ``k // 2``, stride 1) at the input sites."""
    nd = len(shape)
    ks = weight.shape[:nd]
    x = to_dense(features, indices, shape, batch_size)
    pad: List[int] = []
    for k, d in zip(reversed(ks), reversed(list(dilation))):
        pad += [k // 2, d * (k - 1)]  # enough on the high side for every input site
    out = CONV[nd](F.pad(x, pad), torch_weight(weight), None, 1, 0, list(dilation))
    return read(out, indices)


def transposed_reference(
    features: Tensor,
    indices: Tensor,
    shape: Sequence[int],
    batch_size: int,
    weight: Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    out_shape: Sequence[int],
) -> Tuple[Tensor, Tensor]:
    """A transposed sparse convolution (dilation 1): ``(out_sites, out_features)``."""
    nd = len(shape)
    x = to_dense(features, indices, shape, batch_size)
    out = CONV_T[nd](x, torch_weight(weight, True), None, list(stride), list(padding))
    ones = torch.ones(1, 1, *weight.shape[:nd], dtype=features.dtype, device=features.device)
    mark = to_dense(torch.ones_like(features[:, :1]), indices, shape, batch_size)
    reach = CONV_T[nd](mark, ones, None, list(stride), list(padding))
    crop = (slice(None), slice(None)) + tuple(slice(0, s) for s in out_shape)
    sites = sites_of(reach[crop])
    return sites, read(out[crop], sites)


def inverse_reference(
    features: Tensor,
    out_sites: Tensor,
    out_shape: Sequence[int],
    in_sites: Tensor,
    in_shape: Sequence[int],
    batch_size: int,
    weight: Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
) -> Tensor:
    """The inverse of a strided convolution (dilation 1) at its input sites:
    the transposed convolution of the dense output back onto the input grid."""
    nd = len(in_shape)
    ks = weight.shape[:nd]
    y = to_dense(features, out_sites, out_shape, batch_size)
    back = [(o - 1) * s - 2 * p + k for o, s, p, k in zip(out_shape, stride, padding, ks)]
    extra = [i - b for i, b in zip(in_shape, back)]
    x = CONV_T[nd](y, torch_weight(weight, True), None, list(stride), list(padding), extra)
    return read(x, in_sites)


def maxpool_reference(
    features: Tensor,
    indices: Tensor,
    shape: Sequence[int],
    batch_size: int,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
) -> Tuple[Tensor, Tensor]:
    """Sparse max pooling (outputs start at 0): ``(out_sites, out_features)``."""
    nd = len(shape)
    x = to_dense(features, indices, shape, batch_size)
    mark = to_dense(torch.ones_like(features[:, :1]), indices, shape, batch_size)
    ones = torch.ones(1, 1, *kernel_size, dtype=features.dtype, device=features.device)
    sites = sites_of(CONV[nd](mark, ones, None, list(stride), list(padding)))
    pooled = MAX_POOL[nd](x, list(kernel_size), list(stride), list(padding))
    return sites, read(pooled, sites).clamp(min=0)


def assert_close(got: Tensor, want: Tensor, tol: float = 1e-5) -> None:
    """Same shape and device, and equal within ``tol`` (relative and absolute; NaN
    equal to NaN). Light: ``torch.testing.assert_close`` imports ``torch.distributed``
    on its first call (seconds)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.device == want.device, (got.device, want.device)
    want = want.to(got.dtype)
    ok = torch.allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
    assert ok, f"max abs difference {(got - want).abs().nan_to_num().max().item()}"
