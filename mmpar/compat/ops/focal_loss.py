"""Sigmoid and softmax focal losses (``mmcv.ops.focal_loss``), in plain torch.

The focal loss of `Lin et al. <https://arxiv.org/abs/1708.02002>`_ as mmcv-full's
kernels define it, written with ``logsigmoid`` / ``log_softmax`` so that it is
stable for any logit, and differentiated by autograd (the gradients equal the
closed forms of mmcv's backward kernels).

* Sigmoid: ``target`` holds class indices; a row whose target is not in
  ``[0, num_classes)`` (mmdet uses ``num_classes`` for background) is negative
  for every class. ``weight`` is per class and indexed by the row's target.
* Softmax: a row whose target is negative is ignored (loss 0).
* A target that the op would index out of bounds with (``>= C`` for the softmax
  loss; outside ``[0, C)`` with ``weight``), where mmcv's kernels read past the
  end of a row or of the weight, gives that row a NaN loss (and no gradient):
  the loud answer a device computes without stopping for a host-side check.
* ``target`` must be an integer tensor, not ``bool`` (whose True would read as
  class 1). ``gamma`` must be finite and ``>= 0``, ``alpha`` in ``[0, 1]``.
* Non-finite logits give mmcv-full's result, forward and backward (its kernels clamp
  ``log(p)`` at ``log(FLT_MIN)``, ``L = -log(FLT_MIN) = 87.3365...``; ``w`` is the
  row's ``weight[target]``, 1 without one):

  - sigmoid: an element whose own label has probability 0 (a ``-inf`` logit of a
    positive, ``+inf`` of a negative) costs ``alpha * L * w`` (positive, about 21.8
    with ``alpha = 0.25``) or ``(1 - alpha) * L * w`` (negative, about 65.5), with the
    gradient ``-alpha * w`` (resp. ``(1 - alpha) * w``); the other infinite cases cost
    0, gradient 0. A NaN logit gives that element a NaN loss and gradient.
  - softmax: a ``-inf`` logit at the target, in a row whose largest logit is finite,
    costs ``alpha * L * w``, with the gradient ``alpha * w * (softmax(x) - onehot)``; a
    ``-inf`` elsewhere is a probability of 0. A row with a NaN or a ``+inf``, or of
    all ``-inf``, gives a NaN loss (mmcv's ``x - max(x)`` is NaN there).
* ``reduction='mean'`` divides the sum by ``N``, the number of rows (not by
  ``N * C``); ``'none'`` gives ``(N, C)`` for the sigmoid loss and ``(N,)`` for
  the softmax loss.

float16 / bfloat16 inputs are computed in float32 and returned in their dtype.
Where mmcv's kernels clamp ``log(p)`` at ``log(FLT_MIN)`` (probabilities that
round to 0 or 1 in the input's precision: float32 logits beyond about -87 for
the true class, or above about 17 for a sigmoid negative), these losses give the
exact value instead (the clamp applies to infinite logits only).
"""

from __future__ import annotations

import math
import numbers
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mmpar.compat.ops.backend import ArgumentError, float_compute_dtype

__all__ = [
    "SigmoidFocalLoss",
    "SigmoidFocalLossFunction",
    "SoftmaxFocalLoss",
    "SoftmaxFocalLossFunction",
    "sigmoid_focal_loss",
    "softmax_focal_loss",
]

_REDUCTIONS = ("none", "mean", "sum")
# -log(FLT_MIN): mmcv's kernels clamp log(p) at log(FLT_MIN), the loss of p = 0.
_LOG_CLAMP = -math.log(torch.finfo(torch.float32).tiny)


