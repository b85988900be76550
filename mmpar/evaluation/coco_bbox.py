"""COCO box AP through pycocotools: AP@[.5:.95], AP50, AP75 and AP of small, medium, large.

The evaluation is pycocotools' own (``COCOeval`` with ``iouType="bbox"`` and its
default parameters: IoU 0.50:0.05:0.95, at most 100 detections per image,
areas below 32², 32² to 96², above 96²); this module only converts mmpar's
detections to COCO results and names the figures as mmdet 2.x does
(``bbox_mAP``, ``bbox_mAP_50``, ``bbox_mAP_75``, ``bbox_mAP_s``, ``bbox_mAP_m``,
``bbox_mAP_l``). A figure is -1 where its area range has no ground truth
(pycocotools' convention).

pycocotools is an optional dependency (``pip install -e ".[coco]"``); it is
imported when a COCO evaluation runs, never when mmpar is imported.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

__all__ = [
    "BBOX_KEYS",
    "COCO_INSTALL_HINT",
    "MissingDependencyError",
    "coco_bbox_eval",
    "import_pycocotools",
    "results_to_coco",
]

#: The names of ``COCOeval.stats[0:6]``, as mmdet 2.x reports them.
BBOX_KEYS: Tuple[str, ...] = (
    "bbox_mAP",
    "bbox_mAP_50",
    "bbox_mAP_75",
    "bbox_mAP_s",
    "bbox_mAP_m",
    "bbox_mAP_l",
)
COCO_INSTALL_HINT = 'pip install -e ".[coco]" (or pip install pycocotools)'


class MissingDependencyError(ImportError):
    """An optional package that the requested feature needs is not installed."""


def import_pycocotools() -> Tuple[Any, Any]:
    """pycocotools' ``COCO`` and ``COCOeval`` classes.

    Raises:
        MissingDependencyError: pycocotools cannot be imported; the message says how to
            install it.
    """
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError as exc:
        raise MissingDependencyError(
            f"COCO box AP needs pycocotools, which cannot be imported ({exc}); install it with "
            f"{COCO_INSTALL_HINT}"
        ) from None
    return COCO, COCOeval


def results_to_coco(
    results: Sequence[Sequence[Any]], img_ids: Sequence[int], cat_ids: Sequence[int]
) -> List[Dict[str, Any]]:
    """mmpar detections as COCO results (``loadRes``'s input).

    Args:
        results: Per image, per label, an array ``(k, 5)`` ``[x1, y1, x2, y2, score]`` in
            image pixels (``x2`` one past the last column, as ``CocoDetection`` makes
            ``x + w``).
        img_ids: The COCO image id of each entry of ``results``.
        cat_ids: The COCO category id of each label.

    Returns:
        One ``dict(image_id, category_id, bbox=[x, y, w, h], score)`` per detection.

    Raises:
        ValueError: ``results`` and ``img_ids`` differ in length, or an image has
            another number of labels than ``cat_ids``.
    """
    if len(results) != len(img_ids):
        raise ValueError(f"results_to_coco: {len(results)} results for {len(img_ids)} image ids")
    detections: List[Dict[str, Any]] = []
    for i, (img_id, per_image) in enumerate(zip(img_ids, results)):
        if len(per_image) != len(cat_ids):
            raise ValueError(
                f"results_to_coco: results[{i}] has {len(per_image)} labels, the dataset "
                f"{len(cat_ids)} categories"
            )
        for label, boxes in enumerate(per_image):
            # float64 holds every float32 value, and their differences, exactly.
            rows = np.asarray(boxes, dtype=np.float64).reshape(-1, 5).tolist()
            for x1, y1, x2, y2, score in rows:
                detections.append(
                    dict(
                        image_id=int(img_id),
                        category_id=int(cat_ids[label]),
                        bbox=[x1, y1, x2 - x1, y2 - y1],
                        score=score,
                    )
                )
    return detections


def coco_bbox_eval(
    gt: Mapping[str, Any],
    detections: List[Dict[str, Any]],
    img_ids: Sequence[int],
    cat_ids: Sequence[int],
) -> Tuple[Dict[str, Any], str]:
    """COCO box AP of ``detections`` against ``gt``, over ``img_ids`` and ``cat_ids``.

    Args:
        gt: A COCO ground truth with ``area``, ``iscrowd`` and ``id`` on every annotation
            (see :meth:`mmpar.data.CocoDetection.coco_ground_truth`).
        detections: COCO results (see :func:`results_to_coco`); may be empty.
        img_ids: The images evaluated.
        cat_ids: The categories evaluated.

    Returns:
        ``(metrics, summary)``: ``metrics`` maps each of :data:`BBOX_KEYS` to its float
        and ``bbox_mAP_copypaste`` to the six at three decimals; ``summary`` is
        pycocotools' 12-line table.

    Raises:
        MissingDependencyError: pycocotools is not installed.
    """
    COCO, COCOeval = import_pycocotools()
    # pycocotools reports each step on stdout ("creating index...", "DONE (t=0.01s)."):
    # only its table is worth showing.
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = dict(gt)
        coco_gt.createIndex()
        if detections:
            coco_dt = coco_gt.loadRes(detections)
        else:  # loadRes refuses an empty list; no detections scores 0 where there are boxes
            coco_dt = COCO()
            coco_dt.dataset = dict(
                images=list(gt["images"]), categories=list(gt["categories"]), annotations=[]
            )
            coco_dt.createIndex()
        evaluator = COCOeval(coco_gt, coco_dt, iouType="bbox")
        evaluator.params.imgIds = [int(i) for i in img_ids]
        evaluator.params.catIds = [int(c) for c in cat_ids]
        evaluator.evaluate()
        evaluator.accumulate()
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        evaluator.summarize()
    stats = [float(s) for s in evaluator.stats[: len(BBOX_KEYS)]]
    metrics: Dict[str, Any] = dict(zip(BBOX_KEYS, stats))
    metrics["bbox_mAP_copypaste"] = " ".join(f"{s:.3f}" for s in stats)
    return metrics, table.getvalue().rstrip("\n")
