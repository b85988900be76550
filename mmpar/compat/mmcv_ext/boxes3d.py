"""The 3D box entry points of ``mmcv._ext`` on :mod:`mmpar.compat.ops.points_in_boxes`,
:mod:`mmpar.compat.ops.iou3d`, :mod:`mmpar.compat.ops.roiaware_pool3d` and
:mod:`mmpar.compat.ops.roipoint_pool3d`.

mmcv-full 1.7.2's pybind signatures, each writing into the caller's tensors:

* ``points_in_boxes_part_forward(boxes_tensor, pts_tensor, box_idx_of_points_tensor)``
  ``(B, M)``, ``points_in_boxes_all_forward(...)`` ``(B, M, T)`` and
  ``points_in_boxes_cpu_forward(boxes_tensor, pts_tensor, pts_indices_tensor)`` ``(T,
  M)`` for one batch element: the kernels write the points inside a box and leave the
  other entries as the caller filled them (-1, 0);
* ``iou3d_boxes_overlap_bev_forward(boxes_a, boxes_b, ans_iou)``: the BEV overlap areas;
* ``iou3d_nms3d_forward(boxes, keep, num_out, nms_overlap_thresh)`` and
  ``iou3d_nms3d_normal_forward(...)``: greedy NMS of boxes already in descending score
  order: the kept positions into ``keep[:K]``, ``K`` into the 0-d ``num_out``;
* ``roiaware_pool3d_forward(rois, pts, pts_feature, argmax, pts_idx_of_voxels,
  pooled_features, pool_method)`` (0 max, 1 avg; the pooling of
  :class:`~mmpar.compat.ops.roiaware_pool3d.RoIAwarePool3dFunction`, redone from the
  same voxel members so that the in-box test runs once, with the argmax and the
  per-voxel point lists the backward reads) and ``roiaware_pool3d_backward(
  pts_idx_of_voxels, argmax, grad_out, grad_in, pool_method)``, which adds into
  ``grad_in`` as the kernel's atomic adds;
* ``roipoint_pool3d_forward(xyz, boxes3d, pts_feature, pooled_features,
  pooled_empty_flag)``.

NaN/inf: as mmpar's ops. Differences from mmcv-full: every entry point runs on any device
(mmcv's CPU has only ``points_in_boxes_cpu_forward``).
"""

from __future__ import annotations

from typing import Callable, Dict

import torch
from torch import Tensor

from mmpar.compat.mmcv_ext.calls import where, write
from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.boxes3d.voxels import group_ranks, voxel_members
from mmpar.compat.ops.iou3d import boxes_overlap_bev, nms3d, nms3d_normal
from mmpar.compat.ops.points_in_boxes import (
    points_in_boxes_all,
    points_in_boxes_cpu,
    points_in_boxes_part,
)
from mmpar.compat.ops.roiaware_pool3d import RoIAwarePool3dFunction
from mmpar.compat.ops.roipoint_pool3d import RoIPointPool3dFunction

__all__ = [
    "ENTRY_POINTS",
    "iou3d_boxes_overlap_bev_forward",
    "iou3d_nms3d_forward",
    "iou3d_nms3d_normal_forward",
    "points_in_boxes_all_forward",
    "points_in_boxes_cpu_forward",
    "points_in_boxes_part_forward",
    "roiaware_pool3d_backward",
    "roiaware_pool3d_forward",
    "roipoint_pool3d_forward",
]


def _write_inside(function: str, name: str, target: Tensor, found: Tensor, outside: int) -> None:
    """Write ``found`` where it is not ``outside``, leaving the caller's other entries."""
    write(function, name, target, found.where(found != outside, target.reshape(found.shape)))


def points_in_boxes_part_forward(
    boxes_tensor: Tensor, pts_tensor: Tensor, box_idx_of_points_tensor: Tensor
) -> None:
    """``box_idx_of_points_tensor`` ``(B, M)`` <- the first box ``(B, T, 7)`` holding each
    point ``(B, M, 3)``; points in none are left as given (mmcv fills -1)."""
    found = points_in_boxes_part(pts_tensor, boxes_tensor)
    _write_inside(
        "points_in_boxes_part_forward",
        "box_idx_of_points_tensor",
        box_idx_of_points_tensor,
        found,
        -1,
    )


def points_in_boxes_all_forward(
    boxes_tensor: Tensor, pts_tensor: Tensor, box_idx_of_points_tensor: Tensor
) -> None:
    """``box_idx_of_points_tensor`` ``(B, M, T)`` <- 1 where point ``m`` is in box ``t``;
    the other entries are left as given (mmcv fills 0)."""
    found = points_in_boxes_all(pts_tensor, boxes_tensor)
    _write_inside(
        "points_in_boxes_all_forward",
        "box_idx_of_points_tensor",
        box_idx_of_points_tensor,
        found,
        0,
    )


