"""Evaluation metrics."""

from mmpar.evaluation.coco_bbox import BBOX_KEYS, coco_bbox_eval, results_to_coco
from mmpar.evaluation.mean_ap import average_precision, box_iou, eval_map

__all__ = [
    "BBOX_KEYS",
    "average_precision",
    "box_iou",
    "coco_bbox_eval",
    "eval_map",
    "results_to_coco",
]
