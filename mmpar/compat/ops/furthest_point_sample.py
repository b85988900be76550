"""Furthest point sampling: mmcv 1.7.2's ``mmcv.ops.furthest_point_sample`` in plain torch.

Definition (mmcv's CUDA kernel; mmcv 1.7.2 has no CPU kernel): per batch element, the
first sample is point 0; every point keeps its distance to the sampled set, starting at
``1e10``; each further step takes the distance ``d`` from the last sample to every point,
``(x - x0)**2 + (y - y0)**2 + (z - z0)**2`` in float32 (summed in that order), lowers the
kept distance to ``fminf(d, kept)`` and samples the point of the largest kept distance.
``furthest_point_sample_with_dist`` reads ``d`` from row ``last`` of a given ``(B, N, N)``
matrix instead. The loop runs over the ``num_points`` steps; every step is batched over
``B`` and ``N``. No points are skipped: the ``mag <= 1e-3`` test of older Pointnet2 kernels
is commented out in mmcv 1.7.2's, so points at the origin are sampled like any other.

Ties: the kernel gives each of its ``T = min(2**floor(log2 N), 1024)`` threads the points
``k = t, t + T, ...``, each keeping its first largest, and reduces the threads' bests in a
tree that keeps the lower slot on a tie. The winner among equal distances is therefore the
point of least ``(bitreverse(k mod T), k // T)``; here the points are put in that order once
and every step takes the first largest (``argmax``). With the kernel's strict ``>`` against
its start value ``-1``, a step whose kept distances are all ``<= -1`` (only possible with
``furthest_point_sample_with_dist`` and negative entries) samples point 0.

``num_points > N`` is well defined, as in the kernel: once every distinct point is sampled
all kept distances are 0 and the tie rule repeats point 0. ``num_points == 0`` gives
``(B, 0)``.

Non-finite values (as the kernel's ``fminf``): a NaN distance leaves a point's kept distance
as it was, an infinite or larger-than-``1e10`` one leaves it at ``1e10``; so a point with a
NaN or inf coordinate keeps ``1e10`` and is sampled first and, once it is the last sample
(every distance from it NaN), again at every later step.

Differences from mmcv-full: inputs of any floating dtype are taken (mmcv: float32 only),
all computed in float32 as the kernel; points on any device (mmcv: CUDA only). nvcc may
contract the kernel's sum into fused multiply-adds, so two distances equal here up to the
last bit may order differently there. ``N == 0`` with ``num_points > 0``, where the kernel
reads outside the points, is a ``ValueError``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from mmpar.compat.ops.backend import check_int

__all__ = ["furthest_point_sample", "furthest_point_sample_with_dist"]

# The kernel's start value of every point's distance to the sampled set.
_FAR = 1e10
# The kernel's start value of each thread's best distance; only larger ones are taken.
_BEST_START = -1.0


def _threads(n: int) -> int:
    """The kernel's block size for ``n`` points: ``2**floor(log2 n)``, at most 1024."""
    return min(1 << (n.bit_length() - 1), 1024)


