"""Quadrilateral overlaps: mmcv 1.7.2's ``mmcv.ops.box_iou_quadri`` in plain torch.

Follows mmcv's kernel (``single_box_iou_quadri``): each pair is centred on the mean
of its 8 vertices; a pair where either area is below ``1e-14`` gives 0; otherwise
``iou = inter / (area1 + area2 - inter)`` and ``iof = inter / area1``, without an
epsilon or a clamp. The areas and the intersection are mmcv's
(:mod:`~mmpar.compat.ops.geometry.quadri`): the vertices are taken in the order given, and
the intersection is exact for rectangles but not for other quadrilaterals, as in
mmcv (whose own test expects it).

Differences from mmcv-full: mmcv's CPU kernel takes float32 only; here float64
runs in float64 and float16/bfloat16 in float32, returned in the input's dtype.
The intersection is the area of the convex hull of mmcv's points; mmcv's Graham
scan, whose angle sort takes cross products below ``1e-6`` as collinear, can give
another area for quadrilaterals of sides about ``1e-3`` and less. The result is
differentiable (mmcv's has no backward). Pairs that cannot collect any point
(:func:`~mmpar.compat.ops.geometry.quadri.quadri_reach`) are 0 without computing them; the
others are computed in chunks (:mod:`~mmpar.compat.ops.geometry.pairwise`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.geometry.pairwise import BoxKind, pairwise_overlaps
from mmpar.compat.ops.geometry.quadri import quadri_area, quadri_intersection_area, quadri_reach

__all__ = ["box_iou_quadri"]

# Pairs per chunk: bounds the memory of the hulls' intermediates (~100 MB).
_CHUNK_PAIRS = 1 << 15
# mmcv's kernel gives 0 for a pair where either area is below this.
_MIN_AREA = 1e-14


def box_iou_quadri(
    bboxes1: Tensor, bboxes2: Tensor, mode: str = "iou", aligned: bool = False
) -> Tensor:
    """Overlaps of quadrilaterals: IoU, or intersection over the first one's area.

    Args:
        bboxes1: ``(n, 8)`` float, ``(x1, y1, ..., x4, y4)``, the vertices in order
            around the quadrilateral (either way round); or empty (``n == 0``).
        bboxes2: ``(m, 8)`` float, same layout and dtype; or empty. With
            ``aligned``, ``m == n``.
        mode: ``"iou"`` (intersection over union) or ``"iof"`` (intersection over
            the area of the quadrilateral from ``bboxes1``).
        aligned: Overlap of each pair ``(bboxes1[i], bboxes2[i])`` instead of every
            pair.

    Returns:
        ``(n, m)`` overlaps, or ``(n,)`` with ``aligned``, in ``bboxes1``'s dtype.

    Raises:
        TypeError: A box set is not a floating-point tensor, or the dtypes differ.
        ValueError: A bad shape or ``mode``, or different devices.
    """
    kind = BoxKind(
        "box_iou_quadri",
        8,
        "(x1, y1, ..., x4, y4)",
        _may_overlap,
        quadri_pair_overlaps,
        _CHUNK_PAIRS,
    )
    return pairwise_overlaps(kind, bboxes1, bboxes2, mode, aligned)


def _may_overlap(b1: Tensor, b2: Tensor) -> Tensor:
    """Whether quadrilaterals ``b1`` and ``b2`` (broadcasting ``(..., 8)``) may overlap.

    False where their reaches are apart (no point is collected) or where mmcv's
    kernel gives 0 for an area.
    """
    reach1 = _reach_and_valid(b1)
    reach2 = _reach_and_valid(b2)
    left1, top1, right1, bottom1, valid1 = reach1
    left2, top2, right2, bottom2, valid2 = reach2
    return (
        (left1 <= right2)
        & (left2 <= right1)
        & (top1 <= bottom2)
        & (top2 <= bottom1)
        & valid1
        & valid2
    )


def _reach_and_valid(boxes: Tensor) -> tuple:
    """:func:`~mmpar.compat.ops.geometry.quadri.quadri_reach` of ``(..., 8)`` boxes, and whether
    each area (in float64) is at least mmcv's minimum, each ``(...)``."""
    quads = boxes.reshape(-1, 4, 2).to(torch.float64)
    left, top, right, bottom = quadri_reach(quads)
    valid = quadri_area(quads) >= _MIN_AREA
    shape = boxes.shape[:-1]
    return tuple(t.reshape(shape) for t in (left, top, right, bottom, valid))


def quadri_pair_overlaps(b1: Tensor, b2: Tensor, iof: bool) -> Tensor:
    """``(k,)`` mmcv's IoU (or IoF) of the pairs ``(b1[i], b2[i])`` of ``(k, 8)`` boxes."""
    p, q = b1.reshape(-1, 4, 2), b2.reshape(-1, 4, 2)
    # Centred on the pair, as mmcv's kernel does: the vertices keep their precision.
    shift = (p.sum(1) + q.sum(1))[:, None] / 8
    p, q = p - shift, q - shift
    area1, area2 = quadri_area(p), quadri_area(q)
    valid = (area1 >= _MIN_AREA) & (area2 >= _MIN_AREA)
    inter = quadri_intersection_area(p, q)
    out = inter / (area1 if iof else area1 + area2 - inter)
    return torch.where(valid, out, 0.0)
