"""Temporal interlace shift (TIN), as mmcv 1.7.2's ``mmcv.ops.tin_shift``, in plain torch.

``input`` is ``(N, T, C, HW)`` and ``shift`` ``(N, G)`` integers; the ``C`` channels form
``G`` groups of ``C // G`` consecutive channels, and group ``g`` of sample ``n`` moves
``shift[n, g]`` frames later in time: ``out[n, t, c] = input[n, t - shift[n, g(c)], c]``,
0 where ``t - shift`` falls outside ``[0, T)``.

The backward is mmcv's, which is not the adjoint of this forward: mmcv's backward kernel
is its forward kernel, so ``grad_input`` is ``grad_output`` shifted the same way
(``grad_input[n, t, c] = grad_output[n, t - shift, c]``), where the true gradient would
shift it back (``grad_output[n, t + shift, c]``). mmcv's own test expects this gradient,
and mmaction2's TIN models were trained with it, so mmpar keeps it; ``gradcheck`` against
finite differences therefore fails wherever a shift is nonzero. ``shift`` gets no gradient.

Differences from mmcv-full: it runs on any device, CPU included (mmcv-full has CUDA and
MLU kernels only), in every floating dtype (bfloat16 too) exactly, since it only moves
values; ``shift`` may be of any integer dtype (mmcv-full reads int32) and a floating
``shift`` is a ``TypeError``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd import Function

__all__ = ["TINShift", "TINShiftFunction", "tin_shift"]


def _check(input: Any, shift: Any) -> None:
    for name, value in (("input", input), ("shift", shift)):
        if not isinstance(value, Tensor):
            raise TypeError(
                f"mmcv.ops.tin_shift: {name} must be a torch.Tensor, got {type(value).__name__}"
            )
    if input.dim() != 4:
        raise ValueError(
            f"mmcv.ops.tin_shift: input must have shape (N, T, C, HW), got {tuple(input.shape)}"
        )
    if shift.dim() != 2:
        raise ValueError(
            f"mmcv.ops.tin_shift: shift must have shape (N, G), got {tuple(shift.shape)}"
        )
    if input.shape[0] != shift.shape[0]:
        raise ValueError(
            f"mmcv.ops.tin_shift: shift must have input's batch size {input.shape[0]} in "
            f"dim 0, got {shift.shape[0]}"
        )
    channels, groups = input.shape[2], shift.shape[1]
    if groups == 0 or channels // groups == 0 or channels % groups:
        raise ValueError(
            f"mmcv.ops.tin_shift: input's C = {channels} must be a positive multiple of "
            f"shift's G = {groups} (the channel groups)"
        )
    if not input.is_floating_point():
        raise TypeError(f"mmcv.ops.tin_shift: input must be floating point, found {input.dtype}")
    if shift.is_floating_point() or shift.is_complex() or shift.dtype == torch.bool:
        raise TypeError(f"mmcv.ops.tin_shift: shift must be an integer tensor, got {shift.dtype}")
    if shift.device != input.device:
        raise ValueError(
            f"mmcv.ops.tin_shift: shift must be on input's device {input.device}, "
            f"got {shift.device}"
        )


def _shift_frames(data: Tensor, shift: Tensor) -> Tensor:
    """``out[n, t, c] = data[n, t - shift[n, c // (C // G)], c]``, 0 outside ``[0, T)``."""
    n, frames, channels, hw = data.shape
    per_channel = shift.long().repeat_interleave(channels // shift.shape[1], dim=1)  # (N, C)
    source = torch.arange(frames, device=data.device)[None, :, None] - per_channel[:, None, :]
    inside = (source >= 0) & (source < frames)
    index = source.clamp(0, max(frames - 1, 0))[..., None].expand(n, frames, channels, hw)
    moved = data.gather(1, index)
    return moved.masked_fill(~inside[..., None], 0)


class TINShiftFunction(Function):
    """mmcv's autograd Function: the shift forward, the same shift of the gradient back."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, shift: Tensor) -> Tensor:
        _check(input, shift)
        ctx.save_for_backward(shift)
        return _shift_frames(input, shift)

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor, None]:
        (shift,) = ctx.saved_tensors
        return _shift_frames(grad_output, shift), None


def tin_shift(input: Tensor, shift: Tensor) -> Tensor:
    """Shift each channel group of each sample along time by its integer shift.

    Args:
        input: ``(N, T, C, HW)`` float.
        shift: ``(N, G)`` integer, in frames; ``G`` divides ``C``, group ``g`` being
            channels ``[g * C // G, (g + 1) * C // G)``.

    Returns:
        ``(N, T, C, HW)``, ``input``'s dtype: ``out[n, t, c] = input[n, t - shift, c]``,
        zero where that frame does not exist. The gradient of ``input`` is mmcv's (see the
        module's documentation).

    Raises:
        TypeError: A non-tensor, a non-float input or a non-integer shift.
        ValueError: Shapes that disagree (mmcv's ``ValueError`` cases among them) or
            tensors on two devices.
    """
    return TINShiftFunction.apply(input, shift)


class TINShift(nn.Module):
    """:func:`tin_shift` as a module, as mmcv's ``TINShift``."""

    def forward(self, input: Tensor, shift: Tensor) -> Tensor:
        """``(N, T, C, HW)`` input, ``(N, G)`` shift -> ``(N, T, C, HW)``."""
        return tin_shift(input, shift)
