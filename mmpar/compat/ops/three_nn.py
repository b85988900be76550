"""Three nearest neighbours: mmcv 1.7.2's ``mmcv.ops.three_nn`` in plain torch.

For every target point, the three points of the source cloud at the least squared distance,
nearest first, equal distances by ascending index (mmcv's kernel keeps a running best three
and takes a point only when strictly nearer than one of them), and their distances: the
square roots of the squared distances, which are computed as the kernel computes them (each
operation rounded in the inputs' dtype, see :mod:`mmpar.compat.ops.points`). A source of
fewer than three points leaves the kernel's start values in the last slots: index 0 and the
square root of ``1e40`` in the inputs' dtype (inf for float32 and narrower, ``1e20`` for
float64).

NaN/inf: as the kernel's ``d < best`` tests, a point at a NaN distance, or at ``1e40`` or
farther, is never taken. No gradient reaches the inputs: as mmcv's ``backward``, the
distances come out of an autograd function whose gradient is None.

Points of more than 3 values (mmdet3d's SASSD passes its ``(B, N, 4)`` points): read as
mmcv's kernel reads them, the buffer's first ``B * N * 3`` values as ``(B, N, 3)``
(:func:`~mmpar.compat.ops.points.checks.kernel_xyz`); fewer than 3 is a ``ValueError``.

Differences from mmcv-full: inputs need not be contiguous; bfloat16 works (mmcv takes
float16, float32 and float64). mmcv's CUDA build may fuse the kernel's products into its
sums, which can change the last bit of a distance; here every operation is rounded.
"""

from __future__ import annotations

from typing import Any, Tuple

import torch
from torch import Tensor
from torch.autograd import Function

from mmpar.compat.ops.points import at_least, k_smallest, search_chunk, sq_dist_chunks
from mmpar.compat.ops.points.checks import check_like, check_points, kernel_xyz

__all__ = ["three_nn"]

_OP = "mmcv.ops.three_nn"
# The kernel's starting best distance (a double): nothing this far or farther is taken.
_FAR = 1e40


def _search(target: Tensor, source: Tensor) -> Tuple[Tensor, Tensor]:
    b, n = target.shape[0], target.shape[1]
    dist2 = target.new_empty((b, n, 3))
    idx = torch.empty((b, n, 3), dtype=torch.int32, device=target.device)
    limit = at_least(_FAR, target.dtype)
    for start, stop, d2 in sq_dist_chunks(target, source, search_chunk(target.device)):
        kept, index = k_smallest(d2.flatten(0, 1), 3, limit)
        dist2[:, start:stop] = kept.view(b, stop - start, 3)
        idx[:, start:stop] = index.view(b, stop - start, 3)
    # Unfilled slots hold `limit`: 1e40 in float64, inf in the narrower dtypes, as the
    # kernel's 1e40 stored in them.
    return dist2.sqrt(), idx


class _ThreeNN(Function):
    """The search as an autograd function with no gradient, as mmcv's ``ThreeNN``."""

    @staticmethod
    def forward(ctx: Any, target: Tensor, source: Tensor) -> Tuple[Tensor, Tensor]:
        dist, idx = _search(target, source)
        ctx.mark_non_differentiable(idx)
        return dist, idx

    @staticmethod
    def backward(ctx: Any, grad_dist: Tensor, grad_idx: Tensor) -> Tuple[None, None]:
        return None, None


def three_nn(target: Tensor, source: Tensor) -> Tuple[Tensor, Tensor]:
    """The three nearest source points of each target point.

    Args:
        target: ``(B, N, 3)`` float, the points whose neighbours are searched (``(B, N, C)``
            with ``C > 3`` is read as mmcv's kernel reads it, see above).
        source: ``(B, M, 3)`` float, the points searched, same dtype and device.

    Returns:
        ``(dist, idx)``: ``dist`` ``(B, N, 3)`` in the inputs' dtype, the distances
        (square roots of the squared distances), nearest first; ``idx`` ``(B, N, 3)`` int32,
        the indices into ``source``.

    Raises:
        TypeError: A non-float input.
        ValueError: Wrong shapes, or different dtypes, devices or batch sizes.
    """
    target = kernel_xyz(_OP, "target", check_points(_OP, "target", target, "(B, N, C)"))
    source = kernel_xyz(_OP, "source", check_points(_OP, "source", source, "(B, M, C)"))
    check_like(_OP, "source", source, "target", target)
    if target.shape[0] != source.shape[0]:
        raise ValueError(
            f"{_OP}: target and source must have the same batch size, "
            f"found {target.shape[0]} and {source.shape[0]}"
        )
    return _ThreeNN.apply(target, source)
