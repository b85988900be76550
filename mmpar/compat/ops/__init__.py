"""mmpar's ops under mmcv 1.x's names: the stand-in for ``mmcv.ops``.

Built on ``torchvision.ops`` and plain torch; mmpar compiles nothing. One module
per module of mmcv's ``mmcv/ops`` that it replaces, with mmcv's names,
signatures and defaults. :mod:`mmpar.compat.mmcv_ops` mounts them as
``mmcv.ops`` where mmcv's compiled ops do not load.

``SAConv2d`` subclasses mmcv's ``ConvAWS2d``, and ``Conv2d``, ``ConvTranspose2d``,
``Linear`` and ``MaxPool2d`` are mmcv's own layers: they are looked up on first
access, so this package imports without mmcv.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Dict

from mmpar.compat.ops import deprecated_wrappers, saconv
from mmpar.compat.ops.bbox import bbox_overlaps
from mmpar.compat.ops.carafe import CARAFE, CARAFENaive, CARAFEPack, carafe, carafe_naive
from mmpar.compat.ops.cc_attention import CrissCrossAttention
from mmpar.compat.ops.chamfer_distance import chamfer_distance
from mmpar.compat.ops.convex_iou import convex_giou, convex_iou
from mmpar.compat.ops.corner_pool import CornerPool
from mmpar.compat.ops.deform_conv import DeformConv2d, DeformConv2dPack, deform_conv2d
from mmpar.compat.ops.deform_roi_pool import (
    DeformRoIPool,
    DeformRoIPoolPack,
    ModulatedDeformRoIPoolPack,
    deform_roi_pool,
)
from mmpar.compat.ops.focal_loss import (
    SigmoidFocalLoss,
    SoftmaxFocalLoss,
    sigmoid_focal_loss,
    softmax_focal_loss,
)
from mmpar.compat.ops.info import (
    get_compiler_version,
    get_compiling_cuda_version,
    get_onnxruntime_op_path,
)
from mmpar.compat.ops.masked_conv import MaskedConv2d, masked_conv2d
from mmpar.compat.ops.merge_cells import ConcatCell, GlobalPoolingCell, SumCell
from mmpar.compat.ops.min_area_polygons import min_area_polygons
from mmpar.compat.ops.modulated_deform_conv import (
    ModulatedDeformConv2d,
    ModulatedDeformConv2dPack,
    modulated_deform_conv2d,
)
from mmpar.compat.ops.multi_scale_deform_attn import MultiScaleDeformableAttention
from mmpar.compat.ops.nms import batched_nms, nms, nms_match, soft_nms
from mmpar.compat.ops.point_sample import (
    SimpleRoIAlign,
    point_sample,
    rel_roi_point_to_rel_img_point,
)
from mmpar.compat.ops.points_in_polygons import points_in_polygons
from mmpar.compat.ops.psa_mask import PSAMask
from mmpar.compat.ops.roi_align import RoIAlign, roi_align
from mmpar.compat.ops.roi_pool import RoIPool, roi_pool
from mmpar.compat.ops.sync_bn import SyncBatchNorm

#: mmcv's module name (``nms`` for ``mmcv.ops.nms``) -> mmpar's module. Several
#: share their name with a function (``nms``, ``roi_align``), which wins the
#: package attribute, as in mmcv.
MODULES: Dict[str, ModuleType] = {
    name: sys.modules[f"{__name__}.{name}"]
    for name in (
        "bbox",
        "carafe",
        "cc_attention",
        "chamfer_distance",
        "convex_iou",
        "corner_pool",
        "deform_conv",
        "deform_roi_pool",
        "deprecated_wrappers",
        "focal_loss",
        "info",
        "masked_conv",
        "merge_cells",
        "min_area_polygons",
        "modulated_deform_conv",
        "multi_scale_deform_attn",
        "nms",
        "point_sample",
        "points_in_polygons",
        "psa_mask",
        "roi_align",
        "roi_pool",
        "saconv",
        "sync_bn",
    )
}

# The names of mmcv 1.7.2's ``mmcv/ops/__init__.py`` that mmpar supplies.
__all__ = [
    "bbox_overlaps",
    "CARAFE",
    "CARAFENaive",
    "CARAFEPack",
    "carafe",
    "carafe_naive",
    "CornerPool",
    "DeformConv2d",
    "DeformConv2dPack",
    "deform_conv2d",
    "DeformRoIPool",
    "DeformRoIPoolPack",
    "ModulatedDeformRoIPoolPack",
    "deform_roi_pool",
    "SigmoidFocalLoss",
    "SoftmaxFocalLoss",
    "sigmoid_focal_loss",
    "softmax_focal_loss",
    "get_compiler_version",
    "get_compiling_cuda_version",
    "get_onnxruntime_op_path",
    "MaskedConv2d",
    "masked_conv2d",
    "ModulatedDeformConv2d",
    "ModulatedDeformConv2dPack",
    "modulated_deform_conv2d",
    "batched_nms",
    "nms",
    "soft_nms",
    "nms_match",
    "RoIAlign",
    "roi_align",
    "RoIPool",
    "roi_pool",
    "SyncBatchNorm",
    "CrissCrossAttention",
    "PSAMask",
    "point_sample",
    "rel_roi_point_to_rel_img_point",
    "SimpleRoIAlign",
    "SAConv2d",
    "MultiScaleDeformableAttention",
    "points_in_polygons",
    "min_area_polygons",
    "convex_iou",
    "convex_giou",
    "chamfer_distance",
    "ConcatCell",
    "SumCell",
    "GlobalPoolingCell",
    "Conv2d",
    "ConvTranspose2d",
    "Linear",
    "MaxPool2d",
]


def __getattr__(name: str) -> Any:
    if name == "SAConv2d":
        return saconv.SAConv2d
    if name in deprecated_wrappers.__all__:
        return getattr(deprecated_wrappers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
