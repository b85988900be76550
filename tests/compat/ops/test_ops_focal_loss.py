"""mmpar.compat.ops.focal_loss against the formulas of mmcv-full's focal-loss kernels."""

from __future__ import annotations

import math

import pytest
import torch

from mmpar.compat.ops.focal_loss import (
    SigmoidFocalLoss,
    SigmoidFocalLossFunction,
    SoftmaxFocalLoss,
    SoftmaxFocalLossFunction,
    sigmoid_focal_loss,
    softmax_focal_loss,
)
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

# ----------------------------------------------------------------- references (kernel formulas)


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


# mmcv's kernels clamp log(p) at log(FLT_MIN).
FLT_MIN = 1.1754943508222875e-38


def _log(p: float, clamp: bool) -> float:
    return math.log(max(p, FLT_MIN)) if clamp and not math.isnan(p) else math.log(p)


def ref_sigmoid(x, target, gamma, alpha, weight=None, clamp=False):
    """Element loss and closed-form gradient (mmcv's forward / backward kernels), as lists;
    ``clamp``: their log(max(p, FLT_MIN))."""
    n_rows, n_cls = x.shape
    loss = [[0.0] * n_cls for _ in range(n_rows)]
    grad = [[0.0] * n_cls for _ in range(n_rows)]
    for n in range(n_rows):
        t = int(target[n])
        for c in range(n_cls):
            p = _sigmoid(float(x[n, c]))
            if t == c:
                value = -alpha * (1 - p) ** gamma * _log(p, clamp)
                slope = -alpha * (1 - p) ** gamma * (1 - p - gamma * p * _log(p, clamp))
            else:
                value = -(1 - alpha) * p**gamma * _log(1 - p, clamp)
                slope = -(1 - alpha) * p**gamma * (gamma * (1 - p) * _log(1 - p, clamp) - p)
            w = float(weight[t]) if weight is not None else 1.0
            loss[n][c], grad[n][c] = value * w, slope * w
    return torch.tensor(loss, dtype=torch.float64), torch.tensor(grad, dtype=torch.float64)


def ref_softmax(x, target, gamma, alpha, weight=None, clamp=False):
    """Row loss and closed-form gradient (mmcv's forward / two backward kernels)."""
    n_rows, n_cls = x.shape
    loss = [0.0] * n_rows
    grad = [[0.0] * n_cls for _ in range(n_rows)]
    for n in range(n_rows):
        t = int(target[n])
        if t < 0:
            continue
        row = [float(v) for v in x[n]]
        top = max(row)
        exps = [math.exp(v - top) for v in row]
        soft = [e / sum(exps) for e in exps]
        p = soft[t]
        w = float(weight[t]) if weight is not None else 1.0
        log_p = _log(p, clamp)
        loss[n] = -alpha * (1 - p) ** gamma * log_p * w
        buff = alpha * (-((1 - p) ** gamma) + gamma * (1 - p) ** (gamma - 1) * p * log_p)
        for c in range(n_cls):
            grad[n][c] = buff * w * ((1.0 if c == t else 0.0) - soft[c])
    return torch.tensor(loss, dtype=torch.float64), torch.tensor(grad, dtype=torch.float64)


def _inputs(n=6, c=4, seed=0, device="cpu", dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, c, generator=g, dtype=torch.float64) * 2).to(device, dtype)
    return x


def _check_none_reduction(loss_fn, ref_fn, targets, gamma, alpha, device):
    """``loss_fn`` with ``reduction='none'`` on ``_inputs()`` against ``ref_fn``: the
    losses, and the gradient of their sum.

    Returns:
        The losses.
    """
    x = _inputs(device=device).requires_grad_()
    target = torch.tensor(targets, device=device)
    loss = loss_fn(x, target, gamma, alpha, None, "none")
    ref_loss, ref_grad = ref_fn(x.detach().cpu(), target.cpu(), gamma, alpha)
    torch.testing.assert_close(loss.detach().cpu(), ref_loss)
    loss.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), ref_grad)
    return loss