def points_in_boxes_cpu_forward(
    boxes_tensor: Tensor, pts_tensor: Tensor, pts_indices_tensor: Tensor
) -> None:
    """``pts_indices_tensor`` ``(T, M)`` <- 1 where point ``m`` ``(M, 3)`` is in box
    ``t`` ``(T, 7)``, for one batch element; other entries are left as given (0)."""
    found = points_in_boxes_cpu(pts_tensor[None], boxes_tensor[None])[0].T
    _write_inside("points_in_boxes_cpu_forward", "pts_indices_tensor", pts_indices_tensor, found, 0)


def iou3d_boxes_overlap_bev_forward(boxes_a: Tensor, boxes_b: Tensor, ans_iou: Tensor) -> None:
    """``ans_iou`` ``(M, N)`` <- the BEV overlap areas of boxes ``(M, 7)`` and ``(N, 7)``
    (the kernel's overlap, see :func:`mmpar.compat.ops.iou3d.boxes_overlap_bev`)."""
    write(
        "iou3d_boxes_overlap_bev_forward", "ans_iou", ans_iou, boxes_overlap_bev(boxes_a, boxes_b)
    )


def _nms(
    function: str, nms: Callable, boxes: Tensor, keep: Tensor, num_out: Tensor, thresh: float
) -> None:
    # The boxes come sorted by the caller: descending stand-in scores keep that order.
    rank = torch.arange(boxes.shape[0], 0, -1, device=boxes.device, dtype=boxes.dtype)
    kept = nms(boxes, rank, thresh)
    write(function, "keep", keep[: kept.numel()], kept)
    write(function, "num_out", num_out, torch.tensor(kept.numel()))


def iou3d_nms3d_forward(
    boxes: Tensor, keep: Tensor, num_out: Tensor, nms_overlap_thresh: float
) -> None:
    """Greedy NMS by rotated BEV IoU of ``boxes`` ``(N, 7)``, in score order.

    Args:
        boxes: ``(N, 7)`` float, highest score first.
        keep: ``(N,)`` long, receives the kept positions in ``keep[:K]``.
        num_out: 0-d long, receives ``K``.
        nms_overlap_thresh: IoU above which a later box is dropped.
    """
    _nms("iou3d_nms3d_forward", nms3d, boxes, keep, num_out, nms_overlap_thresh)


def iou3d_nms3d_normal_forward(
    boxes: Tensor, keep: Tensor, num_out: Tensor, nms_overlap_thresh: float
) -> None:
    """As :func:`iou3d_nms3d_forward`, by the IoU of the boxes with their heading set to 0."""
    _nms("iou3d_nms3d_normal_forward", nms3d_normal, boxes, keep, num_out, nms_overlap_thresh)


def roiaware_pool3d_forward(
    rois: Tensor,
    pts: Tensor,
    pts_feature: Tensor,
    argmax: Tensor,
    pts_idx_of_voxels: Tensor,
    pooled_features: Tensor,
    pool_method: int,
) -> None:
    """RoI-aware pooling into the caller's buffers.

    Args:
        rois: ``(N, 7)`` float bottom-centre boxes.
        pts: ``(P, 3)`` float.
        pts_feature: ``(P, C)`` float.
        argmax: ``(N, out_x, out_y, out_z, C)`` int32; for max, receives each voxel's
            pooled point per channel (-1 for none); untouched for avg.
        pts_idx_of_voxels: ``(N, out_x, out_y, out_z, max_pts_per_voxel)`` int32,
            receives each voxel's point count in slot 0, then its points in index order.
        pooled_features: ``(N, out_x, out_y, out_z, C)``, receives the pooled features.
        pool_method: 0 max, 1 avg.
    """
    function = "roiaware_pool3d_forward"
    grid, slots = tuple(pts_idx_of_voxels.shape[1:4]), pts_idx_of_voxels.shape[-1]
    if pool_method not in (0, 1):
        raise ValueError(
            f"{where(function)}: pool_method must be 0 (max) or 1 (avg), found {pool_method!r}"
        )
    # mmpar's op checks the arguments; its pooling is redone here from the same members
    # (the in-box test, the costly part, once), with the argmax and the layout it keeps.
    with torch.no_grad():
        RoIAwarePool3dFunction.apply(rois[:0], pts, pts_feature, grid, slots, pool_method)
    voxel, point = voxel_members(rois.detach(), pts.detach().to(rois.dtype), grid, slots - 1)
    flat = pts_idx_of_voxels.view(-1, slots)
    dtype = float_compute_dtype(pts_feature.dtype)
    features = pts_feature.detach().to(dtype).index_select(0, point)
    count = torch.bincount(voxel, minlength=flat.shape[0])
    if pool_method == 1:
        pooled = features.new_zeros(flat.shape[0], features.shape[1]).index_add_(0, voxel, features)
        pooled /= count.clamp(min=1)[:, None].to(dtype)
    else:
        # The kernel's: NaN and -inf never taken, 0 where nothing is; its argmax the first
        # point (in index order) holding the maximum, -1 where none.
        values = features.masked_fill(torch.isnan(features), -torch.inf)
        into = voxel[:, None].expand_as(values)
        best = values.new_full((flat.shape[0], values.shape[1]), -torch.inf)
        best.scatter_reduce_(0, into, values, "amax")
        last = pts.shape[0]
        candidate = torch.where(values == best.index_select(0, voxel), point[:, None], last)
        first = torch.full_like(best, last, dtype=torch.long)
        first.scatter_reduce_(0, into, candidate, "amin")
        valid = best > -torch.inf
        pooled = best.where(valid, 0)
        write(function, "argmax", argmax, first.where(valid, -1))
    write(function, "pooled_features", pooled_features, pooled)
    order = torch.argsort(voxel * max(pts.shape[0], 1) + point)
    voxel, point = voxel[order], point[order]
    flat.zero_()
    flat[:, 0] = count.to(flat.dtype)
    flat[voxel, 1 + group_ranks(voxel)] = point.to(flat.dtype)


