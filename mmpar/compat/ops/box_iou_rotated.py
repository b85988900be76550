"""``mmcv.ops.box_iou_rotated``: rotated-box IoU / IoF in plain torch.

The definition, its exactness and its differences from mmcv-full are documented with
the machinery that computes it, :mod:`mmpar.compat.ops.geometry.rotated_iou`, which the
rotated NMS shares.
"""

from mmpar.compat.ops.geometry.rotated_iou import box_iou_rotated

__all__ = ["box_iou_rotated"]
