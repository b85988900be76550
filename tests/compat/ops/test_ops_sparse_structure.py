"""mmpar.compat.ops.sparse_structure and sparse_modules: the tensor, scatter_nd, Sequential."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from mmpar.compat.ops.sparse_conv import SparseConv3d, SubMConv3d
from mmpar.compat.ops.sparse_modules import (
    RemoveGrid,
    SparseModule,
    SparseSequential,
    ToDense,
    is_sparse_conv,
    is_spconv_module,
)
from mmpar.compat.ops.sparse_structure import SparseConvTensor, scatter_nd
from tests.compat.ops import _sparse_reference as ref
from tests.compat.ops._reference import DEVICES


@pytest.mark.parametrize("device", DEVICES)
def test_dense_is_the_scatter_of_the_features(device):
    sites = ref.random_sites(30, [4, 5, 6], 2, device=device)
    feats = torch.randn(sites.shape[0], 3).to(device)
    x = SparseConvTensor(feats, sites, [4, 5, 6], 2)
    want = torch.zeros(2, 4, 5, 6, 3, device=device)
    for (b, z, y, w), f in zip(sites.tolist(), feats):
        want[b, z, y, w] = f
    ref.assert_close(x.dense(channels_first=False), want)
    ref.assert_close(x.dense(), want.permute(0, 4, 1, 2, 3))
    assert x.dense().is_contiguous()
    assert x.spatial_size == 120 and x.sparity == pytest.approx(sites.shape[0] / 240)
    assert x.find_indice_pair(None) is None and x.find_indice_pair("k") is None


def test_dense_carries_the_gradient():
    sites = ref.random_sites(10, [3, 4], 1)
    feats = torch.randn(sites.shape[0], 2, requires_grad=True)
    dense = SparseConvTensor(feats, sites, [3, 4], 1).dense()
    grad = torch.randn_like(dense)
    (dense * grad).sum().backward()
    ref.assert_close(feats.grad, ref.read(grad, sites))


def test_scatter_nd():
    idx = torch.tensor([[0, 1], [2, 0]])
    upd = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = scatter_nd(idx, upd, [3, 2, 2])
    want = torch.zeros(3, 2, 2)
    want[0, 1], want[2, 0] = upd[0], upd[1]
    ref.assert_close(out, want)


def test_bad_tensors():
    with pytest.raises(TypeError, match="mmcv.ops.SparseConvTensor: features must be a tensor"):
        SparseConvTensor(np.zeros((2, 3)), torch.zeros(2, 4, dtype=torch.int32), [2, 2, 2], 1)
    with pytest.raises(ValueError, match="the same N"):
        SparseConvTensor(torch.zeros(3, 2), torch.zeros(2, 4, dtype=torch.int32), [2, 2, 2], 1)
    x = SparseConvTensor(
        torch.zeros(1, 2), torch.tensor([[0, 0, 5, 0]], dtype=torch.int32), [2, 2, 2], 1
    )
    with pytest.raises(ValueError, match=r"SparseConvTensor.dense: indices\[:, 2\]"):
        x.dense()


def test_sequential_runs_sparse_and_feature_modules():
    sites = ref.random_sites(30, [4, 5, 6], 1)
    feats = torch.randn(sites.shape[0], 3)
    conv = SubMConv3d(3, 4, 3, indice_key="a")
    seq = SparseSequential(OrderedDict([("conv", conv), ("relu", nn.ReLU()), ("dense", ToDense())]))
    out = seq(SparseConvTensor(feats, sites, [4, 5, 6], 1))
    want = conv(SparseConvTensor(feats, sites, [4, 5, 6], 1)).dense().relu()
    ref.assert_close(out, want)
    assert set(seq.sparity_dict) == {"conv", "dense"}
    assert seq[0] is conv and seq[-1] is seq.dense and len(seq) == 3
    with pytest.raises(IndexError, match="index 3 is out of range"):
        seq[3]
    seq.add(RemoveGrid())
    assert len(seq) == 4 and isinstance(seq[3], RemoveGrid)
    assert is_spconv_module(conv) and is_sparse_conv(conv) and not is_sparse_conv(seq[3])
    assert isinstance(seq, SparseModule) and not is_spconv_module(nn.ReLU())
    with pytest.raises(ValueError, match="name exists"):
        SparseSequential(nn.ReLU(), **{"0": nn.ReLU()})
    with pytest.raises(TypeError, match="takes a SparseConvTensor"):
        SparseSequential(conv)(feats)


def test_sequential_skips_feature_modules_on_an_empty_tensor():
    bn = nn.BatchNorm1d(4).train()
    seq = SparseSequential(SubMConv3d(3, 4, 3), bn)
    x = SparseConvTensor(torch.zeros(0, 3), torch.zeros(0, 4, dtype=torch.int32), [4, 4, 4], 1)
    assert seq(x).features.shape == (0, 4)  # a batch norm in training never sees 0 rows
    assert bn.num_batches_tracked == 0


def test_a_numpy_or_size_spatial_shape_works_as_a_list():
    sites = ref.random_sites(30, [4, 5, 6], 2)
    feats = torch.randn(sites.shape[0], 3)
    seq = SparseSequential(SubMConv3d(3, 4, 3), SparseConv3d(4, 2, 3, 2, 1))
    want = seq(SparseConvTensor(feats, sites, [4, 5, 6], 2)).dense()
    for shape in (np.array([4, 5, 6]), torch.Size([4, 5, 6]), (4, 5, 6)):
        ref.assert_close(seq(SparseConvTensor(feats, sites, shape, 2)).dense(), want)
