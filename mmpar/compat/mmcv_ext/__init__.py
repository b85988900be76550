"""mmcv-full's raw ``mmcv._ext`` entry points on mmpar's ops, for code that loads them itself.

Research code of the mmcv 1.x era defines its own autograd functions around mmcv-full's
C++ entry points, or vendors a copy of an ``mmcv.ops`` wrapper that calls them::

    ext_module = ext_loader.load_ext("_ext", ["ms_deform_attn_forward", "ms_deform_attn_backward"])

Where mmpar's ops serve ``mmcv.ops`` (:func:`mmpar.compat.supply_mmcv_ops`), ``import
mmcv._ext`` gives :func:`ext_module`: the entry points of the modules below under
mmcv-full's names, with its argument names and order (``mmcv/ops/csrc/pytorch/pybind.cpp``
at v1.7.2). Each returns what mmcv-full returns and writes in place what it writes in
place (``copy_``, or ``add_`` where the kernel adds), on any device, as a thin adapter onto
mmpar's op. A name that mmcv-full has and mmpar does not supply is a
:class:`~mmpar.compat.mmcv_ops.MissingOpError` naming it, which escapes mmcv's
``load_ext`` (its ``hasattr`` check) as one line.

* :mod:`.attention`: ``ms_deform_attn_forward/backward``;
* :mod:`.boxes2d`: ``nms``, ``softnms``, ``nms_match``, ``nms_rotated``,
  ``bbox_overlaps``, ``box_iou_rotated``;
* :mod:`.conv`: ``deform_conv_*``, ``modulated_deform_conv_*``;
* :mod:`.roi`: ``roi_align_forward/backward`` (avg);
* :mod:`.upsample`: ``carafe_forward/backward``, ``carafe_naive_forward/backward``;
* :mod:`.losses`: ``sigmoid_focal_loss_forward/backward``,
  ``softmax_focal_loss_forward/backward``;
* :mod:`.voxel`: ``hard_voxelize_forward``, ``dynamic_voxelize_forward``,
  ``dynamic_point_to_voxel_forward/backward``;
* :mod:`.boxes3d`: ``points_in_boxes_*``, ``iou3d_*``, ``roiaware_pool3d_*``,
  ``roipoint_pool3d_forward``;
* :mod:`.points`: ``ball_query_forward``, ``stack_ball_query_forward``, ``knn_forward``,
  ``three_nn_forward``, ``furthest_point_sampling(_with_dist)_forward``;
* :mod:`.grouping`: ``three_interpolate_*``, ``(stack_)group_points_*``,
  ``gather_points_*``;
* :mod:`.assign_score`: ``assign_score_withk_*``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable, Dict

from mmpar.compat.mmcv_ext import (
    assign_score,
    attention,
    boxes2d,
    boxes3d,
    conv,
    grouping,
    losses,
    points,
    roi,
    upsample,
    voxel,
)
from mmpar.compat.mmcv_ext.calls import NAME

__all__ = ["ENTRY_POINTS", "FAMILIES", "NAME", "ext_module"]

#: The modules of entry points, one per op family.
FAMILIES = (
    assign_score,
    attention,
    boxes2d,
    boxes3d,
    conv,
    grouping,
    losses,
    points,
    roi,
    upsample,
    voxel,
)

#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = dict(
    sorted(item for family in FAMILIES for item in family.ENTRY_POINTS.items())
)


def ext_module(missing: Callable[[str], ImportError]) -> ModuleType:
    """A fresh ``mmcv._ext`` holding :data:`ENTRY_POINTS`.

    Args:
        missing: Makes the error for a name that is not supplied, given its full name.

    Returns:
        The module; looking up any other public name raises ``missing(name)``, a private
        one ``AttributeError``.
    """
    module = ModuleType(NAME)
    module.__doc__ = f"mmpar's stand-in for {NAME} (see mmpar.compat.mmcv_ext)."
    module.__mmpar_ops__ = True
    vars(module).update(ENTRY_POINTS)

    def __getattr__(attr: str) -> object:
        # No entry point starts with "_": a private name is a plain AttributeError, so that
        # hasattr() probes of every loaded module (mmcv.device.npu's for _check_balance)
        # answer False instead of raising.
        if attr.startswith("_"):
            raise AttributeError(f"module {NAME!r} has no attribute {attr!r}")
        raise missing(f"{NAME}.{attr}")

    module.__getattr__ = __getattr__
    return module