def roiaware_pool3d_backward(
    pts_idx_of_voxels: Tensor, argmax: Tensor, grad_out: Tensor, grad_in: Tensor, pool_method: int
) -> None:
    """Add the pooling's gradient for ``grad_out`` into ``grad_in`` ``(P, C)``: to each
    voxel's ``argmax`` point (max), or shared among its points (avg), as
    :class:`mmpar.compat.ops.roiaware_pool3d.RoIAwarePool3dFunction`'s backward."""
    channels = grad_out.shape[-1]
    grad = grad_out.reshape(-1, channels).to(grad_in.dtype)
    if pool_method == 0:
        arg = argmax.reshape(-1, channels).long()
        valid = arg >= 0
        target = arg * channels + torch.arange(channels, device=grad.device)
        grad_in.view(-1).index_add_(0, target[valid], grad[valid])
        return
    flat = pts_idx_of_voxels.reshape(-1, pts_idx_of_voxels.shape[-1]).long()
    count = flat[:, 0]
    slot = torch.arange(flat.shape[1], device=flat.device)
    voxel, at = ((slot >= 1) & (slot <= count[:, None])).nonzero(as_tuple=True)
    share = 1.0 / count.index_select(0, voxel).to(grad.dtype)
    grad_in.index_add_(0, flat[voxel, at], grad.index_select(0, voxel) * share[:, None])


def roipoint_pool3d_forward(
    xyz: Tensor,
    boxes3d: Tensor,
    pts_feature: Tensor,
    pooled_features: Tensor,
    pooled_empty_flag: Tensor,
) -> None:
    """RoI point pooling into the caller's buffers.

    Args:
        xyz: ``(B, N, 3)`` float.
        boxes3d: ``(B, M, 7)`` float.
        pts_feature: ``(B, N, C)`` float.
        pooled_features: ``(B, M, num, 3 + C)``, receives each box's sampled points.
        pooled_empty_flag: ``(B, M)`` int32, receives 1 for a box with no point.
    """
    with torch.no_grad():
        pooled, empty = RoIPointPool3dFunction.apply(
            xyz, pts_feature, boxes3d, pooled_features.shape[2]
        )
    write("roipoint_pool3d_forward", "pooled_features", pooled_features, pooled)
    write("roipoint_pool3d_forward", "pooled_empty_flag", pooled_empty_flag, empty)


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "iou3d_boxes_overlap_bev_forward": iou3d_boxes_overlap_bev_forward,
    "iou3d_nms3d_forward": iou3d_nms3d_forward,
    "iou3d_nms3d_normal_forward": iou3d_nms3d_normal_forward,
    "points_in_boxes_all_forward": points_in_boxes_all_forward,
    "points_in_boxes_cpu_forward": points_in_boxes_cpu_forward,
    "points_in_boxes_part_forward": points_in_boxes_part_forward,
    "roiaware_pool3d_backward": roiaware_pool3d_backward,
    "roiaware_pool3d_forward": roiaware_pool3d_forward,
    "roipoint_pool3d_forward": roipoint_pool3d_forward,
}