# ------------------------------------------------------------------------------ sigmoid


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gamma,alpha", [(2.0, 0.25), (0.0, 0.5), (0.5, 0.75), (1.5, 0.25)])
def test_sigmoid_matches_kernel_formulas(device, gamma, alpha):
    # class indices, the background index C, and another out-of-range value
    targets = [0, 3, 4, 1, -1, 2]
    loss = _check_none_reduction(sigmoid_focal_loss, ref_sigmoid, targets, gamma, alpha, device)
    assert loss.shape == (6, 4)


@pytest.mark.parametrize("device", DEVICES)
def test_sigmoid_weight_and_reductions(device):
    x = _inputs(device=device).requires_grad_()
    target = torch.tensor([0, 3, 3, 1, 2, 2], device=device)
    weight = torch.tensor([0.5, 2.0, 1.0, 3.0], device=device, dtype=torch.float64)
    ref_loss, ref_grad = ref_sigmoid(x.detach().cpu(), target.cpu(), 2.0, 0.25, weight.cpu())
    torch.testing.assert_close(
        sigmoid_focal_loss(x, target, 2.0, 0.25, weight, "none").detach().cpu(), ref_loss
    )
    total = sigmoid_focal_loss(x, target, 2.0, 0.25, weight, "sum")
    torch.testing.assert_close(total.detach().cpu(), ref_loss.sum())
    mean = sigmoid_focal_loss(x, target, 2.0, 0.25, weight, "mean")
    # mmcv's 'mean' divides by N, the rows, not by N * C
    torch.testing.assert_close(mean.detach().cpu(), ref_loss.sum() / 6)
    mean.backward()
    torch.testing.assert_close(x.grad.cpu(), ref_grad / 6)


def test_sigmoid_defaults_and_positional_call_of_mmdet():
    x, target = _inputs(), torch.tensor([0, 4, 1, 2, 3, 4])
    by_default = sigmoid_focal_loss(x, target)
    ref_loss, _ = ref_sigmoid(x, target, 2.0, 0.25)
    torch.testing.assert_close(by_default, ref_loss.sum() / 6)
    # mmdet: _sigmoid_focal_loss(pred.contiguous(), target.contiguous(), gamma, alpha, None, 'none')
    torch.testing.assert_close(
        SigmoidFocalLossFunction.apply(x, target, 2.0, 0.25, None, "none"), ref_loss
    )


def test_sigmoid_gradcheck():
    x = _inputs(n=3, c=3).requires_grad_()
    target = torch.tensor([0, 3, 2])
    weight = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    for gamma in (2.0, 0.5):
        assert torch.autograd.gradcheck(
            lambda v, g=gamma: sigmoid_focal_loss(v, target, g, 0.25, None, "none"), (x,)
        )
    assert torch.autograd.gradcheck(
        lambda v: sigmoid_focal_loss(v, torch.tensor([0, 1, 2]), 2.0, 0.25, weight, "mean"), (x,)
    )


