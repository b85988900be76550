"""Ball query: mmcv 1.7.2's ``mmcv.ops.ball_query`` in plain torch.

For every centre, the indices of the first ``sample_num`` points of its cloud, in index
order, whose squared distance ``d2`` passes mmcv's kernel's test: ``d2 == 0`` or
``min_radius**2 <= d2 < max_radius**2``. ``d2`` is computed as the kernel does (each
operation rounded in the inputs' dtype, see :mod:`mmpar.compat.ops.points`), the squared
radii as its ``float`` products. A centre that finds fewer points repeats the first one
found in the remaining slots; one that finds none gets 0 in every slot.

The stacked form (mmcv 1.7.0's ``xyz_batch_cnt`` and ``center_xyz_batch_cnt``, clouds
stacked row after row) is mmcv's other kernel: only ``d2 < max_radius**2`` is tested
(``min_radius`` only has to be below ``max_radius``), and a centre that finds nothing gets
-1 in its first slot and 0 in the others.

NaN/inf: as in the kernel, a point at a NaN or infinite distance from a centre (a NaN or
inf coordinate on either side) is never found, even within an infinite radius.

Differences from mmcv-full: inputs need not be contiguous; ``sample_num < 1`` (which makes
mmcv's kernel write past its output) is a ``ValueError``, and so are stacked counts that do
not add up to the stacked rows. float16 and bfloat16 distances are rounded as mmcv's
``at::Half`` arithmetic rounds (mmcv takes no bfloat16). mmcv's CUDA build may fuse the
kernel's products into its sums, which can move a point within one rounding of the radius
across it; here every operation is rounded on its own.
"""

from __future__ import annotations

import numbers
from typing import Optional, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.backend import ArgumentError, check_int
from mmpar.compat.ops.points import (
    at_least,
    first_true,
    float32_square,
    search_chunk,
    sq_dist_chunks,
)
from mmpar.compat.ops.points.checks import check_batch_cnt, check_like, check_points

__all__ = ["ball_query"]

_OP = "mmcv.ops.ball_query"


