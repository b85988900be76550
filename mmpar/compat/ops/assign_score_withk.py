"""PAConv's score assignment: mmcv 1.7.2's ``mmcv.ops.assign_score_withk`` in plain torch.

Definition (mmcv's CUDA kernels; mmcv 1.7.2 has no CPU kernel): for batch ``b``, center
``n``, neighbour ``k`` and output channel ``o``, with ``kn = knn_idx[b, n, k]`` and the
center's own index ``cn = knn_idx[b, n, 0]``::

    out[b, o, n, k] = sum_m scores[b, n, k, m]
                      * (point_features[b, kn, m, o] - center_features[b, cn, m, o])

and 0 where ``kn`` is outside ``[0, N)`` (the kernel's "outside the neighbourhood"). The
gradients are the kernel's, which are this formula's: ``scores`` gets
``sum_o (P[kn] - C[cn]) * grad``; ``point_features[kn]`` gets ``scores * grad`` added and
``center_features[cn]`` gets it subtracted, for every in-range ``kn`` only. ``aggregate``
(``'sum'``, ``'avg'`` or ``'max'``) is checked and otherwise ignored, as mmcv's kernels
ignore it: the output is per neighbour, ``(B, out_dim, npoint, K)``.

The work runs in chunks of centers so that the gathered ``(chunk, K, M, out_dim)`` features
stay bounded, in the forward and in the backward (which saves only the inputs).

NaN/inf: propagated through the formula as the kernel's arithmetic does; an out-of-range
neighbour gives exactly 0 (and takes and gives no gradient) whatever the values.

Differences from mmcv-full: float16/bfloat16 are computed in float32 and cast back; any
device (mmcv: CUDA only); any integer ``knn_idx`` dtype (mmcv: int64). A row whose center
index ``knn_idx[b, n, 0]`` is out of range while another of its neighbours is in range,
which mmcv's kernel reads outside ``center_features`` for, is a ``ValueError`` (the check
waits for the device once per call). The sums over ``m`` and ``o`` are matrix products here,
so their rounding differs from the kernel's running sums.
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from mmpar.compat.ops.backend import check_float_tensors, float_compute_dtype

__all__ = ["assign_score_withk"]

_OP = "mmcv.ops.assign_score_withk"
_AGGREGATES = ("sum", "avg", "max")
# Elements of the largest gathered (B, chunk, K, M, out_dim) tensor.
_CHUNK_ELEMENTS = 1 << 22


def _check(scores: Any, points: Any, centers: Any, knn_idx: Any, aggregate: Any) -> None:
    if not isinstance(scores, Tensor):
        raise TypeError(f"{_OP}: scores must be a floating-point tensor, found {type(scores)}")
    check_float_tensors(
        _OP, scores.device, "scores'", scores=scores, point_features=points, center_features=centers
    )
    if aggregate not in _AGGREGATES:
        raise ValueError(f"{_OP}: aggregate must be one of {_AGGREGATES}, found {aggregate!r}")
    if scores.dim() != 4 or points.dim() != 4:
        raise ValueError(
            f"{_OP}: scores must have shape (B, npoint, K, M) and point_features (B, N, M, "
            f"out_dim), found {tuple(scores.shape)} and {tuple(points.shape)}"
        )
    b, npoint, k, m = scores.shape
    if points.shape[0] != b or points.shape[2] != m or centers.shape != points.shape:
        raise ValueError(
            f"{_OP}: point_features and center_features must have shape (B={b}, N, M={m}, "
            f"out_dim), the same, found {tuple(points.shape)} and {tuple(centers.shape)}"
        )
    if centers.dtype != points.dtype or scores.dtype != points.dtype:
        raise TypeError(
            f"{_OP}: scores, point_features and center_features must have one dtype, found "
            f"{scores.dtype}, {points.dtype} and {centers.dtype}"
        )
    if not isinstance(knn_idx, Tensor) or knn_idx.is_floating_point() or knn_idx.is_complex():
        found = knn_idx.dtype if isinstance(knn_idx, Tensor) else type(knn_idx).__name__
        raise TypeError(f"{_OP}: knn_idx must be an integer tensor, found {found}")
    if knn_idx.shape != (b, npoint, k) or knn_idx.device != scores.device:
        raise ValueError(
            f"{_OP}: knn_idx must have shape (B, npoint, K) = {(b, npoint, k)} on scores' "
            f"device {scores.device}, found {tuple(knn_idx.shape)} on {knn_idx.device}"
        )


def _neighbours(knn_idx: Tensor, n: int) -> Tuple[Tensor, Tensor, Tensor]:
    """``(kn, cn, valid)``: in-range neighbour indices (0 where out of range) ``(B, npoint,
    K)``, center indices ``(B, npoint)``, and which neighbours are in range."""
    idx = knn_idx.long()
    valid = (idx >= 0) & (idx < n)
    if idx.shape[2] > 0 and bool((~valid[..., 0] & valid.any(-1)).any()):
        raise ValueError(
            f"{_OP}: knn_idx[..., 0] (each row's center) must lie in [0, N) = [0, {n}) where "
            "the row has a neighbour in range (mmcv's kernel reads outside center_features)"
        )
    kn = torch.where(valid, idx, torch.zeros_like(idx))
    center = kn[..., 0] if idx.shape[2] > 0 else idx.new_zeros(idx.shape[:2])
    return kn, center, valid


def _chunks(scores: Tensor, points: Tensor) -> Iterator[slice]:
    b, npoint, k, m = scores.shape
    step = max(1, _CHUNK_ELEMENTS // max(1, b * k * m * points.shape[3]))
    for start in range(0, npoint, step):
        yield slice(start, start + step)


def _gather(features: Tensor, index: Tensor) -> Tensor:
    """``features[b, index[b, ...]]``: ``(B, *index.shape[1:], M, out_dim)``."""
    batch = torch.arange(features.shape[0], device=features.device)
    return features[batch.view((-1,) + (1,) * (index.dim() - 1)), index]


class _AssignScores(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, scores: Tensor, points: Tensor, centers: Tensor, knn_idx: Tensor
    ) -> Tensor:
        kn, cn, valid = _neighbours(knn_idx, points.shape[1])
        ctx.save_for_backward(scores, points, centers, kn, cn, valid)
        b, npoint, k, _ = scores.shape
        out = scores.new_zeros((b, npoint, k, points.shape[3]))
        for part in _chunks(scores, points):
            s = scores[:, part]
            from_points = (s[..., None, :] @ _gather(points, kn[:, part]))[..., 0, :]
            from_center = s @ _gather(centers, cn[:, part])
            out[:, part] = torch.where(valid[:, part, :, None], from_points - from_center, 0.0)
        return out.permute(0, 3, 1, 2).contiguous()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> Tuple[Tensor, Tensor, Tensor, None]:
        scores, points, centers, kn, cn, valid = ctx.saved_tensors
        b, n, m, o = points.shape
        grad_scores = torch.zeros_like(scores)
        grad_points = torch.zeros((b * n, m * o), dtype=points.dtype, device=points.device)
        grad_centers = torch.zeros_like(grad_points)
        batch = torch.arange(b, device=points.device)[:, None] * n
        grad = grad_out.permute(0, 2, 3, 1)
        for part in _chunks(scores, points):
            mask, kn_part, cn_part = valid[:, part, :, None], kn[:, part], cn[:, part]
            g = torch.where(mask, grad[:, part], 0.0)
            s = torch.where(mask, scores[:, part], 0.0)
            p, c = _gather(points, kn_part), _gather(centers, cn_part)
            gs = (p @ g[..., None])[..., 0] - g @ c.transpose(-1, -2)
            grad_scores[:, part] = torch.where(mask, gs, 0.0)
            to_points = (s[..., :, None] * g[..., None, :]).reshape(kn_part.numel(), m * o)
            grad_points.index_add_(0, (batch[:, :, None] + kn_part).reshape(-1), to_points)
            to_centers = (s.transpose(-1, -2) @ g).reshape(cn_part.numel(), m * o)
            grad_centers.index_add_(0, (batch + cn_part).reshape(-1), to_centers, alpha=-1)
        return grad_scores, grad_points.view(b, n, m, o), grad_centers.view(b, n, m, o), None


def assign_score_withk(
    scores: Tensor,
    point_features: Tensor,
    center_features: Tensor,
    knn_idx: Tensor,
    aggregate: str = "sum",
) -> Tensor:
    """Weights each neighbour's weight-bank features by its scores (PAConv).

    Args:
        scores: ``(B, npoint, K, M)`` float, the scores of the ``M`` weight matrices.
        point_features: ``(B, N, M, out_dim)`` float, the points' transformed features.
        center_features: ``(B, N, M, out_dim)`` float, the centers' transformed features.
        knn_idx: ``(B, npoint, K)`` integer (int64 in mmcv), each center's neighbours in
            ``[0, N)``, its own index first; others out of range contribute 0.
        aggregate: ``'sum'``, ``'avg'`` or ``'max'``; ignored, as by mmcv's kernels.

    Returns:
        ``(B, out_dim, npoint, K)`` in the features' dtype, differentiable in ``scores``,
        ``point_features`` and ``center_features``.

    Raises:
        TypeError: non-float features or scores, different dtypes, non-integer ``knn_idx``.
        ValueError: wrong shapes, different devices, an unknown ``aggregate``, or a center
            index out of range in a row with neighbours in range.
    """
    _check(scores, point_features, center_features, knn_idx, aggregate)
    dtype = float_compute_dtype(scores.dtype)
    out = _AssignScores.apply(
        scores.to(dtype), point_features.to(dtype), center_features.to(dtype), knn_idx
    )
    return out.to(scores.dtype)