def test_sigmoid_extreme_logits_are_exact_and_finite():
    x = torch.tensor([[-200.0, 40.0, 0.0], [200.0, -40.0, 30.0]], requires_grad=True)
    target = torch.tensor([0, 2])
    for gamma in (2.0, 0.5, 0.0):
        loss = sigmoid_focal_loss(x, target, gamma, 0.25, None, "none")
        # a positive at -200: -alpha * log(sigmoid(-200)) = alpha * 200 (mmcv clamps at 87.3)
        torch.testing.assert_close(loss[0, 0], torch.tensor(0.25 * 200.0))
        # a negative at 40: -(1 - alpha) * log(1 - sigmoid(40)) = 0.75 * 40
        torch.testing.assert_close(loss[0, 1], torch.tensor(0.75 * 40.0))
        (grad,) = torch.autograd.grad(loss.sum(), x)
        assert torch.isfinite(grad).all()
        # the kernel's closed form at saturation: -alpha for a positive, 1 - alpha for a negative
        torch.testing.assert_close(grad[0, 0], torch.tensor(-0.25))
        torch.testing.assert_close(grad[0, 1], torch.tensor(0.75))
        torch.testing.assert_close(grad[1, 2], torch.tensor(0.0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gamma", [2.0, 0.5, 0.0])
def test_sigmoid_infinite_logits_are_mmcvs_clamp(device, gamma):
    inf, nan = math.inf, math.nan
    x = torch.tensor([[-inf, inf, 1.0], [inf, -inf, nan]], dtype=torch.float64, device=device)
    x.requires_grad_()
    target = torch.tensor([0, 1], device=device)
    weight = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, device=device)
    loss = sigmoid_focal_loss(x, target, gamma, 0.25, weight, "none")
    ref_loss, ref_grad = ref_sigmoid(x.detach().cpu(), target, gamma, 0.25, weight, clamp=True)
    torch.testing.assert_close(loss.detach().cpu(), ref_loss, equal_nan=True)
    # finite: alpha * 87.3 (a positive at -inf) and (1 - alpha) * 87.3 (a negative at +inf)
    assert round(loss[0, 0].item(), 1) == 21.8 and round(loss[1, 0].item() / 2, 1) == 65.5
    (grad,) = torch.autograd.grad(loss.nansum(), x)
    torch.testing.assert_close(grad.cpu(), ref_grad, equal_nan=True)
    assert torch.isnan(grad[1, 2]) and torch.isfinite(grad.flatten()[:5]).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_sigmoid_half_precision(device, dtype):
    x32 = _inputs(n=8, c=5, device=device, dtype=torch.float32)
    target = torch.tensor([0, 5, 4, 1, 2, 3, 5, 0], device=device)
    x = x32.to(dtype).requires_grad_()
    loss = sigmoid_focal_loss(x, target, 2.0, 0.25, None, "none")
    assert loss.dtype == dtype
    ref = sigmoid_focal_loss(x.detach().float(), target, 2.0, 0.25, None, "none")
    torch.testing.assert_close(loss.float(), ref, rtol=2e-2, atol=2e-3)
    loss.sum().backward()
    assert x.grad.dtype == dtype and torch.isfinite(x.grad.float()).all()


def test_sigmoid_empty():
    x = torch.zeros(0, 4, requires_grad=True)
    target = torch.zeros(0, dtype=torch.long)
    assert sigmoid_focal_loss(x, target, 2.0, 0.25, None, "none").shape == (0, 4)
    assert sigmoid_focal_loss(x, target, 2.0, 0.25, None, "sum").item() == 0
    assert math.isnan(sigmoid_focal_loss(x, target).item())  # mmcv: sum / 0


# ------------------------------------------------------------------------------ softmax


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gamma,alpha", [(2.0, 0.25), (0.0, 1.0), (1.5, 0.5)])
def test_softmax_matches_kernel_formulas(device, gamma, alpha):
    targets = [0, 3, -1, 1, 2, 2]  # -1: ignored
    loss = _check_none_reduction(softmax_focal_loss, ref_softmax, targets, gamma, alpha, device)
    assert loss.shape == (6,)


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_weight_and_reductions(device):
    x = _inputs(device=device).requires_grad_()
    target = torch.tensor([0, 3, 3, -1, 2, 1], device=device)
    weight = torch.tensor([0.5, 2.0, 1.0, 3.0], device=device, dtype=torch.float64)
    ref_loss, ref_grad = ref_softmax(x.detach().cpu(), target.cpu(), 2.0, 0.25, weight.cpu())
    torch.testing.assert_close(
        softmax_focal_loss(x, target, 2.0, 0.25, weight, "none").detach().cpu(), ref_loss
    )
    torch.testing.assert_close(
        softmax_focal_loss(x, target, 2.0, 0.25, weight, "sum").detach().cpu(), ref_loss.sum()
    )
    mean = SoftmaxFocalLossFunction.apply(x, target, 2.0, 0.25, weight, "mean")
    torch.testing.assert_close(mean.detach().cpu(), ref_loss.sum() / 6)  # ignored rows count
    mean.backward()
    torch.testing.assert_close(x.grad.cpu(), ref_grad / 6)


def test_softmax_gradcheck_and_saturation():
    x = _inputs(n=3, c=4).requires_grad_()
    target = torch.tensor([1, -1, 3])
    for gamma in (2.0, 0.5):
        assert torch.autograd.gradcheck(
            lambda v, g=gamma: softmax_focal_loss(v, target, g, 0.25, None, "none"), (x,)
        )
    # p == 1 exactly: loss 0 and gradient 0 also for gamma < 1 (mmcv's kernel gives NaN there)
    sure = torch.tensor([[100.0, 0.0, 0.0], [0.0, 300.0, 0.0]], requires_grad=True)
    loss = softmax_focal_loss(sure, torch.tensor([0, 1]), 0.5, 0.25, None, "sum")
    (grad,) = torch.autograd.grad(loss, sure)
    assert loss.item() == 0 and torch.equal(grad, torch.zeros_like(grad))
    # p underflows: the exact -alpha * log(p) (mmcv clamps log(p) at log(FLT_MIN) = -87.3)
    far = torch.tensor([[-200.0, 0.0]])
    torch.testing.assert_close(
        softmax_focal_loss(far, torch.tensor([0]), 2.0, 0.25, None, "none"),
        torch.tensor([0.25 * 200.0]),
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gamma", [2.0, 0.0])
def test_softmax_infinite_logits_are_mmcvs_clamp(device, gamma):
    inf, nan = math.inf, math.nan
    x = torch.tensor(
        [[-inf, 0.0, 1.0], [-inf, -inf, 2.0], [inf, 0.0, 0.0], [nan, 0.0, 0.0], [-inf] * 3],
        dtype=torch.float64,
        device=device,
        requires_grad=True,
    )
    target = torch.tensor([0, 1, 1, 1, 0], device=device)
    weight = torch.tensor([2.0, 1.0, 3.0], dtype=torch.float64, device=device)
    loss = softmax_focal_loss(x, target, gamma, 0.25, weight, "none")
    ref_loss, ref_grad = ref_softmax(x.detach().cpu(), target, gamma, 0.25, weight, clamp=True)
    torch.testing.assert_close(loss.detach().cpu(), ref_loss, equal_nan=True)
    assert math.isfinite(loss[0].item()) and loss[2:].isnan().all()
    (grad,) = torch.autograd.grad(loss.nansum(), x)
    torch.testing.assert_close(grad[:2].cpu(), ref_grad[:2], equal_nan=True)
    assert torch.isfinite(grad[:2]).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_softmax_half_precision(device, dtype):
    x = _inputs(n=8, c=5, device=device, dtype=dtype).requires_grad_()
    target = torch.tensor([0, 4, 4, 1, -1, 3, 2, 0], device=device)
    loss = softmax_focal_loss(x, target, 2.0, 0.25, None, "none")
    assert loss.dtype == dtype
    ref = softmax_focal_loss(x.detach().float(), target, 2.0, 0.25, None, "none")
    torch.testing.assert_close(loss.float(), ref, rtol=2e-2, atol=2e-3)
    loss.sum().backward()
    assert x.grad.dtype == dtype


def test_softmax_empty():
    x = torch.zeros(0, 3)
    target = torch.zeros(0, dtype=torch.long)
    assert softmax_focal_loss(x, target, 2.0, 0.25, None, "none").shape == (0,)
    assert softmax_focal_loss(x, target, 2.0, 0.25, None, "sum").item() == 0


# ------------------------------------------------------------------------------ errors, modules


@pytest.mark.parametrize("fn", [sigmoid_focal_loss, softmax_focal_loss])
def test_bad_inputs(fn):
    x, target = torch.zeros(2, 3), torch.tensor([0, 1])
    with pytest.raises(TypeError, match="target must be an integer"):
        fn(x, target.float())
    with pytest.raises(TypeError, match="input must be a floating-point"):
        fn(x.long(), target)
    with pytest.raises(ValueError, match=r"input must be \(N, C\)"):
        fn(torch.zeros(2, 3, 1), target)
    with pytest.raises(ValueError, match=r"target must be \(N,\)"):
        fn(x, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="target must be on input's device"):
        fn(x, target.to("meta"))
    with pytest.raises(ValueError, match=r"weight must be \(C,\)"):
        fn(x, target, 2.0, 0.25, torch.ones(2))
    with pytest.raises(ValueError, match="reduction must be one of"):
        fn(x, target, 2.0, 0.25, None, "avg")


@pytest.mark.parametrize("device", DEVICES)
def test_targets_that_index_out_of_bounds_give_nan_rows(device):
    # mmcv's kernels read past the end there; mmpar answers NaN, computed on the device.
    x = _inputs(n=4, c=3, device=device).requires_grad_()
    weight = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, device=device)
    target = torch.tensor([0, 3, -1, 2], device=device)
    loss = sigmoid_focal_loss(x, target, 2.0, 0.25, weight, "none")
    assert loss[1:3].isnan().all() and not loss[[0, 3]].isnan().any()
    plain = sigmoid_focal_loss(x, target, 2.0, 0.25, None, "none")  # no weight: rows negative
    assert not plain.isnan().any()
    soft = softmax_focal_loss(x, target, 2.0, 0.25, None, "none")
    assert soft[1].isnan() and soft[2] == 0 and not soft[[0, 3]].isnan().any()
    soft.nansum().backward()
    assert torch.isfinite(x.grad).all() and not x.grad[1:3].any()


@pytest.mark.parametrize("fn", [sigmoid_focal_loss, softmax_focal_loss])
def test_bool_target_and_parameter_ranges(fn):
    x = torch.zeros(2, 3)
    with pytest.raises(TypeError, match="target must be an integer .* found torch.bool"):
        fn(x, torch.tensor([True, False]))
    for gamma in (-0.5, math.inf, math.nan, torch.tensor(-1.0)):
        with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
            fn(x, torch.tensor([0, 1]), gamma)
    for alpha in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match=r"alpha must be a number in \[0, 1\]"):
            fn(x, torch.tensor([0, 1]), 2.0, alpha)
    # A wrong type is a TypeError; True is not 1.
    for gamma in ("2", None, True, torch.ones(2)):
        with pytest.raises(TypeError, match="gamma must be a finite number >= 0, found"):
            fn(x, torch.tensor([0, 1]), gamma)
    with pytest.raises(TypeError, match=r"alpha must be a number in \[0, 1\], found NoneType"):
        fn(x, torch.tensor([0, 1]), 2.0, None)
    # mmcv takes float(gamma): a one-element tensor gives the float's loss.
    target = torch.tensor([0, 1])
    x = torch.randn(2, 3)
    assert torch.equal(fn(x, target, torch.tensor(2.0), 0.25), fn(x, target, 2.0, 0.25))
    with pytest.raises(TypeError, match="weight must be a floating-point"):
        fn(x, torch.tensor([0, 1]), 2.0, 0.25, torch.ones(3, dtype=torch.long))
    # mmcv asserts the shapes and the reduction: the error is an AssertionError too
    with pytest.raises(AssertionError, match="reduction must be one of"):
        fn(x, torch.tensor([0, 1]), 2.0, 0.25, None, "avg")
    with pytest.raises(AssertionError, match=r"target must be \(N,\)"):
        fn(x, torch.tensor([0]))


