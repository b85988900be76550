"""The 2D box entry points of ``mmcv._ext``: NMS (plain, soft, matched, rotated,
quadrilateral) and box overlaps, on :mod:`mmpar.compat.ops.nms`,
:mod:`mmpar.compat.ops.bbox`, :mod:`mmpar.compat.ops.box_iou_rotated` and
:mod:`mmpar.compat.ops.box_iou_quadri`.

Signatures are mmcv-full 1.7.2's pybind ones. ``nms``, ``softnms``, ``nms_rotated``
and ``nms_quadri`` return indices; ``softnms`` also writes the rescored boxes into
``dets``; ``nms_match`` returns lists of indices; ``bbox_overlaps``,
``box_iou_rotated`` and ``box_iou_quadri`` write into ``ious``.
NaN/inf: as mmpar's ops. Differences from mmcv-full: ``softnms`` and ``nms_match`` run
on any device (mmcv's: CPU only); ``offset=1`` is refused where ``mmcv.ops`` refuses it.
"""

from __future__ import annotations

from typing import Callable, Dict, List

from torch import Tensor

from mmpar.compat.mmcv_ext.calls import where, write
from mmpar.compat.ops.bbox import bbox_overlaps as _bbox_overlaps
from mmpar.compat.ops.box_iou_quadri import box_iou_quadri as _box_iou_quadri
from mmpar.compat.ops.box_iou_rotated import box_iou_rotated as _box_iou_rotated
from mmpar.compat.ops.nms import nms as _nms
from mmpar.compat.ops.nms import nms_match as _nms_match
from mmpar.compat.ops.nms import nms_quadri as _nms_quadri
from mmpar.compat.ops.nms import nms_rotated as _nms_rotated
from mmpar.compat.ops.nms import soft_nms

__all__ = [
    "ENTRY_POINTS",
    "bbox_overlaps",
    "box_iou_quadri",
    "box_iou_rotated",
    "nms",
    "nms_match",
    "nms_quadri",
    "nms_rotated",
    "softnms",
]

# mmcv's soft_nms passes its method as this number.
_SOFT_METHODS = {0: "naive", 1: "linear", 2: "gaussian"}
_MODES = {0: "iou", 1: "iof"}


def _mode(function: str, name: str, flag: int) -> str:
    if flag not in _MODES:
        raise ValueError(f"{where(function)}: {name} must be 0 or 1, got {flag!r}")
    return _MODES[flag]


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float, offset: int) -> Tensor:
    """Greedy NMS: the kept boxes' indices, highest score first (mmcv's ``nms`` entry point).

    Args:
        boxes: ``(N, 4)`` float, ``x1, y1, x2, y2``.
        scores: ``(N,)`` float.
        iou_threshold: IoU above which the lower-scored box is dropped.
        offset: 0 (mmcv's ``offset=1`` is refused, as by ``mmcv.ops.nms``).

    Returns:
        ``(K,)`` long indices into ``boxes``.
    """
    return _nms(boxes, scores, iou_threshold, offset)[1]


def box_iou_rotated(
    boxes1: Tensor, boxes2: Tensor, ious: Tensor, mode_flag: int, aligned: bool
) -> None:
    """Rotated-box IoU (``mode_flag`` 0) or IoF (1), written into ``ious``.

    Args:
        boxes1: ``(N, 5)`` ``(cx, cy, w, h, angle)``.
        boxes2: ``(M, 5)``.
        ious: ``(N * M,)``, or ``(N,)`` when ``aligned``: receives the overlaps.
        mode_flag: 0 for IoU, 1 for IoF.
        aligned: Overlaps of the pairs ``(boxes1[i], boxes2[i])`` only.
    """
    if mode_flag not in (0, 1):
        raise ValueError(f"{where('box_iou_rotated')}: mode_flag must be 0 or 1, got {mode_flag!r}")
    mode = "iou" if mode_flag == 0 else "iof"
    found = _box_iou_rotated(boxes1, boxes2, mode=mode, aligned=bool(aligned))
    ious.copy_(found.reshape(ious.shape))


def softnms(
    boxes: Tensor,
    scores: Tensor,
    dets: Tensor,
    iou_threshold: float,
    sigma: float,
    min_score: float,
    method: int,
    offset: int,
) -> Tensor:
    """Soft-NMS: the kept boxes' indices, in the order taken; their rows into ``dets``.

    Args:
        boxes: ``(N, 4)`` float, ``x1, y1, x2, y2``.
        scores: ``(N,)`` float.
        dets: ``(N, 5)``: rows ``:K`` receive the kept boxes and their new scores.
        iou_threshold: As :func:`mmpar.compat.ops.nms.soft_nms`'s.
        sigma: As there.
        min_score: As there.
        method: 0 naive, 1 linear, 2 gaussian (mmcv's numbering).
        offset: 0 or 1, as there.

    Returns:
        ``(K,)`` long indices into ``boxes``.
    """
    if method not in _SOFT_METHODS:
        raise ValueError(f"{where('softnms')}: method must be 0, 1 or 2, got {method!r}")
    kept, inds = soft_nms(
        boxes, scores, iou_threshold, sigma, min_score, _SOFT_METHODS[method], offset
    )
    write("softnms", "dets", dets[: kept.shape[0]], kept)
    return inds


