"""Evaluation metrics."""

from mmpar.evaluation.mean_ap import average_precision, box_iou, eval_map

__all__ = ["average_precision", "box_iou", "eval_map"]
