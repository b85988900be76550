"""mmpar.compat.ops.sync_bn: batch norm's definition, alone and over a 2-process gloo group."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mmpar.compat.ops.sync_bn import SyncBatchNorm, SyncBatchNormFunction
from tests._dist_helpers import run_workers
from tests.compat.ops._reference import DEVICES

EPS = 1e-5


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 3, 2, 3, generator=g, dtype=torch.float64) * 2 + 1
    upstream = torch.randn(4, 3, 2, 3, generator=g, dtype=torch.float64)
    weight = torch.rand(3, generator=g, dtype=torch.float64) + 0.5
    bias = torch.randn(3, generator=g, dtype=torch.float64)
    return x, upstream, weight, bias


def _reference(x, upstream, weight, bias):
    """One F.batch_norm over ``x``: output, input / weight / bias gradients, running stats."""
    x = x.clone().requires_grad_()
    w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
    rm, rv = torch.zeros(3, dtype=x.dtype), torch.ones(3, dtype=x.dtype)
    out = F.batch_norm(x, rm, rv, w, b, True, 0.1, EPS)
    (out * upstream).sum().backward()
    return dict(out=out.detach(), grad=x.grad, gw=w.grad, gb=b.grad, rm=rm, rv=rv)


def _module(weight, bias, **kwargs):
    bn = SyncBatchNorm(3, **kwargs).double()
    with torch.no_grad():
        bn.weight.copy_(weight)
        bn.bias.copy_(bias)
    return bn


# ------------------------------------------------------------------------------ one process


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("stats_mode", ["default", "N"])
def test_single_process_is_batch_norm(device, stats_mode):
    x, upstream, weight, bias = _data()
    ref = _reference(x, upstream, weight, bias)
    bn = _module(weight, bias, stats_mode=stats_mode).to(device)
    assert bn.group_size == 1
    inp = x.to(device).requires_grad_()
    out = bn(inp)
    (out * upstream.to(device)).sum().backward()
    for key, got in [
        ("out", out.detach()),
        ("grad", inp.grad),
        ("gw", bn.weight.grad),
        ("gb", bn.bias.grad),
        ("rm", bn.running_mean),
        ("rv", bn.running_var),
    ]:
        torch.testing.assert_close(got.cpu(), ref[key], msg=key)
    assert bn.num_batches_tracked.item() == 1
    bn.eval()  # the running statistics
    expected = (x - ref["rm"].view(1, 3, 1, 1)) / torch.sqrt(ref["rv"].view(1, 3, 1, 1) + EPS)
    expected = expected * weight.view(1, 3, 1, 1) + bias.view(1, 3, 1, 1)
    torch.testing.assert_close(bn(x.to(device)).cpu(), expected)


def test_gradcheck_and_function_name():
    x, _, weight, bias = _data()
    x = x[:2, :, :1].clone().requires_grad_()
    w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda v, ww, bb: SyncBatchNormFunction.apply(
            v, None, None, ww, bb, 0.1, EPS, None, 1, "default"
        ),
        (x, w, b),
    )


def test_momentum_none_is_a_cumulative_average_and_no_running_stats():
    x, _, weight, bias = _data()
    bn = _module(weight, bias, momentum=None)
    bn(x[:2])
    bn(x[2:])
    means = torch.stack([x[:2].mean((0, 2, 3)), x[2:].mean((0, 2, 3))])
    torch.testing.assert_close(bn.running_mean, means.mean(0))
    free = _module(weight, bias, track_running_stats=False)
    assert free.running_mean is None and free.num_batches_tracked is None
    free.eval()  # batch statistics in eval mode too
    torch.testing.assert_close(free(x), _reference(x, x, weight, bias)["out"])


def test_tiny_empty_and_half_batches():
    _, _, weight, bias = _data()
    bn = _module(weight, bias)
    one = torch.full((1, 3), 7.0, dtype=torch.float64)  # one value per channel: var 0
    torch.testing.assert_close(bn(one), bias.view(1, 3))
    torch.testing.assert_close(bn.running_var, torch.full((3,), 0.9, dtype=torch.float64))
    bn.reset_running_stats()
    empty = bn(torch.zeros(0, 3, 4, dtype=torch.float64))
    assert empty.shape == (0, 3, 4)
    assert torch.count_nonzero(bn.running_mean) == 0  # no update from an empty batch
    torch.testing.assert_close(bn.running_var, torch.ones(3, dtype=torch.float64))
    assert bn.num_batches_tracked.item() == 1  # counted from the reset
    x = torch.randn(4, 3, 5, 5)
    for dtype in (torch.float16, torch.bfloat16):
        half = SyncBatchNorm(3)
        out = half(x.to(dtype))
        assert out.dtype == dtype
        full = SyncBatchNorm(3)
        full.weight.data.copy_(half.weight.data)
        torch.testing.assert_close(out.float(), full(x.to(dtype).float()), rtol=2e-2, atol=2e-2)


def test_parameters_buffers_and_repr():
    torch.manual_seed(0)
    bn = SyncBatchNorm(4)
    assert list(bn.state_dict()) == [
        "weight",
        "bias",
        "running_mean",
        "running_var",
        "num_batches_tracked",
    ]
    assert bn.weight.min() >= 0 and bn.weight.max() < 1 and bn.weight.std() > 0  # mmcv: uniform
    assert torch.count_nonzero(bn.bias) == 0
    bn.load_state_dict(torch.nn.BatchNorm2d(4).state_dict())  # BatchNorm's names
    assert repr(bn) == (
        "SyncBatchNorm(4, eps=1e-05, momentum=0.1, affine=True, "
        "track_running_stats=True, group_size=1,stats_mode=default)"
    )
    plain = SyncBatchNorm(2, affine=False, stats_mode="N")
    assert plain.weight is None and plain.bias is None
    assert plain(torch.randn(3, 2)).shape == (3, 2)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"stats_mode must be one of \('default', 'N'\), got 'n'"):
        SyncBatchNorm(3, stats_mode="n")
    bn = SyncBatchNorm(3)
    with pytest.raises(ValueError, match="expected at least 2D input, got 1D input"):
        bn(torch.zeros(3))
    with pytest.raises(ValueError, match="num_features = 3 channels"):
        bn(torch.zeros(2, 4))


# ------------------------------------------------------------------------------ two processes

# (name, stats_mode, samples per rank, dtype)
SCENARIOS = [
    ("default", "default", (2, 2), torch.float64),
    ("N unequal", "N", (3, 1), torch.float64),
    ("N one empty", "N", (3, 0), torch.float64),
    ("default one empty", "default", (3, 0), torch.float64),
    ("all empty", "N", (0, 0), torch.float64),
    ("half", "default", (2, 2), torch.float16),
]


def _sync_worker(rank, world_size):
    x_full, upstream, weight, bias = _data()
    results = {}
    for name, mode, counts, dtype in SCENARIOS:
        start = sum(counts[:rank])
        rows = slice(start, start + counts[rank])
        bn = _module(weight, bias, stats_mode=mode)
        x = x_full[rows].to(dtype).requires_grad_()
        out = bn(x)
        (out.double() * upstream[rows]).sum().backward()
        results[name] = dict(
            out=out.detach().double(),
            grad=x.grad.double(),
            gw=bn.weight.grad,
            gb=bn.bias.grad,
            rm=bn.running_mean.clone(),
            rv=bn.running_var.clone(),
            nbt=int(bn.num_batches_tracked),
            group_size=bn.group_size,
        )
        bn.eval()  # the running statistics, without collectives
        results[name]["eval"] = bn(x_full[rows]).detach()
    return results


def _unbiased_update(x, count):
    var = x.var(dim=(0, 2, 3), unbiased=False)
    return 0.9 + 0.1 * (var * count / (count - 1) if count > 1 else var)


@pytest.fixture(scope="module")
def two_ranks():
    return run_workers(_sync_worker, 2, timeout=60.0)


def test_two_ranks_equal_halves_are_one_batch_norm(two_ranks):
    x, upstream, weight, bias = _data()
    ref = _reference(x, upstream, weight, bias)
    r0, r1 = two_ranks[0]["default"], two_ranks[1]["default"]
    assert r0["group_size"] == r1["group_size"] == 2
    torch.testing.assert_close(torch.cat([r0["out"], r1["out"]]), ref["out"])
    torch.testing.assert_close(torch.cat([r0["grad"], r1["grad"]]), ref["grad"])
    for r in (r0, r1):
        # mmcv averages the parameter gradients over the group (DDP's average is then the same)
        torch.testing.assert_close(r["gw"], ref["gw"] / 2)
        torch.testing.assert_close(r["gb"], ref["gb"] / 2)
        torch.testing.assert_close(r["rm"], ref["rm"])
        torch.testing.assert_close(r["rv"], ref["rv"])
        assert r["nbt"] == 1
    half0, half1 = two_ranks[0]["half"], two_ranks[1]["half"]
    torch.testing.assert_close(torch.cat([half0["out"], half1["out"]]), ref["out"], **_HALF_TOL)
    torch.testing.assert_close(torch.cat([half0["grad"], half1["grad"]]), ref["grad"], **_HALF_TOL)


_HALF_TOL = dict(rtol=1e-2, atol=1e-2)


def test_two_ranks_stats_mode_n_weights_ranks_by_batch(two_ranks):
    x, upstream, weight, bias = _data()
    ref = _reference(x, upstream, weight, bias)
    r0, r1 = two_ranks[0]["N unequal"], two_ranks[1]["N unequal"]
    torch.testing.assert_close(torch.cat([r0["out"], r1["out"]]), ref["out"])
    # autograd's exact gradient (mmcv's kernel divides by the local count here)
    torch.testing.assert_close(torch.cat([r0["grad"], r1["grad"]]), ref["grad"])
    for r, n in ((r0, 3), (r1, 1)):
        torch.testing.assert_close(r["gw"], ref["gw"] / 2)
        torch.testing.assert_close(r["rm"], ref["rm"])
        # mmcv's unbiasing count: the local count times the group size
        torch.testing.assert_close(r["rv"], _unbiased_update(x, n * 6 * 2))


def test_two_ranks_with_an_empty_rank(two_ranks):
    x, upstream, weight, bias = _data()
    first = x[:3]
    # 'N': the empty rank does not count
    ref = _reference(first, upstream[:3], weight, bias)
    r0, r1 = two_ranks[0]["N one empty"], two_ranks[1]["N one empty"]
    torch.testing.assert_close(r0["out"], ref["out"])
    torch.testing.assert_close(r0["grad"], ref["grad"])
    assert r1["out"].shape == (0, 3, 2, 3)
    for r in (r0, r1):
        torch.testing.assert_close(r["gw"], ref["gw"] / 2)
        torch.testing.assert_close(r["rm"], ref["rm"])
    torch.testing.assert_close(r0["rv"], _unbiased_update(first, 3 * 6 * 2))
    torch.testing.assert_close(r1["rv"], _unbiased_update(first, 0))
    # 'default': the empty rank counts as mean 0, variance 0 (mmcv's documented behaviour)
    v = first.clone().requires_grad_()
    mean = v.mean(dim=(0, 2, 3), keepdim=True) / 2
    var = (v - mean).square().mean(dim=(0, 2, 3), keepdim=True) / 2
    out = (v - mean) / torch.sqrt(var + EPS) * weight.view(1, 3, 1, 1) + bias.view(1, 3, 1, 1)
    (out * upstream[:3]).sum().backward()
    d0 = two_ranks[0]["default one empty"]
    torch.testing.assert_close(d0["out"], out.detach())
    torch.testing.assert_close(d0["grad"], v.grad)
    torch.testing.assert_close(d0["rm"], 0.1 * mean.flatten())


def test_two_ranks_all_empty_and_eval(two_ranks):
    x, upstream, weight, bias = _data()
    for rank in (0, 1):
        r = two_ranks[rank]["all empty"]
        assert r["out"].shape == (0, 3, 2, 3) and r["nbt"] == 1
        torch.testing.assert_close(r["rm"], torch.zeros(3, dtype=torch.float64))
        torch.testing.assert_close(r["rv"], torch.ones(3, dtype=torch.float64))
        torch.testing.assert_close(r["gw"], torch.zeros(3, dtype=torch.float64))
    ref = _reference(x, upstream, weight, bias)
    expected = (x - ref["rm"].view(1, 3, 1, 1)) / torch.sqrt(ref["rv"].view(1, 3, 1, 1) + EPS)
    expected = expected * weight.view(1, 3, 1, 1) + bias.view(1, 3, 1, 1)
    got = torch.cat([two_ranks[0]["default"]["eval"], two_ranks[1]["default"]["eval"]])
    torch.testing.assert_close(got, expected)


def test_bad_dtype_and_num_features_name_the_op():
    with pytest.raises(TypeError, match="mmcv.ops.SyncBatchNorm: input must be a floating-point"):
        SyncBatchNorm(3)(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="SyncBatchNorm: num_features must be an int >= 1"):
        SyncBatchNorm(-1)
    with pytest.raises(TypeError, match="mmcv.ops.SyncBatchNorm: num_features must be an int"):
        SyncBatchNorm(3.0)
    with pytest.raises(ValueError, match="^mmcv.ops.SyncBatchNorm: expected at least 2D input"):
        SyncBatchNorm(3)(torch.zeros(3))
