"""mmpar.compat.ops.sparse_pool against torch's dense max pooling of the scattered sites."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.sparse_pool import SparseMaxPool, SparseMaxPool2d, SparseMaxPool3d
from mmpar.compat.ops.sparse_structure import SparseConvTensor
from tests.compat.ops import _sparse_reference as ref
from tests.compat.ops._reference import DEVICES


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nd,ks,stride,pad", [(2, 2, 2, 0), (3, 3, 2, 1), (3, 2, 1, 0)])
def test_max_pool_matches_dense_and_its_gradient(device, nd, ks, stride, pad):
    shape = [8, 9, 7][:nd]
    sites = ref.random_sites(60, shape, 2, seed=1, device=device)
    gen = torch.Generator().manual_seed(2)
    feats = torch.randn(sites.shape[0], 4, generator=gen).to(device).requires_grad_()
    pool = (SparseMaxPool2d if nd == 2 else SparseMaxPool3d)(ks, stride, pad)
    out = pool(SparseConvTensor(feats, sites, shape, 2))
    want_sites, want = ref.maxpool_reference(
        feats, sites, shape, 2, [ks] * nd, [stride] * nd, [pad] * nd
    )
    assert torch.equal(out.indices, want_sites)
    ref.assert_close(out.features, want)
    grad = torch.randn(want.shape, generator=gen).to(device)
    (got,) = torch.autograd.grad((out.features * grad).sum(), feats)
    (exp,) = torch.autograd.grad((want * grad).sum(), feats)
    ref.assert_close(got, exp)


def test_outputs_start_at_zero_ties_all_get_the_gradient_and_nan_never_wins():
    # mmcv's kernel: out = max(0, inputs); every input equal to its output gets its gradient.
    sites = torch.tensor([[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 3, 3]], dtype=torch.int32)
    feats = torch.tensor(
        [[2.0, -1.0, float("nan")], [2.0, -3.0, 1.0], [1.0, -2.0, 0.5], [-1.0, float("inf"), 0.0]],
        requires_grad=True,
    )
    out = SparseMaxPool2d(2, 2)(SparseConvTensor(feats, sites, [4, 4], 1))
    assert out.indices.tolist() == [[0, 0, 0], [0, 1, 1]]
    ref.assert_close(out.features, torch.tensor([[2.0, 0.0, 1.0], [0.0, float("inf"), 0.0]]))
    out.features.sum().backward()
    want = torch.tensor([[1.0, 0, 0], [1.0, 0, 1.0], [0, 0, 0], [0, 1.0, 1.0]])
    ref.assert_close(feats.grad, want)


def test_empty_and_bad_arguments():
    x = SparseConvTensor(torch.zeros(0, 2), torch.zeros(0, 4, dtype=torch.int32), [4, 4, 4], 1)
    out = SparseMaxPool3d(2, 2)(x)
    assert out.features.shape == (0, 2) and out.spatial_shape == [2, 2, 2]
    with pytest.raises(ValueError, match="mmcv.ops.SparseMaxPool3d: kernel_size must be >= 1"):
        SparseMaxPool3d(0)
    with pytest.raises(ValueError, match="stride and dilation"):
        SparseMaxPool(2, 3, 2, 0, 2)
    with pytest.raises(TypeError, match="input must be a SparseConvTensor"):
        SparseMaxPool2d(2)(torch.zeros(3, 2))