def _check_radii(min_radius: float, max_radius: float) -> Tuple[float, float]:
    """The radii as floats; a ``TypeError`` for a non-number, mmcv's assertion otherwise."""
    for name, value in (("min_radius", min_radius), ("max_radius", max_radius)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{_OP}: {name} must be a number, found {value!r}")
    if not min_radius < max_radius:
        raise ArgumentError(
            f"{_OP}: min_radius must be less than max_radius, found {min_radius!r} "
            f"and {max_radius!r}"
        )
    return float(min_radius), float(max_radius)


def _in_ball(d2: Tensor, lower: float, upper: float) -> Tensor:
    """The kernel's test ``d2 == 0 || (d2 >= min2 && d2 < max2)``, made in ``d2``'s dtype
    with ``lower`` and ``upper`` the squared radii as :func:`at_least` gives them."""
    mask = d2 < upper
    if lower > 0:
        mask &= d2 >= lower
    if not (lower <= 0 < upper):  # otherwise d2 == 0 already passes
        mask |= d2 == 0
    return mask


def _fill(index: Tensor, count: Tensor, empty: int) -> Tensor:
    """Slots past ``count`` repeat the first point found; a row with none gets ``empty``
    in its first slot and 0 in the others. int32."""
    slots = torch.arange(index.shape[-1], device=index.device)
    filled = torch.where(slots < count[..., None], index, index[..., :1])
    if empty != 0 and filled.shape[-1] > 0:
        filled[..., 0] = torch.where(count > 0, filled[..., 0], empty)
    return filled.to(torch.int32)


def _dense(
    min_radius: float, max_radius: float, sample_num: int, xyz: Tensor, centers: Tensor
) -> Tensor:
    b, m = centers.shape[0], centers.shape[1]
    idx = torch.zeros((b, m, sample_num), dtype=torch.int32, device=xyz.device)
    lower = at_least(float32_square(min_radius), xyz.dtype)
    upper = at_least(float32_square(max_radius), xyz.dtype)
    for start, stop, d2 in sq_dist_chunks(centers, xyz, search_chunk(xyz.device)):
        mask = _in_ball(d2, lower, upper).view(b * (stop - start), xyz.shape[1])
        index, count = first_true(mask, sample_num)
        idx[:, start:stop] = _fill(index, count, 0).view(b, stop - start, sample_num)
    return idx


def _stacked(
    max_radius: float,
    sample_num: int,
    xyz: Tensor,
    centers: Tensor,
    xyz_batch_cnt: Tensor,
    center_xyz_batch_cnt: Tensor,
) -> Tensor:
    point_counts = check_batch_cnt(_OP, "xyz_batch_cnt", xyz_batch_cnt, xyz.shape[0], "xyz")
    center_counts = check_batch_cnt(
        _OP, "center_xyz_batch_cnt", center_xyz_batch_cnt, centers.shape[0], "center_xyz"
    )
    if len(point_counts) != len(center_counts):
        raise ValueError(
            f"{_OP}: xyz_batch_cnt and center_xyz_batch_cnt must count the same clouds, "
            f"found {len(point_counts)} and {len(center_counts)}"
        )
    idx = torch.zeros((centers.shape[0], sample_num), dtype=torch.int32, device=xyz.device)
    upper, chunk = at_least(float32_square(max_radius), xyz.dtype), search_chunk(xyz.device)
    # The clouds are of any sizes: one search per cloud (a loop over clouds, not points).
    offset = 0
    for cloud, centre in zip(xyz.split(point_counts), centers.split(center_counts)):
        for first, stop, d2 in sq_dist_chunks(centre[None], cloud[None], chunk):
            mask = (d2 < upper)[0]
            index, count = first_true(mask, sample_num)
            idx[offset + first : offset + stop] = _fill(index, count, -1)
        offset += centre.shape[0]
    return idx


def ball_query(
    min_radius: float,
    max_radius: float,
    sample_num: int,
    xyz: Tensor,
    center_xyz: Tensor,
    xyz_batch_cnt: Optional[Tensor] = None,
    center_xyz_batch_cnt: Optional[Tensor] = None,
) -> Tensor:
    """The points of each centre's ball, the first ``sample_num`` in index order.

    Args:
        min_radius: The balls' inner radius (a point at distance 0 is always in).
        max_radius: Their outer radius (excluded); above ``min_radius``.
        sample_num: The indices per centre (>= 1).
        xyz: ``(B, N, 3)`` float, the clouds; or ``(N1 + N2 + ..., 3)`` stacked.
        center_xyz: ``(B, M, 3)`` float, the centres, same dtype and device; or
            ``(M1 + M2 + ..., 3)`` stacked.
        xyz_batch_cnt: For stacked inputs, ``(B,)`` int32: ``N1, N2, ...``.
        center_xyz_batch_cnt: For stacked inputs, ``(B,)`` int32: ``M1, M2, ...``.

    Returns:
        ``(B, M, sample_num)`` int32 indices into each cloud (stacked: ``(M1 + M2 + ...,
        sample_num)``, indices within the centre's own cloud, -1 first where none is found).

    Raises:
        TypeError: A radius that is not a number, a non-integer ``sample_num``, a
            non-float point tensor or a count tensor that is not int32.
        ValueError: ``min_radius >= max_radius`` (mmcv's assertion; an
            ``AssertionError`` too), ``sample_num < 1``, wrong shapes, or inputs of
            different dtypes, devices, batch sizes or counts.
    """
    min_radius, max_radius = _check_radii(min_radius, max_radius)
    sample_num = check_int(_OP, "sample_num", sample_num, 1)
    stacked = xyz_batch_cnt is not None or center_xyz_batch_cnt is not None
    layout = "(N, 3)" if stacked else "(B, N, 3)"
    xyz = check_points(_OP, "xyz", xyz, layout)
    center_xyz = check_points(_OP, "center_xyz", center_xyz, layout.replace("N", "M"))
    check_like(_OP, "center_xyz", center_xyz, "xyz", xyz)
    if stacked:
        if xyz_batch_cnt is None or center_xyz_batch_cnt is None:
            raise ValueError(
                f"{_OP}: xyz_batch_cnt and center_xyz_batch_cnt must be given together"
            )
        return _stacked(
            max_radius, sample_num, xyz, center_xyz, xyz_batch_cnt, center_xyz_batch_cnt
        )
    if xyz.shape[0] != center_xyz.shape[0]:
        raise ValueError(
            f"{_OP}: xyz and center_xyz must have the same batch size, "
            f"found {xyz.shape[0]} and {center_xyz.shape[0]}"
        )
    return _dense(min_radius, max_radius, sample_num, xyz, center_xyz)
