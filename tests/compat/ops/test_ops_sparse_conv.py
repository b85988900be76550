"""mmpar.compat.ops.sparse_conv against dense convolutions of the scattered sites."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops import sparse_ops
from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.sparse_conv import (
    SparseConv2d,
    SparseConv3d,
    SparseConvolution,
    SparseConvTranspose2d,
    SparseConvTranspose3d,
    SparseInverseConv2d,
    SparseInverseConv3d,
    SubMConv2d,
    SubMConv3d,
)
from mmpar.compat.ops.sparse_modules import SparseSequential
from mmpar.compat.ops.sparse_structure import SparseConvTensor
from tests.compat.ops import _sparse_reference as ref
from tests.compat.ops._reference import DEVICES

SHAPES = {2: [9, 11], 3: [7, 9, 8]}
CONV = {2: SparseConv2d, 3: SparseConv3d}
SUBM = {2: SubMConv2d, 3: SubMConv3d}
TRANS = {2: SparseConvTranspose2d, 3: SparseConvTranspose3d}
INV = {2: SparseInverseConv2d, 3: SparseInverseConv3d}


def make_input(nd, n=40, channels=3, batch=2, seed=0, device="cpu", dtype=torch.float32):
    shape = SHAPES[nd]
    sites = ref.random_sites(n, shape, batch, seed, device)
    gen = torch.Generator().manual_seed(seed + 1)
    feats = torch.randn(sites.shape[0], channels, generator=gen, dtype=dtype).to(device)
    return feats.requires_grad_(), sites, shape, batch


def randomize(layer, seed=2):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return layer


def grads(outputs, inputs, seed=3):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(outputs.shape, generator=gen, dtype=outputs.dtype).to(outputs.device)
    return torch.autograd.grad((outputs * w).sum(), inputs)


def close(a, b, tol=1e-4):
    ref.assert_close(a, b, tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize("ksize,dilation", [(3, 1), ((3, 1, 5), 1), (3, 2), (2, 1)])
def test_subm_matches_dense_at_the_input_sites(device, nd, ksize, dilation):
    if isinstance(ksize, tuple):
        ksize = ksize[:nd]
    feats, sites, shape, batch = make_input(nd, device=device)
    # SubM ignores the given stride and padding (mmcv's kernels: stride 1, padding k // 2).
    stride = 2 if dilation == 1 else 1
    layer = randomize(SUBM[nd](3, 4, ksize, stride, padding=5, dilation=dilation)).to(device)
    out = layer(SparseConvTensor(feats, sites, shape, batch))
    assert out.indices is sites and out.spatial_shape == shape
    dil = [dilation] * nd
    want = ref.subm_reference(feats, sites, shape, batch, layer.weight, dil) + layer.bias
    close(out.features, want)
    close_grads = zip(
        grads(out.features, (feats, layer.weight)), grads(want, (feats, layer.weight))
    )
    for got, exp in close_grads:
        close(got, exp)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize(
    "ksize,stride,padding,dilation", [(3, 2, 1, 1), (3, 1, 0, 2), (2, 2, 0, 1)]
)
def test_strided_conv_matches_dense(device, nd, ksize, stride, padding, dilation):
    feats, sites, shape, batch = make_input(nd, device=device)
    layer = randomize(CONV[nd](3, 5, ksize, stride, padding, dilation, indice_key="a"))
    layer = layer.to(device)
    out = layer(SparseConvTensor(feats, sites, shape, batch))
    args = [[v] * nd for v in (stride, padding, dilation)]
    want_sites, want = ref.conv_reference(feats, sites, shape, batch, layer.weight, *args)
    assert out.indices.dtype == torch.int32
    assert torch.equal(out.indices, want_sites)  # sorted by (batch, coordinates)
    assert out.spatial_shape == sparse_ops.get_conv_output_size(shape, *[[ksize] * nd] + args)
    want = want + layer.bias
    close(out.features, want)
    for got, exp in zip(
        grads(out.features, (feats, layer.weight)), grads(want, (feats, layer.weight))
    ):
        close(got, exp)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize("ksize,stride,padding", [(3, 2, 1), (2, 2, 0), (3, 1, 1)])
def test_transposed_conv_matches_dense(device, nd, ksize, stride, padding):
    feats, sites, shape, batch = make_input(nd, device=device)
    layer = randomize(TRANS[nd](3, 4, ksize, stride, padding, bias=False)).to(device)
    out = layer(SparseConvTensor(feats, sites, shape, batch))
    out_shape = [(s - 1) * stride - 2 * padding + ksize for s in shape]
    assert out.spatial_shape == out_shape
    want_sites, want = ref.transposed_reference(
        feats, sites, shape, batch, layer.weight, [stride] * nd, [padding] * nd, out_shape
    )
    assert torch.equal(out.indices, want_sites)
    close(out.features, want)
    for got, exp in zip(
        grads(out.features, (feats, layer.weight)), grads(want, (feats, layer.weight))
    ):
        close(got, exp)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nd", [2, 3])
def test_inverse_conv_goes_back_to_the_input_sites(device, nd):
    feats, sites, shape, batch = make_input(nd, device=device)
    down = randomize(CONV[nd](3, 4, 3, 2, 1, indice_key="down"), 5).to(device)
    up = randomize(INV[nd](4, 2, 3, indice_key="down"), 6).to(device)
    mid = down(SparseConvTensor(feats, sites, shape, batch))
    out = up(mid)
    assert out.indices is sites and out.spatial_shape == shape
    want = (
        ref.inverse_reference(
            mid.features,
            mid.indices,
            mid.spatial_shape,
            sites,
            shape,
            batch,
            up.weight,
            [2] * nd,
            [1] * nd,
        )
        + up.bias
    )
    close(out.features, want)
    inputs = (mid.features, up.weight)
    for got, exp in zip(grads(out.features, inputs), grads(want, inputs)):
        close(got, exp)


@pytest.mark.parametrize("kind", ["subm", "conv", "transposed", "inverse"])
def test_gradcheck_float64(kind):
    feats, sites, shape, batch = make_input(3, n=8, channels=2, dtype=torch.float64)
    x = SparseConvTensor(feats, sites, shape, batch)
    if kind == "inverse":
        x = SparseConv3d(2, 2, 3, 2, 1, indice_key="k").double()(x)
        feats = torch.randn_like(x.features).requires_grad_()
        layer = SparseInverseConv3d(2, 3, 3, indice_key="k").double()
    else:
        cls = {"subm": SubMConv3d, "conv": SparseConv3d, "transposed": SparseConvTranspose3d}[kind]
        layer = cls(2, 3, 3, 2, 1).double()

    def fn(f, w):
        t = SparseConvTensor(f, x.indices, x.spatial_shape, batch)
        t.indice_dict = x.indice_dict
        return torch.func.functional_call(layer, {"weight": w}, (t,)).features

    w = torch.randn(layer.weight.shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (feats, w), fast_mode=True)


def test_rulebooks_are_cached_by_indice_key_and_reused(monkeypatch):
    calls = []
    real = sparse_ops.get_indice_pairs
    monkeypatch.setattr(
        sparse_ops, "get_indice_pairs", lambda *a, **k: calls.append(a) or real(*a, **k)
    )
    feats, sites, shape, batch = make_input(3)
    net = SparseSequential(
        SubMConv3d(3, 4, 3, indice_key="s1"),
        SubMConv3d(4, 4, 3, indice_key="s1"),
        SparseConv3d(4, 4, 3, 2, 1, indice_key="d1"),
        SubMConv3d(4, 4, 3, indice_key="s2"),
        SparseInverseConv3d(4, 3, 3, indice_key="d1"),
        SubMConv3d(3, 3, 3, indice_key="s1"),
    )
    x = SparseConvTensor(feats, sites, shape, batch)
    out = net(x)
    assert len(calls) == 3  # s1, d1, s2: the repeats and the inverse reuse the pairs
    assert set(x.indice_dict) == {"s1", "d1", "s2"} and out.indice_dict is x.indice_dict
    outids, indices, pairs, counts, spatial = x.indice_dict["s1"]
    assert outids is sites and indices is sites and spatial == shape
    assert pairs.shape == (27, 2, sites.shape[0]) and counts.dtype == torch.int32
    assert out.indices is sites
    # the second SubM layer with the key gives what fresh pairs give
    second = net[1]
    again = second(
        SparseConvTensor(
            net[0](SparseConvTensor(feats, sites, shape, batch)).features, sites, shape, batch
        )
    )
    first_two = SparseSequential(net[0], net[1])(SparseConvTensor(feats, sites, shape, batch))
    close(again.features, first_two.features)


@pytest.mark.parametrize("kind", ["subm", "conv", "transposed", "inverse", "1x1"])
def test_an_empty_voxel_set_gives_no_rows(kind):
    feats = torch.zeros(0, 3, requires_grad=True)
    sites = torch.zeros(0, 4, dtype=torch.int32)
    x = SparseConvTensor(feats, sites, [5, 6, 7], 2)
    if kind == "inverse":
        x = SparseConv3d(3, 3, 3, 2, 1, indice_key="e")(x)
        layer = SparseInverseConv3d(3, 4, 3, indice_key="e")
    elif kind == "1x1":
        layer = SparseConv3d(3, 4, 1)
    else:
        cls = {"subm": SubMConv3d, "conv": SparseConv3d, "transposed": SparseConvTranspose3d}[kind]
        layer = cls(3, 4, 3, 2, 1)
    out = layer(x)
    assert out.features.shape == (0, 4) and out.indices.shape == (0, 4)
    out.features.sum().backward()
    assert torch.equal(layer.weight.grad, torch.zeros_like(layer.weight))
    assert out.dense().shape[:2] == (2, 4)


def test_duplicate_sites_sum_in_a_strided_conv():
    feats, sites, shape, batch = make_input(3, n=20)
    dup = torch.cat([sites, sites[:5]])
    fd = torch.cat([feats, feats[:5] * 2]).detach().requires_grad_()
    layer = randomize(SparseConv3d(3, 4, 3, 2, 1, bias=False))
    out = layer(SparseConvTensor(fd, dup, shape, batch))
    want_sites, want = ref.conv_reference(
        fd, dup, shape, batch, layer.weight, [2] * 3, [1] * 3, [1] * 3
    )
    assert torch.equal(out.indices, want_sites)
    close(out.features, want)


def test_duplicate_sites_in_subm_follow_mmcv_grid():
    # mmcv's grid keeps the last row of a site: that row receives the neighbours; every
    # row gets its own centre term and sends to its neighbours' last rows.
    sites = torch.tensor([[0, 1, 1], [0, 1, 2], [0, 1, 1], [0, 2, 2]], dtype=torch.int32)
    feats = torch.randn(4, 2)
    layer = randomize(SubMConv2d(2, 3, 3, bias=False))
    out = layer(SparseConvTensor(feats, sites, [4, 4], 1)).features
    w = layer.weight
    last = {(0, 1, 1): 2, (0, 1, 2): 1, (0, 2, 2): 3}
    want = torch.stack([feats[r] @ w[1, 1] for r in range(4)])
    for j, (b, y, x) in enumerate(sites.tolist()):
        for ky in range(3):
            for kx in range(3):
                if (ky, kx) == (1, 1):
                    continue
                o = (b, y + 1 - ky, x + 1 - kx)  # x = o - 1 + k
                if o in last:
                    want[last[o]] = want[last[o]] + feats[j] @ w[ky, kx]
    close(out, want)


def test_conv1x1_is_a_matmul_on_the_same_sites():
    feats, sites, shape, batch = make_input(3)
    layer = randomize(SparseConv3d(3, 4, 1, stride=2))
    x = SparseConvTensor(feats, sites, shape, batch)
    out = layer(x)
    assert out.indices is sites and out.spatial_shape == shape and out.indice_dict is x.indice_dict
    close(out.features, feats @ layer.weight.view(3, 4) + layer.bias)


def test_weight_layout_and_init_are_mmcv():
    layer = SparseConv3d(4, 16, (3, 1, 2))
    assert layer.weight.shape == (3, 1, 2, 4, 16) and layer.bias.shape == (16,)
    assert list(layer.state_dict()) == ["weight", "bias"]
    assert layer.kernel_size == [3, 1, 2] and layer.stride == [1, 1, 1] and not layer.conv1x1
    assert layer.bias.abs().max() <= 1 / (4 * 6) ** 0.5
    assert SubMConv3d(2, 2, 3, bias=False).bias is None
    assert SparseInverseConv3d(2, 2, 3, indice_key="k").inverse


@pytest.mark.parametrize(
    "make,error,match",
    [
        (lambda: SubMConv3d(2, 2, 3, groups=2), ArgumentError, "groups must be 1"),
        (lambda: SparseConv3d(2, 2, 3, stride=2, dilation=2), ArgumentError, "stride and dilation"),
        (lambda: SparseConv3d(2, 2, 0), ValueError, "kernel_size must be >= 1"),
        (lambda: SparseConv3d(2, 2, (3, 3)), ValueError, "kernel_size must have 3"),
        (lambda: SparseConv3d(0, 2, 3), ValueError, "in_channels"),
        (lambda: SparseConvolution(3, 2, 2, fused_bn=True, bias=False), ArgumentError, "fused_bn"),
    ],
)
def test_bad_layer_arguments(make, error, match):
    with pytest.raises(error, match="mmcv.ops.Sparse|mmcv.ops.SubM"):
        make()
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize(
    "col,value,match",
    [
        (0, 2, r"indices\[:, 0\] \(batch index\) must be in \[0, batch_size=2\), found 2"),
        (
            2,
            9,
            r"indices\[:, 2\] \(coordinate in spatial_shape\[1\]\) must be in \[0, 9\), found 9",
        ),
        (3, -1, r"indices\[:, 3\] .* found -1"),
    ],
)
def test_indices_outside_the_grid_or_batch_are_value_errors(col, value, match):
    feats, sites, shape, batch = make_input(3)
    sites = sites.clone()
    sites[3, col] = value
    with pytest.raises(ValueError, match="mmcv.ops.get_indice_pairs: " + match):
        SubMConv3d(3, 4, 3)(SparseConvTensor(feats, sites, shape, batch))


def test_bad_inputs_at_forward():
    feats, sites, shape, batch = make_input(3)
    x = SparseConvTensor(feats, sites, shape, batch)
    with pytest.raises(TypeError, match="mmcv.ops.SubMConv3d: input must be a SparseConvTensor"):
        SubMConv3d(3, 4, 3)(feats)
    with pytest.raises(ValueError, match=r"input.features must be \(N, in_channels=5\)"):
        SubMConv3d(5, 4, 3)(x)
    with pytest.raises(ValueError, match="indice_key='nope' names no rulebook"):
        SparseInverseConv3d(3, 4, 3, indice_key="nope")(x)
    SparseConv3d(3, 4, 3, 2, 1, indice_key="d")(x)
    with pytest.raises(ValueError, match="kernel_size .* volume"):
        SparseInverseConv3d(3, 4, 2, indice_key="d")(x)
    with pytest.raises(TypeError, match="features and filters must have one dtype"):
        SubMConv3d(3, 4, 3).double()(x)
    with pytest.raises(ValueError, match="spatial_shape must have 2 dims"):
        SubMConv2d(3, 4, 3)(x)


def test_fused_bn_equals_conv_then_batch_norm():
    feats, sites, shape, batch = make_input(3)
    bn = torch.nn.BatchNorm1d(4).eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 2)
        bn.bias.uniform_(-1, 1)
    for conv in (SubMConv3d(3, 4, 3, bias=False), SparseConv3d(3, 4, 3, 2, 1)):
        seq = SparseSequential(randomize(conv), bn)
        fused = seq.fused()
        assert len(fused) == 1 and fused[0].fused_bn
        want = conv(SparseConvTensor(feats, sites, shape, batch)).features
        scale = bn.weight / (bn.running_var.sqrt() + bn.eps)  # mmcv's formula
        bias_free = want - (conv.bias if conv.bias is not None else 0)
        got = fused(SparseConvTensor(feats, sites, shape, batch)).features
        close(got, (bias_free - bn.running_mean) * scale + bn.bias)


def copy_to_spconv(ours, theirs, seed):
    randomize(ours, seed)
    with torch.no_grad():
        theirs.weight.copy_(ours.weight.permute(4, 0, 1, 2, 3))  # spconv 2: (C_out, *k, C_in)
        theirs.bias.copy_(ours.bias)


def test_same_forward_as_spconv():
    sp = pytest.importorskip("spconv.pytorch")
    feats, sites, shape, batch = make_input(3, n=200)
    feats = feats.detach()
    layers = [
        (SubMConv3d(3, 4, 3, indice_key="s"), sp.SubMConv3d(3, 4, 3, padding=1, indice_key="s")),
        (
            SparseConv3d(4, 5, 3, 2, 1, indice_key="d"),
            sp.SparseConv3d(4, 5, 3, 2, 1, indice_key="d"),
        ),
        (
            SubMConv3d(5, 5, (3, 1, 3), indice_key="t"),
            sp.SubMConv3d(5, 5, (3, 1, 3), indice_key="t"),
        ),
        (
            SparseInverseConv3d(5, 2, 3, indice_key="d"),
            sp.SparseInverseConv3d(5, 2, 3, indice_key="d"),
        ),
    ]
    x, y = (
        SparseConvTensor(feats, sites, shape, batch),
        sp.SparseConvTensor(feats, sites, shape, batch),
    )
    with torch.no_grad():
        for i, (ours, theirs) in enumerate(layers):
            copy_to_spconv(ours, theirs, 10 + i)
            x, y = ours(x), theirs(y)
            assert x.spatial_shape == list(y.spatial_shape)
            close(x.dense(), y.dense())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_features_and_autocast(dtype):
    feats, sites, shape, batch = make_input(3)
    layer = randomize(SubMConv3d(3, 4, 3))
    want = layer(SparseConvTensor(feats, sites, shape, batch)).features
    half = layer.to(dtype)(SparseConvTensor(feats.to(dtype), sites, shape, batch)).features
    assert half.dtype == dtype
    close(half.float(), want, tol=0.1)
    layer.float()
    with torch.autocast("cpu", dtype=dtype):
        auto = layer(SparseConvTensor(feats.to(dtype), sites, shape, batch)).features
    assert auto.dtype == dtype
    close(auto.float(), want, tol=0.1)
