"""Point gathering: mmcv 1.7.2's ``mmcv.ops.gather_points`` in plain torch.

Definition (mmcv's kernels): ``out[b, c, j] = features[b, c, indices[b, j]]``; the gradient
of ``features`` adds each ``grad_out[b, c, j]`` at ``indices[b, j]`` (mmcv's ``atomicAdd``),
which is the gradient of ``torch.gather``, so the op is ``gather`` with autograd.
``indices`` gets no gradient.

Non-finite values are copied as they are, and their gradients added as they are.

Differences from mmcv-full: any integer dtype of ``indices`` (mmcv: int32) and any floating
dtype of ``features``; any device (mmcv: CUDA and NPU). An index outside ``[0, N)``, which
mmcv's kernel reads outside the features with, is a ``ValueError`` (checking it waits for
the device once per call).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["gather_points"]

_OP = "mmcv.ops.gather_points"


def _check(features: object, indices: object) -> None:
    if not isinstance(features, Tensor) or not features.is_floating_point():
        found = features.dtype if isinstance(features, Tensor) else type(features).__name__
        raise TypeError(f"{_OP}: features must be a floating-point tensor, found {found}")
    if (
        not isinstance(indices, Tensor)
        or indices.is_floating_point()
        or indices.is_complex()
        or (indices.dtype == torch.bool)
    ):
        found = indices.dtype if isinstance(indices, Tensor) else type(indices).__name__
        raise TypeError(f"{_OP}: indices must be an integer tensor, found {found}")
    if features.dim() != 3:
        raise ValueError(
            f"{_OP}: features must have shape (B, C, N), found {tuple(features.shape)}"
        )
    if indices.dim() != 2 or indices.shape[0] != features.shape[0]:
        raise ValueError(
            f"{_OP}: indices must have shape (B, M) with features' B={features.shape[0]}, "
            f"found {tuple(indices.shape)}"
        )
    if indices.device != features.device:
        raise ValueError(
            f"{_OP}: indices must be on features' device {features.device}, found {indices.device}"
        )


def _check_range(indices: Tensor, n: int) -> None:
    if indices.numel() == 0:
        return
    low, high = (int(v) for v in torch.aminmax(indices))
    if low < 0 or high >= n:
        raise ValueError(
            f"{_OP}: indices must lie in [0, N) = [0, {n}), found values from {low} to {high}"
        )


def gather_points(features: Tensor, indices: Tensor) -> Tensor:
    """Gathers the features of the given points.

    Args:
        features: ``(B, C, N)`` float, the features of ``N`` points.
        indices: ``(B, M)`` integer (int32 in mmcv), point indices in ``[0, N)``.

    Returns:
        ``(B, C, M)`` in ``features``' dtype, differentiable in ``features``.

    Raises:
        TypeError: ``features`` not floating point, or ``indices`` not integer.
        ValueError: wrong shapes, different devices, or an index outside ``[0, N)``.
    """
    _check(features, indices)
    _check_range(indices, features.shape[2])
    index = indices.long()[:, None, :].expand(-1, features.shape[1], -1)
    return features.gather(2, index)