def _tie_order(n: int, device: torch.device) -> Tensor:
    """``(n,)`` long: the point indices in the order the kernel's reduction prefers them."""
    threads = _threads(n)
    k = torch.arange(n, device=device)
    lane, rev = k % threads, torch.zeros_like(k)
    for bit in range(threads.bit_length() - 1):
        rev |= ((lane >> bit) & 1) << (threads.bit_length() - 2 - bit)
    return torch.argsort(rev * ((n + threads - 1) // threads) + k // threads)


def _check(op: str, name: str, value: object, shape: str, ok: Callable[[Tensor], bool]) -> Tensor:
    if not isinstance(value, Tensor) or not value.is_floating_point():
        found = value.dtype if isinstance(value, Tensor) else type(value).__name__
        raise TypeError(f"mmcv.ops.{op}: {name} must be a floating-point tensor, found {found}")
    if not ok(value):
        raise ValueError(
            f"mmcv.ops.{op}: {name} must have shape {shape}, found {tuple(value.shape)}"
        )
    return value


def _check_count(op: str, name: str, n: int, num_points: object) -> int:
    m = check_int(f"mmcv.ops.{op}", "num_points", num_points, 0)
    if n == 0 and m > 0:
        raise ValueError(
            f"mmcv.ops.{op}: num_points={m} points cannot be sampled from {name} with no points "
            "(N == 0)"
        )
    return m


@torch.no_grad()
def _sample(
    distance_from: Callable[[Tensor], Tensor], b: int, n: int, m: int, device: torch.device
) -> Tensor:
    """The kernel's loop in the tie order: ``(B, m)`` long sampled positions in that order.

    ``distance_from(last)`` gives the ``(B, n)`` float32 distances, in the tie order, from
    the positions ``last`` ``(B,)`` to every point.
    """
    kept = torch.full((b, n), _FAR, dtype=torch.float32, device=device)
    picked = torch.zeros((b, m), dtype=torch.long, device=device)
    last = torch.zeros((b,), dtype=torch.long, device=device)
    for step in range(1, m):
        torch.fmin(kept, distance_from(last), out=kept)
        last = kept.argmax(1)
        picked[:, step] = last
    return picked


def furthest_point_sample(points_xyz: Tensor, num_points: int) -> Tensor:
    """Furthest point sampling by Euclidean distance, from point 0.

    Args:
        points_xyz: ``(B, N, 3)`` float, the points.
        num_points: How many to sample (``>= 0``; once every distinct point is taken,
            point 0 repeats, so ``num_points > N`` is allowed as in mmcv).

    Returns:
        ``(B, num_points)`` int32 indices into ``N``, not differentiable.

    Raises:
        TypeError: ``points_xyz`` not a floating-point tensor, or ``num_points`` not an int.
        ValueError: a wrong shape, ``num_points < 0``, or ``num_points > 0`` with ``N == 0``.
    """
    op = "furthest_point_sample"
    points = _check(
        op, "points_xyz", points_xyz, "(B, N, 3)", lambda t: t.dim() == 3 and t.shape[2] == 3
    )
    b, n = points.shape[:2]
    m = _check_count(op, "points_xyz", n, num_points)
    device = points.device
    if b == 0 or m == 0:
        return torch.zeros((b, m), dtype=torch.int32, device=device)
    order = _tie_order(n, device)
    # (B, 3, N) in the tie order: each coordinate a contiguous row.
    xyz = points.detach().index_select(1, order).to(torch.float32).transpose(1, 2).contiguous()
    diff = torch.empty_like(xyz)
    dist = torch.empty((b, n), dtype=torch.float32, device=device)

    def distance_from(last: Tensor) -> Tensor:
        torch.sub(xyz, xyz.gather(2, last[:, None, None].expand(-1, 3, 1)), out=diff)
        diff.mul_(diff)
        torch.add(diff[:, 0], diff[:, 1], out=dist)
        return dist.add_(diff[:, 2])

    return order[_sample(distance_from, b, n, m, device)].to(torch.int32)


def furthest_point_sample_with_dist(points_dist: Tensor, num_points: int) -> Tensor:
    """Furthest point sampling by a given distance matrix, from point 0.

    Args:
        points_dist: ``(B, N, N)`` float; ``points_dist[b, i, k]`` is the distance from
            point ``i`` to point ``k`` (row ``i`` is read once ``i`` is sampled).
        num_points: How many to sample (``>= 0``).

    Returns:
        ``(B, num_points)`` int32 indices into ``N``, not differentiable.

    Raises:
        TypeError: ``points_dist`` not a floating-point tensor, or ``num_points`` not an int.
        ValueError: a wrong shape, ``num_points < 0``, or ``num_points > 0`` with ``N == 0``.
    """
    op = "furthest_point_sample_with_dist"
    dists = _check(
        op,
        "points_dist",
        points_dist,
        "(B, N, N)",
        lambda t: t.dim() == 3 and t.shape[1] == t.shape[2],
    )
    b, n = dists.shape[:2]
    m = _check_count(op, "points_dist", n, num_points)
    device = dists.device
    if b == 0 or m == 0:
        return torch.zeros((b, m), dtype=torch.int32, device=device)
    order = _tie_order(n, device)
    batch = torch.arange(b, device=device)
    dists = dists.detach()

    def distance_from(last: Tensor) -> Tensor:
        # Row order[last] in the tie order; at least -1, so that when every kept distance is
        # <= -1 (none beats the kernel's start value) the first in the tie order, 0, wins.
        row = dists[batch, order[last]].index_select(1, order).to(torch.float32)
        return row.clamp_(min=_BEST_START)

    return order[_sample(distance_from, b, n, m, device)].to(torch.int32)