def test_softmax_needs_a_class_and_empty_backward():
    with pytest.raises(ValueError, match="at least one class"):
        softmax_focal_loss(torch.zeros(2, 0), torch.tensor([0, 1]))
    for fn in (sigmoid_focal_loss, softmax_focal_loss):
        x = torch.zeros(0, 3, requires_grad=True)
        fn(x, torch.zeros(0, dtype=torch.long), 2.0, 0.25, torch.ones(3), "sum").backward()
        assert x.grad.shape == (0, 3)


def test_module_parameter_ranges():
    with pytest.raises(ValueError, match="SigmoidFocalLoss: gamma must be"):
        SigmoidFocalLoss(-1.0, 0.25)
    with pytest.raises(ValueError, match="SoftmaxFocalLoss: alpha must be"):
        SoftmaxFocalLoss(2.0, 2.0)
    with pytest.raises(ValueError, match="SoftmaxFocalLoss: reduction must be one of"):
        SoftmaxFocalLoss(2.0, 0.25, reduction="avg")


def test_modules():
    weight = torch.tensor([1.0, 2.0, 3.0])
    sig = SigmoidFocalLoss(2.0, 0.25, weight, "sum")
    assert repr(sig) == "SigmoidFocalLoss(gamma=2.0, alpha=0.25, reduction=sum)"
    assert repr(SoftmaxFocalLoss(1, 0.5)) == "SoftmaxFocalLoss(gamma=1, alpha=0.5, reduction=mean)"
    assert torch.equal(sig.state_dict()["weight"], weight)
    assert "weight" not in SoftmaxFocalLoss(2.0, 0.25).state_dict()
    x, target = _inputs(n=4, c=3).float(), torch.tensor([0, 2, 1, 1])
    torch.testing.assert_close(
        sig(x, target), sigmoid_focal_loss(x, target, 2.0, 0.25, weight, "sum")
    )
    soft = SoftmaxFocalLoss(2.0, 0.25, weight)
    torch.testing.assert_close(soft(x, target), softmax_focal_loss(x, target, 2.0, 0.25, weight))


