"""Active rotating filters (S2ANet's ORConv2d): mmcv 1.7.2's ``mmcv.ops.active_rotated_filter``.

A weight ``(I, J, O, kH, kW)`` holds, per output plane ``i`` and input plane ``j``, ``L = O *
kH * kW`` entries (``l`` runs over orientation, row, column). ``indices`` ``(O, kH, kW, R)``,
read as ``(L, R)``, gives for rotation ``r`` where each entry goes, 1-based: the output,
``(I * R, J * O, kH, kW)`` read as ``(I, R, J, L)``, has ``out[i, r, j, indices[l, r] - 1] =
weight[i, j, l]``, and 0 where no entry goes. The gradient of ``weight[i, j, l]`` is the sum
over ``r`` of the output's gradient at those places, as in mmcv.

``indices`` is meant to hold a permutation of ``1..L`` per rotation (ORConv2d's do); where
two entries go to the same place, which one lands is unspecified (as on mmcv's CUDA).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.backend import check_float

__all__ = ["active_rotated_filter"]

_OP = "mmcv.ops.active_rotated_filter"


def _check(input: Tensor, indices: Tensor) -> None:
    if not isinstance(input, Tensor) or not isinstance(indices, Tensor):
        found = type(indices if isinstance(input, Tensor) else input).__name__
        raise TypeError(f"{_OP}: input and indices must be tensors, got {found}")
    check_float("active_rotated_filter", input=input)
    if indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
        raise TypeError(f"{_OP}: indices must be an integer tensor, got {indices.dtype}")
    if input.dim() != 5:
        raise ValueError(
            f"{_OP}: input must have shape (I, J, O, kH, kW), got {tuple(input.shape)}"
        )
    if indices.dim() != 4 or indices.shape[:3] != input.shape[2:]:
        raise ValueError(
            f"{_OP}: indices must have shape (O, kH, kW, R) with (O, kH, kW) = "
            f"{tuple(input.shape[2:])} from input, got {tuple(indices.shape)}"
        )
    if indices.device != input.device:
        raise ValueError(
            f"{_OP}: indices must be on input's device {input.device}, got {indices.device}"
        )
    entries = indices.shape[0] * indices.shape[1] * indices.shape[2]
    # Checked on CPU only, where it costs no device sync (on CUDA a bad index is a device error).
    if indices.numel() and indices.device.type == "cpu":
        low, high = int(indices.min()), int(indices.max())
        if low < 1 or high > entries:
            raise ValueError(
                f"{_OP}: indices must lie in [1, {entries}] (O * kH * kW), got {low}..{high}"
            )


def active_rotated_filter(input: Tensor, indices: Tensor) -> Tensor:
    """The rotated copies of oriented filters (see the module docstring).

    Args:
        input: ``(I, J, O, kH, kW)`` float weight.
        indices: ``(O, kH, kW, R)`` integer, 1-based targets per rotation.

    Returns:
        ``(I * R, J * O, kH, kW)`` in ``input``'s dtype, differentiable in ``input``.

    Raises:
        TypeError: ``input`` not floating point, ``indices`` not integer.
        ValueError: Wrong shapes or devices; on CPU, an index outside ``[1, O * kH * kW]``.
    """
    _check(input, indices)
    planes_out, planes_in, orients, kh, kw = input.shape
    rotations = indices.shape[3]
    entries = orients * kh * kw
    shape = (planes_out, rotations, planes_in, entries)
    target = (indices.reshape(entries, rotations).t().long() - 1)[None, :, None, :].expand(shape)
    source = input.reshape(planes_out, 1, planes_in, entries).expand(shape)
    out = input.new_zeros(shape).scatter(3, target, source)
    return out.reshape(planes_out * rotations, planes_in * orients, kh, kw)
