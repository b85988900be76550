"""Three-point interpolation: mmcv 1.7.2's ``mmcv.ops.three_interpolate`` in plain torch.

``out[b, c, n] = w0 * f[b, c, i0] + w1 * f[b, c, i1] + w2 * f[b, c, i2]`` with ``(i0, i1,
i2) = indices[b, n]`` and ``(w0, w1, w2) = weight[b, n]``, the products and sums rounded in
the inputs' dtype in that order (mmcv's kernel's expression). The gradient is mmcv's: to
``features`` only, ``grad_out * w`` added into each of the three features read; none to
``weight`` (mmcv's backward returns None for it) or ``indices``.

NaN/inf propagate through the products and sums as in the kernel.

Differences from mmcv-full: inputs need not be contiguous; int64 indices are taken as well
as int32; an index outside ``[0, M)`` is a ``ValueError`` (mmcv's kernel reads out of
bounds); bfloat16 works (mmcv takes float16, float32 and float64). Gradients are summed
in a fixed order (mmcv's atomic adds are in any order); twice-differentiable.
"""

from __future__ import annotations

from torch import Tensor

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


def three_interpolate(features: Tensor, indices: Tensor, weight: Tensor) -> Tensor:
    """Each target point's features, a weighted sum of three source points' features.

    Args:
        features: ``(B, C, M)`` float, the source points' features.
        indices: ``(B, N, 3)`` int32 (or int64), three source points per target point.
        weight: ``(B, N, 3)`` float, their weights, the dtype and device of ``features``.

    Returns:
        ``(B, C, N)`` in ``features``' dtype; differentiable in ``features`` only.

    Raises:
        TypeError: A non-float ``features`` or ``weight``, non-integer ``indices``, or
            dtypes that differ.
        ValueError: Wrong or disagreeing shapes, another device, or an index outside
            ``[0, M)``.
    """
    _check(features, indices, weight)
    b, c = features.shape[0], features.shape[1]
    n = indices.shape[1]
    flat = indices.reshape(b, 1, n * 3).expand(b, c, n * 3).long()
    picked = features.gather(2, flat).view(b, c, n, 3)
    terms = picked * weight.detach()[:, None]
    return terms[..., 0] + terms[..., 1] + terms[..., 2]