# mmcv's own test cases (tests/test_ops/test_focal_loss.py): gamma 2, alpha 0.25, 'mean'.
MMCV_CASES = [
    (
        [[1.0, 0], [0, 1.0]],
        [0, 1],
        (0.00566451, [[-0.00657264, 0.00657264], [0.00657264, -0.00657264]]),
        (0.13562961, [[-0.00657264, 0.11185755], [0.11185755, -0.00657264]]),
    ),
    (
        [[1.0, 0, -1.0], [0, 1.0, 2.0]],
        [2, 1],
        (
            0.34956908,
            [[0.10165970, 0.03739851, -0.13905823], [0.01227554, -0.10298023, 0.09070466]],
        ),
        (
            1.10251057,
            [[0.28808805, 0.11185755, -0.09602935], [0.11185755, -0.00657264, 0.40376765]],
        ),
    ),
    (
        [[1e-6, 2e-6, 3e-6], [4e-6, 5e-5, 6e-4], [7e-3, 8e-2, 9e-1]],
        [1, 2, 0],
        (
            0.15754992,
            [
                [0.02590877, -0.05181759, 0.02590882],
                [0.02589641, 0.02589760, -0.05179400],
                [-0.07307514, 0.02234372, 0.05073142],
            ],
        ),
        (
            0.42287254,
            [
                [0.07457182, -0.02485716, 0.07457201],
                [0.07457211, 0.07457669, -0.02483728],
                [-0.02462499, 0.08277918, 0.18050370],
            ],
        ),
    ),
]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 1e-2)])
@pytest.mark.parametrize("case", MMCV_CASES)
def test_mmcv_examples(case, dtype, tol):
    x_values, target, softmax_expected, sigmoid_expected = case
    for fn, (loss_value, grad) in (
        (softmax_focal_loss, softmax_expected),
        (sigmoid_focal_loss, sigmoid_expected),
    ):
        x = torch.tensor(x_values, dtype=dtype, requires_grad=True)
        loss = fn(x, torch.tensor(target), 2.0, 0.25, None, "mean")
        loss.backward()
        torch.testing.assert_close(loss.float(), torch.tensor(loss_value), rtol=tol, atol=tol)
        torch.testing.assert_close(x.grad.float(), torch.tensor(grad), rtol=tol, atol=tol)


@pytest.mark.parametrize("cls", [SigmoidFocalLoss, SoftmaxFocalLoss])
def test_module_weight_must_be_a_tensor(cls):
    with pytest.raises(TypeError, match=f"mmcv.ops.{cls.__name__}: weight must be a tensor"):
        cls(2.0, 0.25, weight=[1.0, 2.0])
