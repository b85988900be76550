"""Mean average precision of box detections at one IoU threshold (VOC2010+ style).

Method, per class:

1. Take the detections of that class from every image and rank them by score,
   highest first (ties keep image order).
2. Walk down the ranking. A detection is a true positive when its best-IoU
   ground-truth box of that class in the same image has IoU >= ``iou_thr`` and
   is not matched yet (greedy: it is then marked matched); otherwise it is a
   false positive, except that a detection which matches no regular box but
   overlaps an *ignore* box (``bboxes_ignore``, e.g. COCO crowds) by IoU >=
   ``iou_thr`` counts as neither.
3. ``recall = cumTP / num_gts`` and ``precision = cumTP / (cumTP + cumFP)`` after
   each detection.
4. AP is the area under the interpolated precision-recall curve over all
   points: precision is replaced by its maximum at any higher recall, and the
   area is ``sum (r[i] - r[i-1]) * p_interp[i]`` over the points where recall
   changes (r[-1] = 0).

Classes without ground-truth boxes are skipped (they have no recall); mAP is
the mean AP of the remaining classes. Boxes are x1y1x2y2 with ``x2`` one past
the last column, so a box's area is ``(x2 - x1) * (y2 - y1)``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

__all__ = ["box_iou", "average_precision", "eval_map"]


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` ``(N, 4)`` with every box of ``b`` ``(M, 4)``: ``(N, M)``."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """Area under the all-point interpolated precision-recall curve.

    Args:
        recall: ``(K,)`` non-decreasing recalls after each ranked detection.
        precision: ``(K,)`` precisions after each ranked detection.

    Returns:
        AP in [0, 1]; 0 for no detections.
    """
    r = np.concatenate([[0.0], np.asarray(recall, np.float64), [1.0]])
    p = np.concatenate([[0.0], np.asarray(precision, np.float64), [0.0]])
    p = np.maximum.accumulate(p[::-1])[::-1]  # best precision at this or any higher recall
    changed = np.flatnonzero(r[1:] != r[:-1])
    return float(np.sum((r[changed + 1] - r[changed]) * p[changed + 1]))


def _check_inputs(det_results: Sequence[Any], annotations: Sequence[Mapping[str, Any]]) -> int:
    if not isinstance(det_results, Sequence) or not isinstance(annotations, Sequence):
        raise TypeError(
            "eval_map: det_results and annotations must be lists, got "
            f"{type(det_results).__name__} and {type(annotations).__name__}"
        )
    if len(det_results) != len(annotations):
        raise ValueError(
            f"eval_map: {len(det_results)} det_results for {len(annotations)} annotations (one "
            "per image)"
        )
    num_classes = {len(per_image) for per_image in det_results}
    if len(num_classes) > 1:
        raise ValueError(
            "eval_map: det_results hold different numbers of classes per image: "
            f"{sorted(num_classes)}"
        )
    count = num_classes.pop() if num_classes else 0
    for i, ann in enumerate(annotations):
        if not isinstance(ann, Mapping) or "bboxes" not in ann or "labels" not in ann:
            raise ValueError(
                f"annotations[{i}]: expected a dict with 'bboxes' (K, 4) and 'labels' (K,)"
            )
        labels = np.asarray(ann["labels"]).reshape(-1)
        bad = labels[(labels < 0) | (labels >= count)]
        if bad.size and det_results:
            # A ground truth no class can match would silently drop out of the recall.
            raise ValueError(
                f"annotations[{i}]: labels {sorted(set(bad.tolist()))} outside the {count} "
                "classes of det_results"
            )
    return count


def _dets_of_class(det_results: Sequence[Any], c: int) -> Tuple[np.ndarray, np.ndarray]:
    """Detections of class ``c`` over all images by score: ``(boxes (D, 5), image ids (D,))``."""
    boxes, owners = [], []
    for i, per_image in enumerate(det_results):
        dets = np.asarray(per_image[c], np.float64).reshape(-1, 5)
        boxes.append(dets)
        owners.append(np.full(len(dets), i))
    dets, ids = np.concatenate(boxes), np.concatenate(owners)
    order = np.argsort(-dets[:, 4], kind="stable")
    return dets[order], ids[order]


def _match_class(
    det_results: Sequence[Any], annotations: Sequence[Mapping[str, Any]], c: int, iou_thr: float
) -> Dict[str, Any]:
    gts = [
        np.asarray(a["bboxes"], np.float64).reshape(-1, 4)[np.asarray(a["labels"]).reshape(-1) == c]
        for a in annotations
    ]
    ignores = [
        np.asarray(a.get("bboxes_ignore", np.zeros((0, 4))), np.float64).reshape(-1, 4)
        for a in annotations
    ]
    num_gts = sum(len(g) for g in gts)
    dets, ids = _dets_of_class(det_results, c)
    matched = [np.zeros(len(g), bool) for g in gts]
    tp, fp = np.zeros(len(dets)), np.zeros(len(dets))
    for k, (det, i) in enumerate(zip(dets, ids)):
        ious = box_iou(det[None, :4], gts[i])[0]
        best = int(np.argmax(ious)) if len(ious) else -1
        if best >= 0 and ious[best] >= iou_thr and not matched[i][best]:
            matched[i][best] = True
            tp[k] = 1
        elif len(ignores[i]) and box_iou(det[None, :4], ignores[i]).max() >= iou_thr:
            continue
        else:
            fp[k] = 1
    ctp, cfp = np.cumsum(tp), np.cumsum(fp)
    counted = (tp + fp) > 0
    recall = ctp[counted] / max(num_gts, 1)
    precision = ctp[counted] / np.maximum(ctp[counted] + cfp[counted], 1e-12)
    ap = average_precision(recall, precision) if num_gts else float("nan")
    return dict(
        num_gts=num_gts, num_dets=len(dets), recall=float(recall[-1]) if len(recall) else 0.0, ap=ap
    )


def eval_map(
    det_results: Sequence[Sequence[np.ndarray]],
    annotations: Sequence[Mapping[str, Any]],
    iou_thr: float = 0.5,
    class_names: Optional[Sequence[str]] = None,
) -> Tuple[float, List[Dict[str, Any]]]:
    """Mean AP over classes at IoU ``iou_thr`` (see the module docstring for the method).

    Args:
        det_results: Per image, per class, an array ``(k, 5)`` ``[x1, y1, x2, y2, score]``.
        annotations: Per image, ``dict(bboxes=(K, 4), labels=(K,))`` and optionally
            ``bboxes_ignore=(M, 4)``, in the same coordinates as the detections.
        iou_thr: IoU at or above which a detection may match a box.
        class_names: Optional names, one per class, copied into the per-class results.

    Returns:
        ``(mAP, per_class)``: mAP over classes with ground truth (``nan`` when no class
        has any), and per class ``dict(class, num_gts, num_dets, recall, ap)``
        (``ap`` is ``nan`` for a class without ground truth).

    Raises:
        TypeError: the inputs are not lists.
        ValueError: different lengths, a different number of classes per image, an
            annotation without ``bboxes``/``labels``, ``iou_thr`` outside (0, 1], or
            ``class_names`` of the wrong length.
    """
    num_classes = _check_inputs(det_results, annotations)
    if not 0 < iou_thr <= 1:
        raise ValueError(f"eval_map: iou_thr must be in (0, 1], got {iou_thr!r}")
    if class_names is not None and len(class_names) != num_classes:
        raise ValueError(
            f"eval_map: class_names has {len(class_names)} names for {num_classes} classes"
        )
    per_class = []
    for c in range(num_classes):
        stats = _match_class(det_results, annotations, c, iou_thr)
        stats["class"] = class_names[c] if class_names is not None else c
        per_class.append(stats)
    aps = [s["ap"] for s in per_class if s["num_gts"] > 0]
    return (float(np.mean(aps)) if aps else float("nan")), per_class
