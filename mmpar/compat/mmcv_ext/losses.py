"""Focal loss entry points of ``mmcv._ext`` on
:func:`mmpar.compat.ops.focal_loss.sigmoid_focal_loss` and
:func:`mmpar.compat.ops.focal_loss.softmax_focal_loss`.

mmcv-full 1.7.2's pybind signatures: ``sigmoid_focal_loss_forward(input, target, weight,
output, gamma, alpha)`` writes the elementwise loss ``(N, C)`` into ``output``;
``sigmoid_focal_loss_backward(input, target, weight, grad_input, gamma, alpha)`` writes
its elementwise derivative into ``grad_input`` (mmcv's wrapper then multiplies by the
output gradient and applies the reduction). ``weight`` is ``(C,)`` per-class weights
indexed by ``target``, or an empty tensor for none.

``softmax_focal_loss_forward(input, target, weight, output, gamma, alpha)`` takes the
softmax probabilities (mmcv's wrapper computes them) and writes each row's loss ``(N,)``
into ``output``; ``softmax_focal_loss_backward(input, target, weight, buff, grad_input,
gamma, alpha)`` writes the loss's derivative by the logits into ``grad_input`` (``buff``,
the kernel's scratch, is not written). mmpar's op takes logits: it is given
``log(input)``, whose softmax is ``input`` to float rounding, so these two agree with
mmcv-full to float tolerance, not bit for bit.

NaN/inf: as mmpar's ops. Differences from mmcv-full: runs on any device.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import torch
from torch import Tensor

from mmpar.compat.mmcv_ext.calls import grads_of, write
from mmpar.compat.ops.focal_loss import sigmoid_focal_loss, softmax_focal_loss

__all__ = [
    "ENTRY_POINTS",
    "sigmoid_focal_loss_backward",
    "sigmoid_focal_loss_forward",
    "softmax_focal_loss_backward",
    "softmax_focal_loss_forward",
]


def _weight(weight: Tensor) -> Optional[Tensor]:
    return None if weight.numel() == 0 else weight


def sigmoid_focal_loss_forward(
    input: Tensor, target: Tensor, weight: Tensor, output: Tensor, gamma: float, alpha: float
) -> None:
    """``output`` ``(N, C)`` <- the focal loss of each logit ``input`` ``(N, C)`` for
    ``target`` ``(N,)``."""
    found = sigmoid_focal_loss(input, target, gamma, alpha, _weight(weight), "none")
    write("sigmoid_focal_loss_forward", "output", output, found.detach())


def sigmoid_focal_loss_backward(
    input: Tensor, target: Tensor, weight: Tensor, grad_input: Tensor, gamma: float, alpha: float
) -> None:
    """``grad_input`` ``(N, C)`` <- the derivative of each element's loss by its logit."""

    def loss(x: Tensor, t: Tensor) -> Tensor:
        return sigmoid_focal_loss(x, t, gamma, alpha, _weight(weight), "none")

    (grad,) = grads_of(loss, (input, target), torch.ones_like(input), (0,))
    write("sigmoid_focal_loss_backward", "grad_input", grad_input, grad)


def softmax_focal_loss_forward(
    input: Tensor, target: Tensor, weight: Tensor, output: Tensor, gamma: float, alpha: float
) -> None:
    """``output`` ``(N,)`` <- each row's focal loss, ``input`` ``(N, C)`` the softmax
    probabilities."""
    found = softmax_focal_loss(input.log(), target, gamma, alpha, _weight(weight), "none")
    write("softmax_focal_loss_forward", "output", output, found.detach())


def softmax_focal_loss_backward(
    input: Tensor,
    target: Tensor,
    weight: Tensor,
    buff: Tensor,
    grad_input: Tensor,
    gamma: float,
    alpha: float,
) -> None:
    """``grad_input`` ``(N, C)`` <- the derivative of each row's loss by its logits,
    ``input`` the softmax probabilities."""
    del buff

    def loss(x: Tensor, t: Tensor) -> Tensor:
        return softmax_focal_loss(x, t, gamma, alpha, _weight(weight), "none")

    ones = input.new_ones(input.shape[0])
    (grad,) = grads_of(loss, (input.log(), target), ones, (0,))
    write("softmax_focal_loss_backward", "grad_input", grad_input, grad)


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "sigmoid_focal_loss_backward": sigmoid_focal_loss_backward,
    "sigmoid_focal_loss_forward": sigmoid_focal_loss_forward,
    "softmax_focal_loss_backward": softmax_focal_loss_backward,
    "softmax_focal_loss_forward": softmax_focal_loss_forward,
}