class _GradientOnly(torch.autograd.Function):
    """0 forward; ``slope`` times the incoming gradient to ``x`` backward.

    Gives a term the gradient mmcv's kernel has at an infinite logit, where a
    differentiable expression of ``x`` would be infinite or NaN.
    """

    @staticmethod
    def forward(ctx, x: Tensor, slope: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(slope)
        return torch.zeros_like(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (slope,) = ctx.saved_tensors
        return grad * slope, None


def _check_args(
    op: str, input: Tensor, target: Tensor, weight: Optional[Tensor], reduction: str
) -> None:
    # mmcv asserts the shapes, the weight and the reduction: ArgumentError is an
    # AssertionError too.
    if not isinstance(input, Tensor) or not input.is_floating_point():
        found = input.dtype if isinstance(input, Tensor) else type(input).__name__
        raise TypeError(f"{op}: input must be a floating-point tensor, found {found}")
    if input.dim() != 2:
        raise ArgumentError(f"{op}: input must be (N, C), found shape {tuple(input.shape)}")
    if (
        not isinstance(target, Tensor)
        or target.is_floating_point()
        or target.is_complex()
        or target.dtype == torch.bool
    ):
        found = target.dtype if isinstance(target, Tensor) else type(target).__name__
        raise TypeError(
            f"{op}: target must be an integer (long) tensor of class indices, found {found}"
        )
    if target.dim() != 1 or target.size(0) != input.size(0):
        raise ArgumentError(
            f"{op}: target must be (N,) with N = input.size(0) = {input.size(0)}, "
            f"found shape {tuple(target.shape)}"
        )
    if target.device != input.device:
        raise ValueError(
            f"{op}: target must be on input's device ({input.device}), found {target.device}"
        )
    if weight is not None:
        if not isinstance(weight, Tensor) or not weight.is_floating_point():
            found = weight.dtype if isinstance(weight, Tensor) else type(weight).__name__
            raise TypeError(f"{op}: weight must be a floating-point tensor, found {found}")
        if weight.dim() != 1 or weight.size(0) != input.size(1):
            raise ArgumentError(
                f"{op}: weight must be (C,) with C = input.size(1) = {input.size(1)}, "
                f"found shape {tuple(weight.shape)}"
            )
    if reduction not in _REDUCTIONS:
        raise ArgumentError(f"{op}: reduction must be one of {_REDUCTIONS}, found {reduction!r}")


def _check_gamma_alpha(op: str, gamma: float, alpha: float) -> tuple[float, float]:
    """``(gamma, alpha)`` as floats: gamma finite and >= 0, alpha in [0, 1].

    A real number or a one-element tensor, as mmcv's ``float(gamma)`` takes; not a bool.
    """
    values = []
    for name, value, low, high, expected in (
        ("gamma", gamma, 0.0, math.inf, "a finite number >= 0"),
        ("alpha", alpha, 0.0, 1.0, "a number in [0, 1]"),
    ):
        one = isinstance(value, Tensor) and value.numel() == 1 and value.dtype != torch.bool
        if isinstance(value, bool) or not (isinstance(value, numbers.Real) or one):
            raise TypeError(f"{op}: {name} must be {expected}, found {type(value).__name__}")
        number = float(value)
        if not (low <= number <= high and math.isfinite(number)):
            raise ValueError(f"{op}: {name} must be {expected}, found {value!r}")
        values.append(number)
    return values[0], values[1]


def _class_weight(loss: Tensor, weight: Tensor, target: Tensor) -> Tensor:
    """``weight[target]``, NaN where ``target`` is not a class index of ``weight``.

    mmcv's kernels read past the weight's end there; a NaN loss says so without
    a host sync (a check would stop the device on every step).
    """
    num_classes = weight.size(0)
    valid = (target >= 0) & (target < num_classes)
    picked = weight.to(device=loss.device, dtype=loss.dtype)[target.clamp(0, num_classes - 1)]
    return torch.where(valid, picked, torch.full_like(picked, math.nan))


def _reduce(loss: Tensor, reduction: str, num_rows: int) -> Tensor:
    if reduction == "mean":
        return loss.sum() / num_rows
    if reduction == "sum":
        return loss.sum()
    return loss


def sigmoid_focal_loss(
    input: Tensor,
    target: Tensor,
    gamma: float = 2.0,
    alpha: float = 0.25,
    weight: Optional[Tensor] = None,
    reduction: str = "mean",
) -> Tensor:
    """Sigmoid focal loss, one binary problem per class.

    With ``p = sigmoid(x)``, an element is positive when ``target[n] == c``:
    ``-alpha * (1 - p)**gamma * log(p)``; otherwise negative:
    ``-(1 - alpha) * p**gamma * log(1 - p)``; times ``weight[target[n]]`` if given.

    Args:
        input: (N, C) float, the logits.
        target: (N,) long, class indices; a value outside ``[0, C)`` (mmdet's
            background, ``C``) makes the row negative for every class.
        gamma: The focusing exponent.
        alpha: The weight of positives (negatives get ``1 - alpha``).
        weight: (C,) float, per-class weights indexed by ``target``, or ``None``;
            a row whose target is outside ``[0, C)`` then gets a NaN loss.
        reduction: ``"none"`` ((N, C)), ``"mean"`` (sum / N) or ``"sum"``.

    Returns:
        The loss, in ``input``'s dtype.

    Raises:
        TypeError: ``input`` not floating point, or ``target`` not integer (``bool`` included).
        ValueError: devices that do not match, ``gamma`` or ``alpha`` out of range.
        ArgumentError: shapes that do not match, or an unknown ``reduction``
            (mmcv asserts them; a ValueError too).
    """
    op = "mmcv.ops.sigmoid_focal_loss"
    _check_args(op, input, target, weight, reduction)
    gamma, alpha = _check_gamma_alpha(op, gamma, alpha)
    num_classes = input.size(1)
    x = input.to(float_compute_dtype(input.dtype))
    target = target.long()
    positive = target.unsqueeze(1) == torch.arange(num_classes, device=target.device)
    # With z = x for positives and -x for negatives, sigmoid(z) is the probability of
    # the element's own label, and both cases become -a * (1 - pt)**gamma * log(pt).
    z = torch.where(positive, x, -x)
    # An infinite z is mmcv's p = 0 (z = -inf: its clamped log) or p = 1 (+inf: 0).
    low, high = z == -math.inf, z == math.inf
    z_finite = torch.where(low | high, torch.zeros_like(z), z)
    log_pt = F.logsigmoid(z_finite)
    # (1 - pt)**gamma as exp(gamma * log(1 - pt)): finite gradients for gamma < 1 too.
    modulator = torch.exp(float(gamma) * F.logsigmoid(-z_finite))
    balance = torch.where(positive, float(alpha), 1.0 - float(alpha)).to(x.dtype)
    loss = -balance * modulator * log_pt
    clamped = torch.where(low, balance * _LOG_CLAMP, torch.zeros_like(loss))
    loss = torch.where(low | high, clamped, loss)
    loss = loss + _GradientOnly.apply(z, torch.where(low, -balance, torch.zeros_like(loss)))
    if weight is not None and num_classes:
        loss = loss * _class_weight(loss, weight, target).unsqueeze(1)
    return _reduce(loss, reduction, input.size(0)).to(input.dtype)


def softmax_focal_loss(
    input: Tensor,
    target: Tensor,
    gamma: float = 2.0,
    alpha: float = 0.25,
    weight: Optional[Tensor] = None,
    reduction: str = "mean",
) -> Tensor:
    """Softmax focal loss over the classes of each row.

    With ``p = softmax(x)[n, target[n]]``, row ``n`` costs
    ``-alpha * (1 - p)**gamma * log(p)``, times ``weight[target[n]]`` if given.

    Args:
        input: (N, C) float, the logits.
        target: (N,) long, class indices in ``[0, C)``; a negative index
            ignores the row (loss and gradient 0), one ``>= C`` makes it NaN.
        gamma: The focusing exponent.
        alpha: The factor of every row's loss.
        weight: (C,) float, per-class weights indexed by ``target``, or ``None``.
        reduction: ``"none"`` ((N,)), ``"mean"`` (sum / N) or ``"sum"``.

    Returns:
        The loss, in ``input``'s dtype.

    Raises:
        TypeError: ``input`` not floating point, or ``target`` not integer (``bool`` included).
        ValueError: devices that do not match, no class, ``gamma`` or ``alpha``
            out of range.
        ArgumentError: shapes that do not match, or an unknown ``reduction``
            (mmcv asserts them; a ValueError too).
    """
    op = "mmcv.ops.softmax_focal_loss"
    _check_args(op, input, target, weight, reduction)
    gamma, alpha = _check_gamma_alpha(op, gamma, alpha)
    num_classes = input.size(1)
    if num_classes == 0:
        raise ValueError(f"{op}: input must have at least one class (C >= 1), found (N, 0)")
    target = target.long()
    x = input.to(float_compute_dtype(input.dtype))
    valid = target >= 0
    index = target.clamp(0, num_classes - 1)
    log_pt = F.log_softmax(x, dim=1).gather(1, index.unsqueeze(1)).squeeze(1)
    # A -inf logit at the target (the row's max finite) is mmcv's p = 0: its clamped log.
    low = log_pt == -math.inf
    log_finite = torch.where(low, torch.zeros_like(log_pt), log_pt)
    one_minus_pt = -torch.expm1(log_finite)
    # pow's gradient at 0 is infinite for gamma < 1; the loss's is 0 there (pt = 1).
    nonzero = one_minus_pt > 0
    safe = torch.where(nonzero, one_minus_pt, torch.ones_like(one_minus_pt))
    modulator = torch.where(nonzero, safe.pow(float(gamma)), torch.zeros_like(safe))
    loss = -alpha * modulator * log_finite
    loss = torch.where(low, torch.full_like(loss, alpha * _LOG_CLAMP), loss)
    # log_pt's own gradient is finite there: mmcv's alpha * (softmax - onehot).
    slope = torch.where(low, torch.full_like(loss, -alpha), torch.zeros_like(loss))
    loss = loss + _GradientOnly.apply(log_pt, slope)
    if weight is not None:
        loss = loss * weight.to(device=x.device, dtype=x.dtype)[index]
    # A target >= C has no probability (mmcv's kernel reads another row's): NaN,
    # computed on the device rather than checked with a host sync.
    loss = torch.where(target < num_classes, loss, torch.full_like(loss, math.nan))
    loss = torch.where(valid, loss, torch.zeros_like(loss))
    return _reduce(loss, reduction, input.size(0)).to(input.dtype)


class SigmoidFocalLossFunction:
    """mmcv's autograd Function's name: ``apply`` is :func:`sigmoid_focal_loss`."""

    apply = staticmethod(sigmoid_focal_loss)


class SoftmaxFocalLossFunction:
    """mmcv's autograd Function's name: ``apply`` is :func:`softmax_focal_loss`."""

    apply = staticmethod(softmax_focal_loss)


class _FocalLoss(nn.Module):
    def __init__(
        self,
        gamma: float,
        alpha: float,
        weight: Optional[Tensor] = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        op = f"mmcv.ops.{type(self).__name__}"
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, found {reduction!r}")
        _check_gamma_alpha(op, gamma, alpha)
        if weight is not None and not isinstance(weight, Tensor):
            raise TypeError(f"{op}: weight must be a tensor or None, found {type(weight).__name__}")
        self.gamma = gamma
        self.alpha = alpha
        self.register_buffer("weight", weight)
        self.reduction = reduction

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(gamma={self.gamma}, alpha={self.alpha}, "
            f"reduction={self.reduction})"
        )


class SigmoidFocalLoss(_FocalLoss):
    """:func:`sigmoid_focal_loss` as a module; ``weight`` is a buffer.

    Args:
        gamma: The focusing exponent.
        alpha: The weight of positives.
        weight: (C,) float, per-class weights, or ``None``.
        reduction: ``"none"``, ``"mean"`` or ``"sum"``.
    """

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        """The loss of ``input`` (N, C) logits against ``target`` (N,) class indices."""
        return sigmoid_focal_loss(
            input, target, self.gamma, self.alpha, self.weight, self.reduction
        )


class SoftmaxFocalLoss(_FocalLoss):
    """:func:`softmax_focal_loss` as a module; ``weight`` is a buffer.

    Args:
        gamma: The focusing exponent.
        alpha: The factor of every row's loss.
        weight: (C,) float, per-class weights, or ``None``.
        reduction: ``"none"``, ``"mean"`` or ``"sum"``.
    """

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        """The loss of ``input`` (N, C) logits against ``target`` (N,) class indices."""
        return softmax_focal_loss(
            input, target, self.gamma, self.alpha, self.weight, self.reduction
        )
