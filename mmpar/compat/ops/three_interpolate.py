"""Three-point interpolation: mmcv 1.7.2's ``mmcv.ops.three_interpolate`` in plain torch.

``out[b, c, n] = w0 * f[b, c, i0] + w1 * f[b, c, i1] + w2 * f[b, c, i2]`` with ``(i0, i1,
i2) = indices[b, n]`` and ``(w0, w1, w2) = weight[b, n]``, the products and sums rounded in
the inputs' dtype in that order (mmcv's kernel's expression). The gradient is mmcv's: to
``features`` only, ``grad_out * w`` added into each of the three features read; none to
``weight`` (mmcv's backward returns None for it) or ``indices``.

NaN/inf propagate through the products and sums as in the kernel.

Differences from mmcv-full: inputs need not be contiguous; int64 indices are taken as well
as int32; an index outside ``[0, M)`` is a ``ValueError`` (mmcv's kernel reads out of
bounds); bfloat16 works (mmcv takes float16, float32 and float64). On the CPU the
gradient's sums run in a fixed order (mmcv's atomic adds in any order).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from torch import Tensor
from torch.autograd import Function

from mmpar.compat.ops.points.checks import (
    check_index,
    check_index_range,
    check_like,
    check_points,
)

__all__ = ["three_interpolate"]

_OP = "mmcv.ops.three_interpolate"


def _check(features: Tensor, indices: Tensor, weight: Tensor) -> None:
    check_points(_OP, "features", features, "(B, C, M)")
    check_index(_OP, "indices", indices, "(B, N, 3)", features.device)
    check_points(_OP, "weight", weight, "(B, N, 3)")
    check_like(_OP, "weight", weight, "features", features)
    if indices.shape[0] != features.shape[0] or weight.shape[:2] != indices.shape[:2]:
        raise ValueError(
            f"{_OP}: features (B, C, M), indices (B, N, 3) and weight (B, N, 3) must agree "
            f"in B and N, found {tuple(features.shape)}, {tuple(indices.shape)} and "
            f"{tuple(weight.shape)}"
        )
    check_index_range(_OP, "indices", indices, features.shape[2])


def _flat_index(indices: Tensor, channels: int) -> Tensor:
    """``(B, C, N * 3)`` int64: each target point's three sources, for every channel."""
    b, n = indices.shape[0], indices.shape[1]
    return indices.reshape(b, 1, n * 3).expand(b, channels, n * 3).long()


class _ThreeInterpolate(Function):
    """The weighted sum, with mmcv's backward: to ``features`` only, by one scatter-add."""

    @staticmethod
    def forward(ctx: Any, features: Tensor, indices: Tensor, weight: Tensor) -> Tensor:
        b, c, m = features.shape
        n = indices.shape[1]
        flat = _flat_index(indices, c)
        terms = features.gather(2, flat).view(b, c, n, 3) * weight[:, None]
        first, second, third = terms.unbind(-1)
        ctx.save_for_backward(flat, weight)
        ctx.sources = m
        return first + second + third

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> Tuple[Optional[Tensor], None, None]:
        flat, weight = ctx.saved_tensors
        b, c, n = grad_out.shape
        grad_features = None
        if ctx.needs_input_grad[0]:
            spread = (grad_out[..., None] * weight[:, None]).view(b, c, n * 3)
            grad_features = grad_out.new_zeros((b, c, ctx.sources)).scatter_add_(2, flat, spread)
        return grad_features, None, None


def three_interpolate(features: Tensor, indices: Tensor, weight: Tensor) -> Tensor:
    """Each target point's features, a weighted sum of three source points' features.

    Args:
        features: ``(B, C, M)`` float, the source points' features.
        indices: ``(B, N, 3)`` int32 (or int64), three source points per target point.
        weight: ``(B, N, 3)`` float, their weights, the dtype and device of ``features``.

    Returns:
        ``(B, C, N)`` in ``features``' dtype; its gradient reaches ``features`` only (an
        output of an autograd function whose ``weight`` gradient is None, as mmcv's).

    Raises:
        TypeError: A non-float ``features`` or ``weight``, non-integer ``indices``, or
            dtypes that differ.
        ValueError: Wrong or disagreeing shapes, another device, or an index outside
            ``[0, M)``.
    """
    _check(features, indices, weight)
    return _ThreeInterpolate.apply(features, indices, weight)
