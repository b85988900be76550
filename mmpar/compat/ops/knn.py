"""k nearest neighbours: mmcv 1.7.2's ``mmcv.ops.knn`` in plain torch.

For every centre, the indices of the ``k`` points of its cloud at the least squared
distance, nearest first. Distances are computed as mmcv's kernel computes them (each
operation rounded in the inputs' dtype, see :mod:`mmpar.compat.ops.points`). Its heap
starts from ``k`` slots at distance ``1e10`` with index 0 and takes a point only when
strictly nearer than the farthest kept: a cloud of fewer than ``k`` points (below ``1e10``)
leaves index 0 in the last slots. No gradient (the indices are integers).

NaN/inf: as in the kernel, a point at a NaN or infinite distance, or at ``1e10`` or farther,
is never taken.

Equal distances: ascending index. mmcv's kernel returns equal distances in the order its
heap leaves them, which depends on the order the points arrived in and on the heap's shape
(with distances ``1, 1, 0`` and ``k = 2`` it returns ``2, 1``, with ``1, 1`` it returns
``1, 0``): no rule on the values alone gives it. Here, among equal distances, lower indices
come first and are the ones kept at the ``k``-th place; mmcv's own test (distinct
distances) is unaffected.

Points of more than 3 values (mmdet3d's DGCNN passes ``(B, N, C)`` features to ``knn``
for its F-KNN graph layers): mmcv's kernel reads point ``i`` of cloud ``b`` at offset
``(b * N + i) * 3`` of the contiguous buffer, so it searches the buffer's first ``B * N * 3``
values read as ``(B, N, 3)`` points, not the C-dimensional features; here too, so that
models trained with mmcv-full see the same neighbours. Fewer than 3 values is a
``ValueError`` (mmcv reads past the buffer).

Differences from mmcv-full: float16, bfloat16 and float64 inputs work (mmcv's launcher
writes its float32 distance buffer as the inputs' dtype and fails for them); inputs need
not be contiguous; ``k`` outside ``1..99`` is a ``ValueError`` that is also an
``AssertionError`` (mmcv asserts ``0 < k < 100``).
"""

from __future__ import annotations

import sys
from typing import Optional

import torch
from torch import Tensor

from mmpar.compat.ops.backend import ArgumentError, check_int
from mmpar.compat.ops.points import at_least, k_smallest, search_chunk, sq_dist_chunks
from mmpar.compat.ops.points.checks import check_like, check_points, kernel_xyz

__all__ = ["knn"]

_OP = "mmcv.ops.knn"
# mmcv's kernel keeps at most 99 neighbours (a 100-slot array; it asserts k < 100).
_MAX_K = 99
# Its heap's starting distance: nothing this far or farther is taken.
_FAR = 1e10


def _as_rows(name: str, value: object, transposed: bool) -> Tensor:
    """``value`` checked, as the ``(B, N, 3)`` points mmcv's kernel reads from it."""
    points = check_points(_OP, name, value, "(B, C, N)" if transposed else "(B, N, C)")
    return kernel_xyz(_OP, name, points.transpose(1, 2) if transposed else points)


def _check_k(k: int) -> int:
    k = check_int(_OP, "k", k, -sys.maxsize)
    if not 1 <= k <= _MAX_K:
        raise ArgumentError(f"{_OP}: k must be in [1, {_MAX_K}] (mmcv's 0 < k < 100), found {k}")
    return k


@torch.no_grad()
def knn(
    k: int, xyz: Tensor, center_xyz: Optional[Tensor] = None, transposed: bool = False
) -> Tensor:
    """The ``k`` nearest points of each centre, nearest first.

    Args:
        k: The neighbours per centre, 1 to 99.
        xyz: ``(B, N, 3)`` float, the clouds (``(B, 3, N)`` if ``transposed``); more than 3
            values per point are read as mmcv reads them (see the module docstring).
        center_xyz: ``(B, npoint, 3)`` float, the centres (``(B, 3, npoint)`` if
            ``transposed``), same dtype and device; None: ``xyz``.
        transposed: Whether the inputs are ``(B, 3, N)``.

    Returns:
        ``(B, k, npoint)`` int32 indices into each cloud.

    Raises:
        TypeError: A non-integer ``k`` or a non-float point tensor.
        ValueError: ``k`` outside 1..99 (an ``AssertionError`` too), wrong shapes, or
            inputs of different dtypes, devices or batch sizes.
    """
    k = _check_k(k)
    points = _as_rows("xyz", xyz, transposed)
    centers = points if center_xyz is None else _as_rows("center_xyz", center_xyz, transposed)
    check_like(_OP, "center_xyz", centers, "xyz", points)
    if centers.shape[0] != points.shape[0]:
        raise ValueError(
            f"{_OP}: xyz and center_xyz must have the same batch size, "
            f"found {points.shape[0]} and {centers.shape[0]}"
        )
    b, m = centers.shape[0], centers.shape[1]
    idx = torch.zeros((b, k, m), dtype=torch.int32, device=points.device)
    limit = at_least(_FAR, points.dtype)
    for start, stop, d2 in sq_dist_chunks(centers, points, search_chunk(points.device)):
        _, index = k_smallest(d2.flatten(0, 1), k, limit)
        idx[:, :, start:stop] = index.view(b, stop - start, k).transpose(1, 2)
    return idx
