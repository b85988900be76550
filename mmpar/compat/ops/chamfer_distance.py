"""2D Chamfer distance: mmcv 1.7.2's ``mmcv.ops.chamfer_distance`` in plain torch.

For each point of one set, the squared distance to the nearest point of the other
set of the same batch element and that point's index (the first of equally near
ones), both ways. The nearest points are searched without autograd, in chunks of
bounded memory; the distances are then ``|p - q[idx]|**2`` of the found pairs, so
the gradient is mmcv's: ``2 (p - q)`` times the incoming gradient to ``p``, its
negative to ``q``.

Differences from mmcv-full: mmcv's kernels compare a point with others in blocks
of 4 and may read past the end of a set whose size is not a multiple of 4, and its
backward swaps the two set sizes; here every set size gives the nearest points and
their gradient. Distances come in the inputs' dtype (float16/bfloat16 computed in
float32), indices as int32 as in mmcv. A set with no points leaves the other's
distances and indices 0, as mmcv's kernel does.

Non-finite points: as in mmcv's kernel (its ``d < best``, from ``best = 1e10``), a NaN or
infinite distance is never the nearest, so a point with a NaN or inf coordinate is no
point's nearest while another point is at a finite distance; a point with no finite
distance (a NaN or inf coordinate of its own, or at every point of the other set) gets
mmcv's initial search values: distance ``1e10`` and index 0, with no gradient (mmcv's
backward gives NaN to it and to that point 0). A finite distance above ``1e10`` is kept
(mmcv's kernel gives ``1e10`` and index 0 there too).
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype

__all__ = ["chamfer_distance"]

# Elements of the largest (B, chunk, M) tensor of squared distances.
_CHUNK_ELEMENTS = 1 << 22
# mmcv's kernel starts its search from this distance and index 0 (a NaN distance never
# wins its `d < best`): what a point gets when every distance from it is NaN.
_NO_NEAREST = 1e10


def _check_set(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor) or not value.is_floating_point():
        found = value.dtype if isinstance(value, Tensor) else type(value).__name__
        raise TypeError(
            f"mmcv.ops.chamfer_distance: {name} must be a floating-point tensor, got {found}"
        )
    if value.dim() != 3 or value.shape[2] != 2:
        raise ValueError(
            f"mmcv.ops.chamfer_distance: {name} must have shape (B, N, 2), got {tuple(value.shape)}"
        )
    return value


def _check(xyz1: object, xyz2: object) -> Tuple[Tensor, Tensor]:
    set1, set2 = _check_set("xyz1", xyz1), _check_set("xyz2", xyz2)
    if set1.shape[0] != set2.shape[0]:
        raise ValueError(
            "mmcv.ops.chamfer_distance: xyz1 and xyz2 must have the same batch size, "
            f"got {set1.shape[0]} and {set2.shape[0]}"
        )
    if set1.dtype != set2.dtype:
        raise TypeError(
            "mmcv.ops.chamfer_distance: xyz1 and xyz2 must have the same dtype, "
            f"got {set1.dtype} and {set2.dtype}"
        )
    if set1.device != set2.device:
        raise ValueError(
            "mmcv.ops.chamfer_distance: xyz1 and xyz2 must be on the same device, "
            f"got {set1.device} and {set2.device}"
        )
    return set1, set2


@torch.no_grad()
def _nearest(src: Tensor, dst: Tensor) -> Tuple[Tensor, Tensor]:
    """For each point of ``src`` ``(B, N, 2)``, its nearest in ``dst``, only finite distances
    taken: ``(B, N)`` long indices (0 where none), and ``(B, N)`` bool, whether one was found."""
    b, n, m = src.shape[0], src.shape[1], dst.shape[1]
    idx = torch.zeros((b, n), dtype=torch.long, device=src.device)
    found = torch.zeros((b, n), dtype=torch.bool, device=src.device)
    if m == 0:
        return idx, found
    step = max(1, _CHUNK_ELEMENTS // max(1, b * m))
    for start in range(0, n, step):
        diff = src[:, start : start + step, None, :] - dst[:, None, :, :]
        dist = diff.square().sum(-1)
        off = ~torch.isfinite(dist)
        # argmin takes the first NaN as the least; as +inf it never wins over a number.
        idx[:, start : start + step] = dist.masked_fill(off, float("inf")).argmin(-1)
        found[:, start : start + step] = ~off.all(-1)
    return idx, found


def _distance(src: Tensor, dst: Tensor, idx: Tensor, found: Tensor) -> Tensor:
    """``(B, N)`` squared distance from each point of ``src`` to ``dst[idx]``; where no
    nearest point was ``found``, mmcv's initial distance, 1e10 (no gradient)."""
    if dst.shape[1] == 0:
        return (src * 0).sum(-1)  # 0, and still a function of src for autograd
    nearest = dst.gather(1, idx[..., None].expand(-1, -1, 2))
    # Zeroed before squaring, so that no NaN gradient reaches dst[idx] from such a point.
    diff = torch.where(found[..., None], src - nearest, torch.zeros_like(src))
    dist = diff.square().sum(-1)
    return torch.where(found, dist, torch.full_like(dist, _NO_NEAREST))


def chamfer_distance(xyz1: Tensor, xyz2: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Squared nearest-neighbour distances between two batches of 2D point sets.

    Args:
        xyz1: ``(B, N, 2)`` float.
        xyz2: ``(B, M, 2)`` float, same dtype and device.

    Returns:
        ``(dist1, dist2, idx1, idx2)``: ``dist1`` ``(B, N)``, the squared distance
        from each point of ``xyz1`` to its nearest point of ``xyz2``, whose index is
        ``idx1`` ``(B, N)`` int32; ``dist2`` and ``idx2`` ``(B, M)`` the other way.
        The distances are differentiable in both sets.

    Raises:
        TypeError: An input that is not a floating-point tensor.
        ValueError: A wrong shape, or different batch sizes, dtypes or devices.
    """
    xyz1, xyz2 = _check(xyz1, xyz2)
    dtype = float_compute_dtype(xyz1.dtype)
    p, q = xyz1.to(dtype), xyz2.to(dtype)
    (idx1, found1), (idx2, found2) = _nearest(p, q), _nearest(q, p)
    dist1, dist2 = _distance(p, q, idx1, found1), _distance(q, p, idx2, found2)
    return (
        dist1.to(xyz1.dtype),
        dist2.to(xyz1.dtype),
        idx1.to(torch.int32),
        idx2.to(torch.int32),
    )
