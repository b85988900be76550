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
from mmpar.compat.ops.active_rotated_filter import active_rotated_filter
from mmpar.compat.ops.assign_score_withk import assign_score_withk
from mmpar.compat.ops.ball_query import ball_query
from mmpar.compat.ops.bbox import bbox_overlaps
from mmpar.compat.ops.border_align import BorderAlign, border_align
from mmpar.compat.ops.box_iou_quadri import box_iou_quadri
from mmpar.compat.ops.box_iou_rotated import box_iou_rotated
from mmpar.compat.ops.carafe import CARAFE, CARAFENaive, CARAFEPack, carafe, carafe_naive
from mmpar.compat.ops.cc_attention import CrissCrossAttention
from mmpar.compat.ops.chamfer_distance import chamfer_distance
from mmpar.compat.ops.contour_expand import contour_expand
from mmpar.compat.ops.convex_iou import convex_giou, convex_iou
from mmpar.compat.ops.corner_pool import CornerPool
from mmpar.compat.ops.correlation import Correlation
from mmpar.compat.ops.deform_conv import DeformConv2d, DeformConv2dPack, deform_conv2d
from mmpar.compat.ops.deform_roi_pool import (
    DeformRoIPool,
    DeformRoIPoolPack,
    ModulatedDeformRoIPoolPack,
    deform_roi_pool,
)
from mmpar.compat.ops.diff_iou_rotated import diff_iou_rotated_2d, diff_iou_rotated_3d
from mmpar.compat.ops.focal_loss import (
    SigmoidFocalLoss,
    SoftmaxFocalLoss,
    sigmoid_focal_loss,
    softmax_focal_loss,
)
from mmpar.compat.ops.furthest_point_sample import (
    furthest_point_sample,
    furthest_point_sample_with_dist,
)
from mmpar.compat.ops.fused_bias_leakyrelu import FusedBiasLeakyReLU, fused_bias_leakyrelu
from mmpar.compat.ops.gather_points import gather_points
from mmpar.compat.ops.group_points import GroupAll, QueryAndGroup, grouping_operation
from mmpar.compat.ops.info import (
    get_compiler_version,
    get_compiling_cuda_version,
    get_onnxruntime_op_path,
)
from mmpar.compat.ops.iou3d import (
    boxes_iou3d,
    boxes_iou_bev,
    boxes_overlap_bev,
    nms3d,
    nms3d_normal,
    nms_bev,
    nms_normal_bev,
)
from mmpar.compat.ops.knn import knn
from mmpar.compat.ops.masked_conv import MaskedConv2d, masked_conv2d
from mmpar.compat.ops.merge_cells import ConcatCell, GlobalPoolingCell, SumCell
from mmpar.compat.ops.min_area_polygons import min_area_polygons
from mmpar.compat.ops.modulated_deform_conv import (
    ModulatedDeformConv2d,
    ModulatedDeformConv2dPack,
    modulated_deform_conv2d,
)
from mmpar.compat.ops.multi_scale_deform_attn import MultiScaleDeformableAttention
from mmpar.compat.ops.nms import batched_nms, nms, nms_match, nms_quadri, nms_rotated, soft_nms
from mmpar.compat.ops.pixel_group import pixel_group
from mmpar.compat.ops.point_sample import (
    SimpleRoIAlign,
    point_sample,
    rel_roi_point_to_rel_img_point,
)
from mmpar.compat.ops.points_in_boxes import (
    points_in_boxes_all,
    points_in_boxes_cpu,
    points_in_boxes_part,
)
from mmpar.compat.ops.points_in_polygons import points_in_polygons
from mmpar.compat.ops.points_sampler import PointsSampler
from mmpar.compat.ops.prroi_pool import PrRoIPool, prroi_pool
from mmpar.compat.ops.psa_mask import PSAMask
from mmpar.compat.ops.riroi_align_rotated import RiRoIAlignRotated, riroi_align_rotated
from mmpar.compat.ops.roi_align import RoIAlign, roi_align
from mmpar.compat.ops.roi_align_rotated import RoIAlignRotated, roi_align_rotated
from mmpar.compat.ops.roi_pool import RoIPool, roi_pool
from mmpar.compat.ops.roiaware_pool3d import RoIAwarePool3d
from mmpar.compat.ops.roipoint_pool3d import RoIPointPool3d
from mmpar.compat.ops.rotated_feature_align import rotated_feature_align
from mmpar.compat.ops.scatter_points import DynamicScatter, dynamic_scatter
from mmpar.compat.ops.sparse_conv import (
    SparseConv2d,
    SparseConv3d,
    SparseConvTranspose2d,
    SparseConvTranspose3d,
    SparseInverseConv2d,
    SparseInverseConv3d,
    SubMConv2d,
    SubMConv3d,
)
from mmpar.compat.ops.sparse_modules import SparseModule, SparseSequential
from mmpar.compat.ops.sparse_pool import SparseMaxPool2d, SparseMaxPool3d
from mmpar.compat.ops.sparse_structure import SparseConvTensor, scatter_nd
from mmpar.compat.ops.sync_bn import SyncBatchNorm
from mmpar.compat.ops.three_interpolate import three_interpolate
from mmpar.compat.ops.three_nn import three_nn
from mmpar.compat.ops.tin_shift import TINShift, tin_shift
from mmpar.compat.ops.upfirdn2d import upfirdn2d
from mmpar.compat.ops.voxelize import Voxelization, voxelization

