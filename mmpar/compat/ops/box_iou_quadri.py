"""``mmcv.ops.box_iou_quadri``: quadrilateral IoU / IoF in plain torch.

The definition, its exactness and its differences from mmcv-full are documented with
the machinery that computes it, :mod:`mmpar.compat.ops.geometry.quadri_iou`, which the
quadrilateral NMS shares.
"""

from mmpar.compat.ops.geometry.quadri_iou import box_iou_quadri

__all__ = ["box_iou_quadri"]