def nms_match(dets: Tensor, iou_threshold: float) -> List[List[int]]:
    """Group boxes by greedy NMS: each group, its kept box first, as lists of indices.

    Args:
        dets: ``(N, 5)`` float, ``x1, y1, x2, y2, score``.
        iou_threshold: IoU above which a box joins a kept box's group.

    Returns:
        One list of indices into ``dets`` per kept box.
    """
    return [group.tolist() for group in _nms_match(dets, iou_threshold)]


def nms_rotated(
    dets: Tensor,
    scores: Tensor,
    order: Tensor,
    dets_sorted: Tensor,
    labels: Tensor,
    iou_threshold: float,
    multi_label: int,
) -> Tensor:
    """Greedy NMS of clockwise rotated boxes: the kept indices, highest score first.

    Args:
        dets: ``(N, 5)`` float ``(cx, cy, w, h, angle)``, or ``(N, 6)`` with a label last
            when ``multi_label`` (mmcv's wrapper appends it); only the first 5 are read.
        scores: ``(N,)`` float.
        order: The caller's descending score order; the order is taken from ``scores``.
        dets_sorted: ``dets[order]``; not read.
        labels: ``(N,)``, or empty without ``multi_label``; as in mmcv 1.7.2, labels
            do not keep classes apart.
        iou_threshold: IoU from which a lower-scored box is dropped.
        multi_label: Whether ``labels`` were given.

    Returns:
        ``(K,)`` long indices into ``dets``.
    """
    del order, dets_sorted
    labels = labels if multi_label else None
    return _nms_rotated(dets[:, :5], scores, iou_threshold, labels=labels, clockwise=True)[1]


def nms_quadri(
    dets: Tensor,
    scores: Tensor,
    order: Tensor,
    dets_sorted: Tensor,
    iou_threshold: float,
    multi_label: int,
) -> Tensor:
    """Greedy NMS of quadrilaterals: the kept indices, highest score first.

    Args:
        dets: ``(N, 8)`` float ``(x1, y1, ..., x4, y4)``, or ``(N, 9)`` with a label last
            when ``multi_label``; as in mmcv 1.7.2, labels do not keep classes apart.
        scores: ``(N,)`` float.
        order: The caller's descending score order; the order is taken from ``scores``.
        dets_sorted: ``dets[order]``; not read.
        iou_threshold: IoU from which a lower-scored box is dropped.
        multi_label: Whether ``dets`` carries labels.

    Returns:
        ``(K,)`` long indices into ``dets``.
    """
    del order, dets_sorted
    labels = dets[:, 8] if multi_label else None
    return _nms_quadri(dets[:, :8], scores, iou_threshold, labels=labels)[1]


def box_iou_quadri(
    boxes1: Tensor, boxes2: Tensor, ious: Tensor, mode_flag: int, aligned: bool
) -> None:
    """Quadrilateral IoU (``mode_flag`` 0) or IoF (1), written into ``ious``.

    Args:
        boxes1: ``(N, 8)`` ``(x1, y1, ..., x4, y4)``.
        boxes2: ``(M, 8)``.
        ious: ``(N * M,)``, or ``(N,)`` when ``aligned``: receives the overlaps.
        mode_flag: 0 for IoU, 1 for IoF.
        aligned: Overlaps of the pairs ``(boxes1[i], boxes2[i])`` only.
    """
    mode = _mode("box_iou_quadri", "mode_flag", mode_flag)
    write("box_iou_quadri", "ious", ious, _box_iou_quadri(boxes1, boxes2, mode, bool(aligned)))


def bbox_overlaps(
    bboxes1: Tensor, bboxes2: Tensor, ious: Tensor, mode: int, aligned: bool, offset: int
) -> None:
    """Axis-aligned IoU (``mode`` 0) or IoF (1), written into ``ious``.

    Args:
        bboxes1: ``(N, 4)`` float, ``x1, y1, x2, y2``.
        bboxes2: ``(M, 4)`` float.
        ious: ``(N, M)``, or ``(N,)`` when ``aligned``: receives the overlaps.
        mode: 0 for IoU, 1 for IoF.
        aligned: Overlaps of the pairs ``(bboxes1[i], bboxes2[i])`` only.
        offset: 0 or 1, added to widths and heights.
    """
    found = _bbox_overlaps(
        bboxes1, bboxes2, _mode("bbox_overlaps", "mode", mode), bool(aligned), offset
    )
    write("bbox_overlaps", "ious", ious, found)


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "bbox_overlaps": bbox_overlaps,
    "box_iou_quadri": box_iou_quadri,
    "box_iou_rotated": box_iou_rotated,
    "nms": nms,
    "nms_match": nms_match,
    "nms_quadri": nms_quadri,
    "nms_rotated": nms_rotated,
    "softnms": softnms,
}
