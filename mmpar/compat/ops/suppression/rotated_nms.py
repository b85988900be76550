"""Greedy NMS of rotated boxes and quadrilaterals: ``nms_rotated`` and ``nms_quadri``.

The two of mmcv 1.7.2's ``mmcv.ops.nms``; :mod:`mmpar.compat.ops.nms` re-exports
them, and this module is not an mmcv module. The result is mmcv's greedy one: boxes
are visited by descending score, in the order of ``torch.sort(scores,
descending=True)`` (mmcv's call, an unstable sort: equal scores come in that call's
order, as in mmcv) but for NaN scores, and a box is dropped when its IoU with a kept box
(:func:`~mmpar.compat.ops.geometry.rotated_iou.box_iou_rotated`,
:func:`~mmpar.compat.ops.geometry.quadri_iou.box_iou_quadri`) is ``>= iou_threshold``
on the CPU (mmcv's CPU kernels) or ``> iou_threshold`` elsewhere (mmcv's CUDA
kernels).

It is computed without a loop over boxes:

1. candidate pairs: the boxes whose axis-aligned extents overlap (for
   quadrilaterals, the bounds of every point mmcv's intersection collects:
   :func:`~mmpar.compat.ops.geometry.quadri.quadri_reach`), found by a sweep over the boxes
   sorted by their left edge, of which those whose IoU can reach the threshold (a
   bound from the extents' overlap);
2. their IoU, in chunks;
3. the greedy result, decided in rounds: a box whose higher-scored overlapping
   boxes are all decided is kept if none of them is kept, else dropped. The
   rounds are bounded by the longest chain of overlaps, not by the box count.

Differences from mmcv-full: a NaN score comes after every other score (``-inf``
included), so a box of NaN score never suppresses another box, and comes last among the
kept ones (mmcv's sort puts NaN first, and a NaN-scored box suppresses its finite
neighbours). No boxes give ``(dets (0, 6 or 9), keep (0,))`` where
mmcv gives ``(dets, None)``; float16/bfloat16 are computed in float32, float64 in
float64 (mmcv's CPU kernels take float32 and float64).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.geometry.quadri import quadri_area, quadri_reach
from mmpar.compat.ops.geometry.quadri_iou import box_iou_quadri
from mmpar.compat.ops.geometry.rotated_iou import box_iou_rotated
from mmpar.compat.ops.suppression.nms_args import real_number
from mmpar.compat.ops.suppression.soft_nms_kernel import ranking

__all__ = ["nms_quadri", "nms_rotated"]

# Candidate pairs generated at once by the sweep, and IoUs computed at once.
_CHUNK_PAIRS = 1 << 18
# A pair is screened out when even its bound misses the threshold by this much.
_BOUND_MARGIN = 1e-4
# mmcv's kernels give an IoU of 0 where an area is below this.
_MIN_AREA = 1e-14


class _Extents(NamedTuple):
    """Axis-aligned extents of ``(N,)`` boxes, their areas, and how an IoU is bounded.

    ``capped``: the intersection is at most the smaller area (rotated boxes; not
    mmcv's quadrilaterals, whose intersection can exceed it).
    """

    left: Tensor
    right: Tensor
    top: Tensor
    bottom: Tensor
    areas: Tensor
    valid: Tensor
    capped: bool


def _check_float(op: str, name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"mmcv.ops.{op}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"mmcv.ops.{op}: {name} must be floating point, got {value.dtype}")
    return value


def _check(
    op: str, width: int, layout: str, dets: Tensor, scores: Tensor, labels: Optional[Tensor]
) -> None:
    dets, scores = _check_float(op, "dets", dets), _check_float(op, "scores", scores)
    if dets.dim() != 2 or dets.shape[1] != width:
        raise ValueError(
            f"mmcv.ops.{op}: dets must have shape (N, {width}) {layout}, got {tuple(dets.shape)}"
        )
    n = dets.shape[0]
    if scores.shape != (n,):
        raise ValueError(
            f"mmcv.ops.{op}: scores must have shape (N,) = ({n},), got {tuple(scores.shape)}"
        )
    if labels is not None and (not isinstance(labels, Tensor) or labels.shape != (n,)):
        found = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"mmcv.ops.{op}: labels must have shape (N,) = ({n},), got {found}")
    if scores.device != dets.device:
        raise ValueError(
            f"mmcv.ops.{op}: dets and scores must be on the same device, "
            f"got {dets.device} and {scores.device}"
        )


def _iou_threshold(op: str, iou_threshold: object) -> float:
    """``iou_threshold`` as a float: a real number, not NaN (one outside ``[0, 1]`` is mmcv's)."""
    threshold = real_number(op, "iou_threshold", iou_threshold)
    if math.isnan(threshold):
        raise ValueError(f"mmcv.ops.{op}: iou_threshold must be a number, got nan")
    return threshold


def nms_rotated(
    dets: Tensor,
    scores: Tensor,
    iou_threshold: float,
    labels: Optional[Tensor] = None,
    clockwise: bool = True,
) -> Tuple[Tensor, Tensor]:
    """Greedy non-maximum suppression of rotated boxes.

    Args:
        dets: ``(N, 5)`` float, ``(x_ctr, y_ctr, w, h, angle)``, the angle in radians.
        scores: ``(N,)`` float, on the device of ``dets``.
        iou_threshold: IoU from which (CPU: ``>=``; other devices: ``>``) a
            lower-scored box is dropped.
        labels: ``(N,)`` or None. As in mmcv 1.7.2 (its CPU and CUDA kernels, and its
            test ``test_ml_nms_rotated``), labels do not keep classes apart: the
            result is the same as without them. For NMS per class use
            ``batched_nms(..., dict(type='nms_rotated', ...))``.
        clockwise: The angle's direction; see
            :func:`mmpar.compat.ops.geometry.rotated_iou.box_iou_rotated`.

    Returns:
        ``dets`` ``(K, 6)``: the kept boxes and their scores, highest score first,
        and ``keep`` ``(K,)`` long: their indices in ``dets``, on its device.

    Raises:
        TypeError, ValueError: Bad types, shapes or devices, or a NaN ``iou_threshold``.
    """
    _check("nms_rotated", 5, "(x, y, w, h, angle)", dets, scores, labels)
    iou_threshold = _iou_threshold("nms_rotated", iou_threshold)

    def ious(a: Tensor, b: Tensor) -> Tensor:
        return box_iou_rotated(a, b, aligned=True, clockwise=clockwise)

    keep = _greedy_keep(dets.detach(), scores.detach(), iou_threshold, _rotated_extents, ious)
    return torch.cat((dets[keep], scores[keep].reshape(-1, 1)), dim=1), keep


def nms_quadri(
    dets: Tensor, scores: Tensor, iou_threshold: float, labels: Optional[Tensor] = None
) -> Tuple[Tensor, Tensor]:
    """Greedy non-maximum suppression of quadrilaterals.

    Args:
        dets: ``(N, 8)`` float, ``(x1, y1, ..., x4, y4)``: the vertices in order, as
            :func:`~mmpar.compat.ops.geometry.quadri_iou.box_iou_quadri` takes them.
        scores: ``(N,)`` float, on the device of ``dets``.
        iou_threshold: IoU from which (CPU: ``>=``; other devices: ``>``) a
            lower-scored box is dropped.
        labels: ``(N,)`` or None. As in mmcv 1.7.2 (its CPU and CUDA kernels, and its
            test ``test_ml_nms_quadri``), labels do not keep classes apart: the
            result is the same as without them. For NMS per class use
            ``batched_nms(..., dict(type='nms_quadri', ...))``.

    Returns:
        ``dets`` ``(K, 9)``: the kept boxes and their scores, highest score first,
        and ``keep`` ``(K,)`` long: their indices in ``dets``, on its device.

    Raises:
        TypeError, ValueError: Bad types, shapes or devices, or a NaN ``iou_threshold``.
    """
    _check("nms_quadri", 8, "(x1, y1, ..., x4, y4)", dets, scores, labels)
    iou_threshold = _iou_threshold("nms_quadri", iou_threshold)

    def ious(a: Tensor, b: Tensor) -> Tensor:
        return box_iou_quadri(a, b, aligned=True)

    keep = _greedy_keep(dets.detach(), scores.detach(), iou_threshold, _quadri_extents, ious)
    return torch.cat((dets[keep], scores[keep].reshape(-1, 1)), dim=1), keep


def _greedy_keep(
    dets: Tensor,
    scores: Tensor,
    iou_threshold: float,
    extents: Callable[[Tensor], _Extents],
    ious: Callable[[Tensor, Tensor], Tensor],
) -> Tensor:
    """The ``(K,)`` indices that mmcv's greedy NMS keeps, highest score first.

    Args:
        dets: ``(N, D)`` boxes.
        scores: ``(N,)``.
        iou_threshold: As the ops take it.
        extents: ``(N, D)`` boxes -> their :class:`_Extents`.
        ious: ``(k, D)``, ``(k, D)`` boxes -> the ``(k,)`` IoUs of the aligned pairs.
    """
    if dets.shape[0] == 0:
        return torch.empty(0, dtype=torch.long, device=dets.device)
    order = _score_order(scores)
    boxes = dets.to(float_compute_dtype(dets.dtype)).index_select(0, order)
    # mmcv's kernels take the threshold as a C++ float.
    threshold = float(torch.tensor(float(iou_threshold), dtype=torch.float32))
    inclusive = dets.device.type == "cpu"
    n = boxes.shape[0]

    def drops(a: Tensor, b: Tensor) -> Tensor:
        overlap = ious(boxes[a], boxes[b])
        return overlap >= threshold if inclusive else overlap > threshold

    if threshold < 0 or (inclusive and threshold <= 0):
        return order[_every_pair_may_drop(n, drops, order.device)]
    first, second = _candidate_pairs(extents(boxes), threshold)
    return order[_greedy_rounds(n, first, second, drops)]


def _score_order(scores: Tensor) -> Tensor:
    """``(N,)`` indices by descending score: mmcv's ``torch.sort`` call, NaN scores last.

    NaN ranks as ``-inf`` in mmcv's sort
    (:func:`~mmpar.compat.ops.suppression.soft_nms_kernel.ranking`),
    then a stable sort moves it behind every other score, ``-inf`` included; on the device,
    without a sync.
    """
    order = torch.sort(ranking(scores), 0, descending=True).indices
    is_nan = torch.isnan(scores.index_select(0, order)).to(torch.uint8)
    return order.index_select(0, torch.sort(is_nan, stable=True).indices)


def _every_pair_may_drop(
    n: int, drops: Callable[[Tensor, Tensor], Tensor], device: torch.device
) -> Tensor:
    """:func:`_greedy_rounds` where an IoU of 0 reaches the threshold.

    The first box is kept and drops every box but those it does not (an IoU below
    the threshold: NaN, or a negative IoU of mmcv's quadrilaterals); of those few,
    every pair is a candidate.
    """
    rest = torch.arange(1, n, device=device)
    rest = rest[~drops(torch.zeros_like(rest), rest)]
    survivors = torch.cat((rest.new_zeros(1), rest))
    m = survivors.numel()
    first, second = torch.triu_indices(m, m, 1, device=survivors.device)

    def survivor_drops(a: Tensor, b: Tensor) -> Tensor:
        return drops(survivors[a], survivors[b])

    return survivors[_greedy_rounds(m, first, second, survivor_drops)]


def _rotated_extents(boxes: Tensor) -> _Extents:
    """The :class:`_Extents` of ``(N, 5)`` rotated boxes."""
    half_w, half_h = boxes[:, 2].abs() / 2, boxes[:, 3].abs() / 2
    cos, sin = torch.cos(boxes[:, 4]).abs(), torch.sin(boxes[:, 4]).abs()
    # Widened a little, never too small by rounding.
    reach_x = (half_w * cos + half_h * sin) * (1 + 1e-5) + 1e-5 * boxes[:, 0].abs()
    reach_y = (half_w * sin + half_h * cos) * (1 + 1e-5) + 1e-5 * boxes[:, 1].abs()
    areas = boxes[:, 2] * boxes[:, 3]
    return _Extents(
        boxes[:, 0] - reach_x,
        boxes[:, 0] + reach_x,
        boxes[:, 1] - reach_y,
        boxes[:, 1] + reach_y,
        areas,
        areas >= _MIN_AREA,
        capped=True,
    )


def _quadri_extents(boxes: Tensor) -> _Extents:
    """The :class:`_Extents` of ``(N, 8)`` quadrilaterals, in float64."""
    quads = boxes.reshape(-1, 4, 2).to(torch.float64)
    left, top, right, bottom = quadri_reach(quads)
    areas = quadri_area(quads)
    return _Extents(left, right, top, bottom, areas, areas >= _MIN_AREA, capped=False)


def _candidate_pairs(extents: _Extents, threshold: float) -> Tuple[Tensor, Tensor]:
    """Pairs ``(a, b)``, ``a < b``, of ``N`` boxes whose IoU may reach ``threshold``.

    Every pair of IoU at least ``threshold`` is among them: the intersection of two
    boxes is at most that of their extents (and, when ``capped``, the smaller area).
    """
    left, right, top, bottom = extents.left, extents.right, extents.top, extents.bottom
    areas, valid = extents.areas, extents.valid
    n = left.shape[0]
    by_left = torch.argsort(left)
    # Box by_left[s] pairs with the boxes after it whose left edge is within its extent.
    ends = torch.searchsorted(left[by_left], right[by_left], right=True)
    positions = torch.arange(n, device=left.device)
    counts = (ends - positions - 1).clamp(min=0)
    reached = torch.cumsum(counts, 0)
    firsts, seconds = [], []
    begin = 0
    while begin < n:
        # The positions whose pairs fill about one chunk (at least one position).
        done = reached[begin] - counts[begin]
        stop = max(begin + 1, int(torch.searchsorted(reached, done + _CHUNK_PAIRS, right=True)))
        s = torch.repeat_interleave(positions[begin:stop], counts[begin:stop])
        rank = torch.arange(s.numel(), device=left.device) - (reached[s] - counts[s] - done)
        a, b = by_left[s], by_left[s + 1 + rank]
        begin = stop
        near = (top[a] <= bottom[b]) & (top[b] <= bottom[a]) & valid[a] & valid[b]
        a, b = a[near], b[near]
        width = torch.minimum(right[a], right[b]) - torch.maximum(left[a], left[b])
        height = torch.minimum(bottom[a], bottom[b]) - torch.maximum(top[a], top[b])
        inter = width * height
        if extents.capped:
            inter = torch.minimum(inter, torch.minimum(areas[a], areas[b]))
        union = areas[a] + areas[b] - inter
        bound = inter / union
        if not extents.capped:  # an intersection near the areas' sum: any IoU
            bound = torch.where(union > 0, bound, torch.inf)
        near = bound >= threshold - _BOUND_MARGIN
        a, b = a[near], b[near]
        firsts.append(torch.minimum(a, b))
        seconds.append(torch.maximum(a, b))
    return torch.cat(firsts), torch.cat(seconds)


def _greedy_rounds(
    n: int, first: Tensor, second: Tensor, drops: Callable[[Tensor, Tensor], Tensor]
) -> Tensor:
    """The boxes (positions ``0..n-1`` in visiting order) that greedy NMS keeps.

    Sequential greedy keeps a box iff no kept earlier box drops it. Each round keeps
    every undecided box that no undecided earlier box may drop, then asks ``drops``
    about the pairs of the boxes just kept; so the earliest undecided box is decided
    in every round, and only the pairs of kept boxes are ever evaluated.

    Args:
        n: The number of boxes.
        first: ``(E,)`` long, with ``second`` the candidate pairs, ``first < second``:
            the only pairs where the earlier box may drop the later one.
        second: ``(E,)`` long.
        drops: ``(a, b) -> (k,)`` bool: whether kept box ``a[i]`` drops box ``b[i]``.

    Returns:
        ``(K,)`` long positions, ascending.
    """
    kept, dropped = 1, 2
    state = torch.zeros(n, dtype=torch.int8, device=first.device)  # 0: undecided
    while True:
        open_ = state == 0
        if not bool(open_.any()):
            break
        # The pairs of kept boxes were evaluated when they were kept: a pair left
        # here matters while its later box is undecided and its earlier one not dropped.
        live = open_[second] & (state[first] != dropped)
        first, second = first[live], second[live]
        waiting = torch.zeros_like(open_)
        waiting[second] = True
        state[open_ & ~waiting] = kept
        now = state[first] == kept
        hit = drops(first[now], second[now])
        state[second[now][hit]] = dropped
        first, second = first[~now], second[~now]
    return torch.nonzero(state == kept).view(-1)
