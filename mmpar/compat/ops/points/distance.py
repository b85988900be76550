"""Squared distances between point sets as mmcv's point kernels compute them.

mmcv's kernels compute ``(cx - x) * (cx - x) + (cy - y) * (cy - y) + (cz - z) * (cz - z)``
in the inputs' dtype (``at::Half`` rounds every operation to float16). Here the same
operations run as separate torch ops, each rounded in the inputs' dtype, in that order:
equal to the kernels' values bit for bit where their compiler does not fuse a product into
the sum (mmcv's CUDA build may use fused multiply-adds, which can differ in the last bit).
NaN and inf propagate as in the kernels' arithmetic.
"""

from __future__ import annotations

from typing import Iterator, Tuple

import torch
from torch import Tensor

__all__ = [
    "CHUNK_ELEMENTS",
    "at_least",
    "float32_square",
    "pairwise_sq_dist",
    "search_chunk",
    "sq_dist_chunks",
]

#: Default bound on the elements of one ``(B, rows, N)`` block of distances.
CHUNK_ELEMENTS = 1 << 22
#: A search's block on the CPU: small enough that its passes stay in the cache.
CPU_SEARCH_ELEMENTS = 1 << 18


def search_chunk(device: torch.device) -> int:
    """The elements of a search's block of distances on ``device``: cache-sized on the
    CPU, :data:`CHUNK_ELEMENTS` elsewhere (fewer, larger kernel launches)."""
    return CPU_SEARCH_ELEMENTS if device.type == "cpu" else CHUNK_ELEMENTS


def pairwise_sq_dist(centers: Tensor, points: Tensor) -> Tensor:
    """Squared distance from every centre to every point of the same batch element.

    Args:
        centers: ``(B, M, D)`` float (``D`` coordinates, 3 for mmcv's ops).
        points: ``(B, N, D)``, the same dtype and device.

    Returns:
        ``(B, M, N)`` in the inputs' dtype: ``sum_d (centers[b, m, d] - points[b, n, d])**2``,
        each subtraction, square and addition rounded in that dtype, added over ``d`` in
        order (mmcv's kernels' expression). Differentiable through torch's autograd.
    """
    if centers.shape[2] == 0:
        return centers.new_zeros(centers.shape[0], centers.shape[1], points.shape[1])
    points_t = points.transpose(1, 2)  # (B, D, N): each coordinate a row of N
    squares = []
    for axis in range(centers.shape[2]):
        diff = centers[:, :, axis, None] - points_t[:, None, axis, :]
        squares.append(diff * diff)
    total = squares[0]
    for square in squares[1:]:
        total = total + square
    return total


def _sq_dist_inplace(centers: Tensor, points_t: Tensor) -> Tensor:
    """:func:`pairwise_sq_dist` without autograd, reusing its buffers (the search path)."""
    total = None
    for axis in range(centers.shape[2]):
        diff = torch.sub(centers[:, :, axis, None], points_t[:, None, axis, :])
        diff.mul_(diff)
        total = diff if total is None else total.add_(diff)
    if total is None:
        return centers.new_zeros(centers.shape[0], centers.shape[1], points_t.shape[2])
    return total


def chunk_rows(batch: int, rows: int, cols: int, max_elements: int) -> int:
    """How many of ``rows`` one ``(batch, chunk, cols)`` block of ``max_elements`` holds
    (at least 1)."""
    return max(1, min(max(rows, 1), max_elements // max(1, batch * cols)))


@torch.no_grad()
def sq_dist_chunks(
    centers: Tensor, points: Tensor, max_elements: int = CHUNK_ELEMENTS
) -> Iterator[Tuple[int, int, Tensor]]:
    """:func:`pairwise_sq_dist` by slices of the centres, without autograd.

    Args:
        centers: ``(B, M, D)`` float.
        points: ``(B, N, D)``, the same dtype and device.
        max_elements: The most elements one block should hold (a block holds at least
            one centre).

    Yields:
        ``(start, stop, dist)``: ``dist`` ``(B, stop - start, N)`` the squared distances
        of centres ``start:stop``, bit for bit :func:`pairwise_sq_dist`'s. Nothing when
        ``M`` is 0.
    """
    b, m, n = centers.shape[0], centers.shape[1], points.shape[1]
    step = chunk_rows(b, m, n, max_elements)
    points_t = points.transpose(1, 2).contiguous()
    for start in range(0, m, step):
        stop = min(m, start + step)
        yield start, stop, _sq_dist_inplace(centers[:, start:stop], points_t)


def float32_square(value: float) -> float:
    """``value * value`` as the kernels' ``float`` arithmetic gives it: ``value`` rounded to
    float32 (inf beyond its range), squared, rounded to float32."""
    as_float = torch.tensor(value, dtype=torch.float64).to(torch.float32)
    return float(as_float * as_float)


def at_least(value: float, dtype: torch.dtype) -> float:
    """The least number of ``dtype`` not below ``value`` (inf above its range; NaN stays).

    For ``x`` of ``dtype``, ``x < value`` exactly when ``x < at_least(value, dtype)``, and
    ``x >= value`` exactly when ``x >= at_least(value, dtype)``: a kernel's comparison of a
    float16 distance with a float radius, made in the distance's own dtype.
    """
    exact = torch.tensor(value, dtype=torch.float64)
    rounded = exact.to(dtype)
    if rounded.to(torch.float64) < exact:
        rounded = torch.nextafter(rounded, torch.tensor(float("inf"), dtype=dtype))
    return float(rounded)
