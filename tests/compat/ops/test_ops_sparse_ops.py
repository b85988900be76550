"""mmpar.compat.ops.sparse_ops (and sparse_functional) against the rulebook's definition."""

from __future__ import annotations

import itertools

import pytest
import torch

from mmpar.compat.ops import sparse_functional as Fsp
from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.sparse_ops import (
    fused_indice_conv,
    get_conv_output_size,
    get_deconv_output_size,
    get_indice_pairs,
    indice_conv,
    indice_conv_backward,
    indice_maxpool,
    indice_maxpool_backward,
)
from tests.compat.ops import _sparse_reference as ref
from tests.compat.ops._reference import DEVICES


def naive_pairs(sites, shape, out_shape, ks, stride, pad, dil, subm, transpose):
    """{(offset, input row, output site)} from mmcv's definition, by loops."""
    if subm:
        stride, pad = [1] * len(ks), [k // 2 for k in ks]
    found = set()
    for j, (b, *x) in enumerate(sites.tolist()):
        for flat, k in enumerate(itertools.product(*[range(n) for n in ks])):
            if transpose:
                o = [xi * s - p + ki * d for xi, s, p, ki, d in zip(x, stride, pad, k, dil)]
            else:
                num = [xi + p - ki * d for xi, p, ki, d in zip(x, pad, k, dil)]
                if any(v % s for v, s in zip(num, stride)):
                    continue
                o = [v // s for v, s in zip(num, stride)]
            if all(0 <= v < n for v, n in zip(o, out_shape)):
                found.add((flat, j, (b, *o)))
    if subm:
        present = {tuple(s) for s in sites.tolist()}
        found = {p for p in found if p[2] in present}
    return found


def layout_pairs(outids, pairs, counts):
    sites = [tuple(s) for s in outids.tolist()]
    got = set()
    for k, n in enumerate(counts.tolist()):
        assert (pairs[k, :, n:] == -1).all()
        for i, o in zip(pairs[k, 0, :n].tolist(), pairs[k, 1, :n].tolist()):
            got.add((k, i, sites[o]))
    return got


CASES = [
    # ndim, ksize, stride, padding, dilation, subm, transpose
    (2, [3, 3], [1, 1], [0, 0], [1, 1], True, False),
    (3, [3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], True, False),
    (3, [3, 1, 3], [1, 1, 1], [0, 0, 0], [2, 1, 2], True, False),
    (3, [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False, False),
    (3, [3, 1, 1], [2, 1, 1], [0, 0, 0], [1, 1, 1], False, False),
    (2, [3, 3], [1, 1], [1, 1], [2, 2], False, False),
    (2, [3, 2], [2, 2], [1, 0], [1, 1], False, True),
    (3, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False, True),
    (4, [3, 3, 3, 3], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1], True, False),
    (4, [3, 1, 3, 2], [2, 1, 2, 2], [1, 0, 1, 0], [1, 1, 1, 1], False, False),
]


@pytest.mark.parametrize("nd,ks,stride,pad,dil,subm,transpose", CASES)
def test_get_indice_pairs_is_the_definition_in_mmcv_layout(
    nd, ks, stride, pad, dil, subm, transpose
):
    shape = [7, 6, 5, 4][:nd]
    sites = ref.random_sites(30, shape, 2, seed=4)
    outids, pairs, counts = get_indice_pairs(
        sites, 2, shape, ks, stride, pad, dil, 0, subm, transpose
    )
    if subm:
        out_shape = shape
        assert outids is sites
    elif transpose:
        out_shape = get_deconv_output_size(shape, ks, stride, pad, dil, [0] * nd)
    else:
        out_shape = get_conv_output_size(shape, ks, stride, pad, dil)
    k = 1
    for n in ks:
        k *= n
    assert pairs.shape == (k, 2, sites.shape[0]) and pairs.dtype == torch.int32
    assert counts.shape == (k,) and counts.dtype == torch.int32
    assert outids.dtype == torch.int32 and outids.shape[1] == nd + 1
    rows = outids.tolist()
    assert rows == sorted(rows) or subm  # sorted, distinct output sites
    assert len({tuple(r) for r in rows}) == len(rows)
    want = naive_pairs(sites, shape, out_shape, ks, stride, pad, dil, subm, transpose)
    assert layout_pairs(outids, pairs, counts) == want
    if not subm:  # every output site is reached
        assert {p[2] for p in want} == {tuple(r) for r in rows}


def test_output_sizes_are_mmcvs_formulas():
    assert get_conv_output_size([41, 1600, 1408], [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1]) == [
        21,
        800,
        704,
    ]
    assert get_conv_output_size([5, 5], [-1, 3], [1, 1], [0, 0], [1, 1]) == [1, 3]
    assert get_deconv_output_size([4, 4], [3, 2], [2, 2], [1, 0], [1, 1], [1, 0]) == [8, 8]
    with pytest.raises(ValueError, match="deconv don't support kernel_size < 0"):
        get_deconv_output_size([4], [-1], [1], [0], [1], [0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("subm,inverse", [(True, False), (False, False), (False, True)])
def test_the_kernels_read_pairs_given_as_layout(device, subm, inverse):
    # pairs copied lose the compact rulebook: the layout itself is read
    sites = ref.random_sites(40, [6, 7, 8], 2, seed=5, device=device)
    outids, pairs, counts = get_indice_pairs(sites, 2, [6, 7, 8], 3, 2, 1, 1, 0, subm)
    copied, copied_n = pairs.clone(), counts.clone()
    n_in, n_out = sites.shape[0], outids.shape[0]
    if inverse:
        n_in, n_out = n_out, n_in
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n_in, 3, generator=gen).to(device)
    w = torch.randn(3, 3, 3, 3, 4, generator=gen).to(device)
    bias = torch.randn(4, generator=gen).to(device)
    grad = torch.randn(n_out, 4, generator=gen).to(device)
    a = indice_conv(x, w, pairs, counts, n_out, inverse, subm)
    b = indice_conv(x, w, copied, copied_n, n_out, inverse, subm)
    ref.assert_close(a, b)
    ref.assert_close(
        fused_indice_conv(x, w, bias, copied, copied_n, n_out, inverse, subm), a + bias
    )
    ga, gb = (
        indice_conv_backward(x, w, grad, pairs, counts, inverse, subm),
        indice_conv_backward(x, w, grad, copied, copied_n, inverse, subm),
    )
    for p, q in zip(ga, gb):
        ref.assert_close(p, q)
    # and the functional form's autograd gives the same gradients
    fn = Fsp.indice_subm_conv if subm else (Fsp.indice_inverse_conv if inverse else Fsp.indice_conv)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ref.assert_close(fn(xr, wr, pairs, counts, n_out), a)
    gx, gw = torch.autograd.grad((fn(xr, wr, pairs, counts, n_out) * grad).sum(), (xr, wr))
    ref.assert_close(gx, ga[0])
    ref.assert_close(gw, ga[1])
    assert ga[1].shape == w.shape


def test_maxpool_kernels_from_layout():
    sites = ref.random_sites(40, [6, 7], 1, seed=6)
    outids, pairs, counts = get_indice_pairs(sites, 1, [6, 7], 2, 2, 0, 1, 0)
    x = torch.randn(sites.shape[0], 3)
    out = indice_maxpool(x, pairs.clone(), counts.clone(), outids.shape[0])
    ref.assert_close(out, indice_maxpool(x, pairs, counts, outids.shape[0]))
    grad = torch.randn_like(out)
    g = indice_maxpool_backward(x, out, grad, pairs.clone(), counts.clone())
    want = torch.zeros_like(x)
    for k, n in enumerate(counts.tolist()):
        for i, o in zip(pairs[k, 0, :n].tolist(), pairs[k, 1, :n].tolist()):
            want[i] += grad[o] * (x[i] == out[o])
    ref.assert_close(g, want)


def test_bad_pairs_and_arguments():
    sites = ref.random_sites(20, [5, 5], 1)
    outids, pairs, counts = get_indice_pairs(sites, 1, [5, 5], 3, 1, 1, 1, 0, True)
    x, w = torch.randn(sites.shape[0], 2), torch.randn(3, 3, 2, 3)
    with pytest.raises(ValueError, match=r"mmcv.ops.indice_conv: filters have 4 kernel offsets"):
        indice_conv(x, torch.randn(2, 2, 2, 3), pairs, counts, outids.shape[0])
    with pytest.raises(ValueError, match=r"features \(N, C_in\) must match filters"):
        indice_conv(torch.randn(sites.shape[0], 5), w, pairs, counts, outids.shape[0])
    with pytest.raises(TypeError, match="features and filters must have one dtype"):
        indice_conv(x.double(), w, pairs, counts, outids.shape[0])
    with pytest.raises(TypeError, match="features must be a floating-point tensor"):
        indice_conv(x.long(), w, pairs, counts, outids.shape[0])
    bad = pairs.clone()
    bad[0, 1, 0] = 10**6
    with pytest.raises(ValueError, match=r"indice_pairs has output rows outside \[0, "):
        indice_conv(x, w, bad, counts.clone(), outids.shape[0], subm=True)
    with pytest.raises(ValueError, match="indice_pair_num must be in"):
        indice_conv(x, w, pairs.clone(), counts.clone() + 1000, outids.shape[0])
    with pytest.raises(ValueError, match="the pairs join"):
        indice_conv(x[:3], w, pairs, counts, outids.shape[0])
    with pytest.raises(ValueError, match="num_activate_out must be >= 0"):
        indice_conv(x, w, pairs.clone(), counts.clone(), -1)
    with pytest.raises(ArgumentError, match="stride and dilation cannot both differ"):
        get_indice_pairs(sites, 1, [5, 5], 3, 2, 1, 2)
    with pytest.raises(ValueError, match=r"get_indice_pairs: ksize must have 2 elements"):
        get_indice_pairs(sites, 1, [5, 5], [3, 3, 3])
    with pytest.raises(TypeError, match="indices must be an integer tensor"):
        get_indice_pairs(sites.float(), 1, [5, 5])
    with pytest.raises(ValueError, match=r"indices must have shape \(N, 3\)"):
        get_indice_pairs(sites[:, :2], 1, [5, 5])


def test_empty_sites():
    sites = torch.zeros(0, 4, dtype=torch.int32)
    outids, pairs, counts = get_indice_pairs(sites, 1, [4, 4, 4], 3, 2, 1)
    assert outids.shape == (0, 4) and pairs.shape == (27, 2, 0) and counts.sum() == 0
    out = indice_conv(torch.zeros(0, 2), torch.zeros(3, 3, 3, 2, 5), pairs, counts, 0)
    assert out.shape == (0, 5)


def test_dilated_subm_from_a_bare_layout_is_computed_from_its_pairs():
    # no offset of a dilated SubM kernel is the identity: mmcv's fullest-offset matmul
    # would be wrong, mmpar reads every offset's pairs
    sites = ref.random_sites(60, [6, 7, 8], 1, seed=8)
    outids, pairs, counts = get_indice_pairs(sites, 1, [6, 7, 8], 3, 1, 0, 2, 0, True)
    x, w = torch.randn(sites.shape[0], 2), torch.randn(3, 3, 3, 2, 3)
    want = ref.subm_reference(x, sites, [6, 7, 8], 1, w, [2, 2, 2])
    for p, c in ((pairs, counts), (pairs.clone(), counts.clone())):
        ref.assert_close(indice_conv(x, w, p, c, sites.shape[0], subm=True), want)
