"""Greedy NMS of rotated boxes: ``nms_rotated`` of mmcv 1.7.2's ``mmcv.ops.nms``.

:mod:`mmpar.compat.ops.nms` re-exports :func:`nms_rotated`; this module is not an
mmcv module. The result is mmcv's greedy one: boxes are visited by descending
score, in the order of ``torch.sort(scores, descending=True)`` (mmcv's call, an
unstable sort: equal scores come in that call's order, as in mmcv), and a box is
dropped when its IoU (:func:`mmpar.compat.ops.box_iou_rotated.box_iou_rotated`)
with a kept box is ``>= iou_threshold`` on the CPU (mmcv's CPU kernel) or
``> iou_threshold`` elsewhere (mmcv's CUDA kernel).

It is computed without a loop over boxes:

1. candidate pairs: the boxes whose axis-aligned extents overlap, found by a sweep
   over the boxes sorted by their left edge, of which those whose IoU can reach
   the threshold (a bound from the extents' overlap);
2. their IoU, in chunks;
3. the greedy result, decided in rounds: a box whose higher-scored overlapping
   boxes are all decided is kept if none of them is kept, else dropped. The
   rounds are bounded by the longest chain of overlaps, not by the box count.

Differences from mmcv-full: no boxes give ``(dets (0, 6), keep (0,))`` where mmcv
gives ``(dets, None)``; float16/bfloat16 are computed in float32, float64 in
float64 (mmcv's CPU kernel takes float32 and float64).
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.box_iou_rotated import box_iou_rotated

__all__ = ["nms_rotated"]

# Candidate pairs generated at once by the sweep, and IoUs computed at once.
_CHUNK_PAIRS = 1 << 18
# A pair is screened out when even its bound misses the threshold by this much.
_BOUND_MARGIN = 1e-4


def _check_float(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(
            f"mmcv.ops.nms_rotated: {name} must be a torch.Tensor, got {type(value).__name__}"
        )
    if not value.is_floating_point():
        raise TypeError(f"mmcv.ops.nms_rotated: {name} must be floating point, got {value.dtype}")
    return value


def _check(dets: Tensor, scores: Tensor, labels: Optional[Tensor]) -> None:
    dets, scores = _check_float("dets", dets), _check_float("scores", scores)
    if dets.dim() != 2 or dets.shape[1] != 5:
        raise ValueError(
            "mmcv.ops.nms_rotated: dets must have shape (N, 5) (x, y, w, h, angle), "
            f"got {tuple(dets.shape)}"
        )
    n = dets.shape[0]
    if scores.shape != (n,):
        raise ValueError(
            f"mmcv.ops.nms_rotated: scores must have shape (N,) = ({n},), got {tuple(scores.shape)}"
        )
    if labels is not None and (not isinstance(labels, Tensor) or labels.shape != (n,)):
        found = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"mmcv.ops.nms_rotated: labels must have shape (N,) = ({n},), got {found}")
    if scores.device != dets.device:
        raise ValueError(
            "mmcv.ops.nms_rotated: dets and scores must be on the same device, "
            f"got {dets.device} and {scores.device}"
        )


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
            :func:`mmpar.compat.ops.box_iou_rotated.box_iou_rotated`.

    Returns:
        ``dets`` ``(K, 6)``: the kept boxes and their scores, highest score first,
        and ``keep`` ``(K,)`` long: their indices in ``dets``, on its device.

    Raises:
        TypeError, ValueError: Bad types, shapes or devices.
    """
    _check(dets, scores, labels)
    if dets.shape[0] == 0:
        keep = torch.empty(0, dtype=torch.long, device=dets.device)
    else:
        keep = _greedy_keep(dets.detach(), scores.detach(), iou_threshold, clockwise)
    return torch.cat((dets[keep], scores[keep].reshape(-1, 1)), dim=1), keep


def _greedy_keep(dets: Tensor, scores: Tensor, iou_threshold: float, clockwise: bool) -> Tensor:
    """The ``(K,)`` indices that mmcv's greedy NMS keeps, highest score first."""
    order = torch.sort(scores, 0, descending=True).indices
    boxes = dets.to(float_compute_dtype(dets.dtype)).index_select(0, order)
    # mmcv's kernels take the threshold as a C++ float.
    threshold = float(torch.tensor(float(iou_threshold), dtype=torch.float32))
    inclusive = dets.device.type == "cpu"
    n = boxes.shape[0]
    if threshold < 0 or (inclusive and threshold <= 0):
        return order[:1]  # every IoU, 0 included, passes: the first box drops the rest
    first, second = _candidate_pairs(boxes, threshold)

    def drops(a: Tensor, b: Tensor) -> Tensor:
        ious = box_iou_rotated(boxes[a], boxes[b], aligned=True, clockwise=clockwise)
        return ious >= threshold if inclusive else ious > threshold

    return order[_greedy_rounds(n, first, second, drops)]


def _candidate_pairs(boxes: Tensor, threshold: float) -> Tuple[Tensor, Tensor]:
    """Pairs ``(a, b)``, ``a < b``, of ``(N, 5)`` boxes whose IoU may reach ``threshold``.

    Every pair of IoU at least ``threshold`` is among them: the intersection of two
    boxes is at most that of their axis-aligned extents, and at most the smaller area.
    """
    half_w, half_h = boxes[:, 2].abs() / 2, boxes[:, 3].abs() / 2
    cos, sin = torch.cos(boxes[:, 4]).abs(), torch.sin(boxes[:, 4]).abs()
    # Widened a little, never too small by rounding.
    reach_x = (half_w * cos + half_h * sin) * (1 + 1e-5) + 1e-5 * boxes[:, 0].abs()
    reach_y = (half_w * sin + half_h * cos) * (1 + 1e-5) + 1e-5 * boxes[:, 1].abs()
    left, right = boxes[:, 0] - reach_x, boxes[:, 0] + reach_x
    top, bottom = boxes[:, 1] - reach_y, boxes[:, 1] + reach_y
    areas = boxes[:, 2] * boxes[:, 3]
    valid = areas >= 1e-14  # mmcv's kernel gives 0 for a smaller area
    by_left = torch.argsort(left)
    # Box by_left[s] pairs with the boxes after it whose left edge is within its extent.
    ends = torch.searchsorted(left[by_left], right[by_left], right=True)
    positions = torch.arange(boxes.shape[0], device=boxes.device)
    counts = (ends - positions - 1).clamp(min=0)
    reached = torch.cumsum(counts, 0)
    firsts, seconds = [], []
    begin = 0
    while begin < boxes.shape[0]:
        # The positions whose pairs fill about one chunk (at least one position).
        done = reached[begin] - counts[begin]
        stop = max(begin + 1, int(torch.searchsorted(reached, done + _CHUNK_PAIRS, right=True)))
        s = torch.repeat_interleave(positions[begin:stop], counts[begin:stop])
        rank = torch.arange(s.numel(), device=boxes.device) - (reached[s] - counts[s] - done)
        a, b = by_left[s], by_left[s + 1 + rank]
        begin = stop
        near = (top[a] <= bottom[b]) & (top[b] <= bottom[a]) & valid[a] & valid[b]
        a, b = a[near], b[near]
        width = torch.minimum(right[a], right[b]) - torch.maximum(left[a], left[b])
        height = torch.minimum(bottom[a], bottom[b]) - torch.maximum(top[a], top[b])
        inter = torch.minimum(width * height, torch.minimum(areas[a], areas[b]))
        bound = inter / (areas[a] + areas[b] - inter)
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