#: mmcv's module name (``nms`` for ``mmcv.ops.nms``) -> mmpar's module. Several
#: share their name with a function (``nms``, ``roi_align``), which wins the
#: package attribute, as in mmcv.
MODULES: Dict[str, ModuleType] = {
    name: sys.modules[f"{__name__}.{name}"]
    for name in (
        "active_rotated_filter",
        "assign_score_withk",
        "ball_query",
        "bbox",
        "border_align",
        "box_iou_quadri",
        "box_iou_rotated",
        "carafe",
        "cc_attention",
        "chamfer_distance",
        "convex_iou",
        "contour_expand",
        "correlation",
        "corner_pool",
        "deform_conv",
        "deform_roi_pool",
        "deprecated_wrappers",
        "diff_iou_rotated",
        "focal_loss",
        "furthest_point_sample",
        "fused_bias_leakyrelu",
        "gather_points",
        "group_points",
        "info",
        "iou3d",
        "knn",
        "masked_conv",
        "merge_cells",
        "min_area_polygons",
        "modulated_deform_conv",
        "multi_scale_deform_attn",
        "nms",
        "pixel_group",
        "point_sample",
        "points_in_boxes",
        "points_in_polygons",
        "points_sampler",
        "prroi_pool",
        "psa_mask",
        "riroi_align_rotated",
        "roi_align",
        "roi_align_rotated",
        "roi_pool",
        "roiaware_pool3d",
        "roipoint_pool3d",
        "rotated_feature_align",
        "saconv",
        "scatter_points",
        "sparse_conv",
        "sparse_functional",
        "sparse_modules",
        "sparse_ops",
        "sparse_pool",
        "sparse_structure",
        "sync_bn",
        "three_interpolate",
        "three_nn",
        "tin_shift",
        "upfirdn2d",
        "voxelize",
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
    "TINShift",
    "tin_shift",
    "assign_score_withk",
    "upfirdn2d",
    "FusedBiasLeakyReLU",
    "fused_bias_leakyrelu",
    "pixel_group",
    "QueryAndGroup",
    "GroupAll",
    "grouping_operation",
    "contour_expand",
    "three_nn",
    "three_interpolate",
    "rotated_feature_align",
    "RiRoIAlignRotated",
    "riroi_align_rotated",
    "RoIAlignRotated",
    "roi_align_rotated",
    "box_iou_rotated",
    "box_iou_quadri",
    "RoIPointPool3d",
    "nms_rotated",
    "knn",
    "ball_query",
    "MultiScaleDeformableAttention",
    "gather_points",
    "furthest_point_sample",
    "nms_quadri",
    "furthest_point_sample_with_dist",
    "PointsSampler",
    "Correlation",
    "points_in_polygons",
    "min_area_polygons",
    "convex_iou",
    "convex_giou",
    "chamfer_distance",
    "active_rotated_filter",
    "ConcatCell",
    "SumCell",
    "GlobalPoolingCell",
    "diff_iou_rotated_2d",
    "diff_iou_rotated_3d",
    "boxes_iou3d",
    "boxes_iou_bev",
    "boxes_overlap_bev",
    "nms_bev",
    "nms_normal_bev",
    "nms3d",
    "nms3d_normal",
    "Conv2d",
    "ConvTranspose2d",
    "Linear",
    "MaxPool2d",
    "BorderAlign",
    "border_align",
    "Voxelization",
    "voxelization",
    "dynamic_scatter",
    "DynamicScatter",
    "RoIAwarePool3d",
    "SparseConv2d",
    "SparseConv3d",
    "SparseConvTranspose2d",
    "SparseConvTranspose3d",
    "SparseInverseConv2d",
    "SparseInverseConv3d",
    "SubMConv2d",
    "SubMConv3d",
    "SparseModule",
    "SparseSequential",
    "SparseMaxPool2d",
    "SparseMaxPool3d",
    "SparseConvTensor",
    "scatter_nd",
    "points_in_boxes_part",
    "points_in_boxes_cpu",
    "points_in_boxes_all",
    "PrRoIPool",
    "prroi_pool",
]


def __getattr__(name: str) -> Any:
    if name == "SAConv2d":
        return saconv.SAConv2d
    if name in deprecated_wrappers.__all__:
        return getattr(deprecated_wrappers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
