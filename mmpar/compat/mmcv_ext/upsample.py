"""CARAFE's entry points of ``mmcv._ext`` on :func:`mmpar.compat.ops.carafe.carafe`.

mmcv-full 1.7.2's pybind signatures (``k, g, s`` = ``kernel_size, group_size,
scale_factor``):

* ``carafe_naive_forward(features, masks, output, k, g, s)``: writes ``output``;
* ``carafe_naive_backward(top_grad, features, masks, bottom_grad, mask_grad, k, g, s)``:
  adds into ``bottom_grad`` and ``mask_grad`` (the kernel's atomic adds);
* ``carafe_forward(features, masks, rfeatures, routput, rmasks, output, k, g, s)``: writes
  ``output`` and, as the kernel does, the channels-last copies of the features, masks and
  output into ``rfeatures``, ``rmasks`` and ``routput`` (their ``(N, C, H, W)`` buffers
  holding ``(N, H, W, C)`` data);
* ``carafe_backward(top_grad, rfeatures, masks, rtop_grad, rbottom_grad_hs, rbottom_grad,
  rmask_grad, bottom_grad, mask_grad, k, g, s)``: reads the features from ``rfeatures``
  (as the kernel does) and writes ``bottom_grad`` and ``mask_grad``; the four ``r*``
  scratch buffers are not written.

NaN/inf: as mmpar's op. Differences from mmcv-full: runs on any device.
"""

from __future__ import annotations

from typing import Callable, Dict

from torch import Tensor

from mmpar.compat.mmcv_ext.calls import grads_of, write
from mmpar.compat.ops.carafe import carafe

__all__ = [
    "ENTRY_POINTS",
    "carafe_backward",
    "carafe_forward",
    "carafe_naive_backward",
    "carafe_naive_forward",
]


def _channels_last(function: str, name: str, target: Tensor, value: Tensor) -> None:
    """Write ``value`` ``(N, C, H, W)`` into ``target`` in ``(N, H, W, C)`` order."""
    write(function, name, target, value.permute(0, 2, 3, 1).contiguous())


def carafe_naive_forward(
    features: Tensor,
    masks: Tensor,
    output: Tensor,
    kernel_size: int,
    group_size: int,
    scale_factor: int,
) -> None:
    """``output`` ``(N, C, H * s, W * s)`` <- CARAFE of ``features`` ``(N, C, H, W)`` with
    ``masks`` ``(N, k * k * g, H * s, W * s)``."""
    found = carafe(features, masks, kernel_size, group_size, scale_factor)
    write("carafe_naive_forward", "output", output, found.detach())


def carafe_naive_backward(
    top_grad: Tensor,
    features: Tensor,
    masks: Tensor,
    bottom_grad: Tensor,
    mask_grad: Tensor,
    kernel_size: int,
    group_size: int,
    scale_factor: int,
) -> None:
    """``bottom_grad`` and ``mask_grad`` += CARAFE's gradients for ``top_grad``."""

    def up(f: Tensor, m: Tensor) -> Tensor:
        return carafe(f, m, kernel_size, group_size, scale_factor)

    grad_f, grad_m = grads_of(up, (features, masks), top_grad, (0, 1))
    write("carafe_naive_backward", "bottom_grad", bottom_grad, grad_f, add=True)
    write("carafe_naive_backward", "mask_grad", mask_grad, grad_m, add=True)


def carafe_forward(
    features: Tensor,
    masks: Tensor,
    rfeatures: Tensor,
    routput: Tensor,
    rmasks: Tensor,
    output: Tensor,
    kernel_size: int,
    group_size: int,
    scale_factor: int,
) -> None:
    """``output`` <- CARAFE, as :func:`carafe_naive_forward`; ``rfeatures``, ``rmasks`` and
    ``routput`` <- the channels-last copies the kernel leaves there."""
    found = carafe(features, masks, kernel_size, group_size, scale_factor).detach()
    _channels_last("carafe_forward", "rfeatures", rfeatures, features)
    _channels_last("carafe_forward", "rmasks", rmasks, masks)
    _channels_last("carafe_forward", "routput", routput, found)
    write("carafe_forward", "output", output, found)


def carafe_backward(
    top_grad: Tensor,
    rfeatures: Tensor,
    masks: Tensor,
    rtop_grad: Tensor,
    rbottom_grad_hs: Tensor,
    rbottom_grad: Tensor,
    rmask_grad: Tensor,
    bottom_grad: Tensor,
    mask_grad: Tensor,
    kernel_size: int,
    group_size: int,
    scale_factor: int,
) -> None:
    """``bottom_grad`` and ``mask_grad`` <- CARAFE's gradients for ``top_grad``, the
    features read from the forward's ``rfeatures``."""
    del rtop_grad, rbottom_grad_hs, rbottom_grad, rmask_grad
    n, c, h, w = bottom_grad.shape
    features = rfeatures.reshape(n, h, w, c).permute(0, 3, 1, 2)

    def up(f: Tensor, m: Tensor) -> Tensor:
        return carafe(f, m, kernel_size, group_size, scale_factor)

    grad_f, grad_m = grads_of(up, (features, masks), top_grad, (0, 1))
    write("carafe_backward", "bottom_grad", bottom_grad, grad_f)
    write("carafe_backward", "mask_grad", mask_grad, grad_m)


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "carafe_backward": carafe_backward,
    "carafe_forward": carafe_forward,
    "carafe_naive_backward": carafe_naive_backward,
    "carafe_naive_forward": carafe_naive_forward,
}
