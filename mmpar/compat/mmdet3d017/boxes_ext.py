"""mmdet3d 0.17's ``iou3d_cuda`` and ``roiaware_pool3d_ext`` on mmpar's box ops.

Box layouts of mmdet3d 0.17's kernels, and how they become mmpar's:

* ``iou3d_cuda`` takes BEV boxes ``(x1, y1, x2, y2, ry)`` (mmdet3d's ``xywhr2xyxyr``):
  the rectangle ``[x1, x2] x [y1, y2]`` turned by ``-ry`` about its centre (its
  ``rotate_around_center``). Its overlap counts corners within ``1e-5`` outside the
  other box: here the exact intersection of mmpar's rotated-box overlap
  (``box_iou_rotated``, the boxes as ``(cx, cy, w, h, ry)``). ``nms_normal_gpu``
  ignores ``ry`` (its ``iou_normal``, computed here as the kernel writes it).
* ``roiaware_pool3d_ext`` takes LiDAR boxes ``(x, y, z, w, l, h, rz)``, ``z`` the bottom:
  a point's offset is turned by ``rz + pi/2`` and compared with ``l`` along the first
  axis, ``w`` along the second. That is mmcv 1.7's box ``(x, y, z, l, w, h, -(rz +
  pi/2))`` (``rz + pi/2`` rounded to float32 from double, as the kernel's
  ``float rot_angle = rz + M_PI / 2``), which mmpar's ``points_in_boxes`` and
  ``voxel_members`` (RoI-aware pooling) then test as mmcv's kernels do.

Each function writes its result into the output tensor given, as the C++ does, and
returns what it returns (1, or the number of kept boxes for the NMS). ``nms_gpu``'s
boxes come sorted by score from mmdet3d's wrapper: the greedy pass visits them in index
order, and drops a box whose IoU with a kept one is strictly above the threshold.

NaN/inf rule: mmpar's ``box_iou_rotated`` (a non-finite box overlaps nothing),
``points_in_boxes`` and ``roiaware_pool3d`` (NaN features never win a max).

Differences from mmdet3d 0.17's kernels: they run on any device and dtype (0.17's
``*_gpu`` need CUDA float32 tensors); the BEV overlap is exact (0.17's counts corners
up to ``1e-5`` outside, a difference of about ``1e-5`` times a side where one is
there); ``nms_gpu``'s ``device_id`` is ignored; the RoI-aware pooling's 8-bit voxel
index limit (256 voxels per axis) does not apply; ``roiaware`` ``avg`` sums in the
features' dtype.
"""

from __future__ import annotations

import math
from typing import Callable, Dict

import torch
from torch import Tensor

from mmpar.compat.mmdet3d017.calls import write
from mmpar.compat.ops import points_in_boxes as mmcv_points_in_boxes
from mmpar.compat.ops.box_iou_rotated import box_iou_rotated
from mmpar.compat.ops.boxes3d.greedy import greedy_keep
from mmpar.compat.ops.boxes3d.voxels import group_ranks, voxel_members

__all__ = ["MODULES", "lidar_boxes_to_mmcv", "xyxyr_to_xywhr"]

_IOU3D = "mmdet3d.ops.iou3d.iou3d_cuda"
_ROIAWARE = "mmdet3d.ops.roiaware_pool3d.roiaware_pool3d_ext"
_EPS = 1e-8


def _check_boxes(where: str, name: str, boxes: Tensor, width: int) -> None:
    if not isinstance(boxes, Tensor) or not boxes.is_floating_point():
        found = boxes.dtype if isinstance(boxes, Tensor) else type(boxes).__name__
        raise TypeError(f"{where}: {name} must be a floating-point tensor, found {found}")
    if boxes.shape[-1] != width:
        raise ValueError(
            f"{where}: {name} must have {width} values per box, found {tuple(boxes.shape)}"
        )


def xyxyr_to_xywhr(boxes: Tensor) -> Tensor:
    """``(N, 5)`` ``(x1, y1, x2, y2, ry)`` -> ``(cx, cy, w, h, ry)``."""
    x1, y1, x2, y2, ry = boxes.unbind(-1)
    return torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, ry), -1)


def lidar_boxes_to_mmcv(boxes: Tensor) -> Tensor:
    """mmdet3d 0.17's ``(..., 7)`` ``(x, y, z, w, l, h, rz)`` -> mmcv's ``(x, y, z, l, w,
    h, -(rz + pi/2))``, the same box under mmcv's in-box test."""
    x, y, z, w, l, h, rz = boxes.unbind(-1)  # noqa: E741 - mmdet3d's name
    turned = (rz.double() + math.pi / 2).to(torch.float32).to(boxes.dtype)
    return torch.stack((x, y, z, l, w, h, -turned), -1)


# ------------------------------------------------------------------ iou3d_cuda


def _bev_overlaps(boxes_a: Tensor, boxes_b: Tensor, mode: str) -> Tensor:
    a, b = xyxyr_to_xywhr(boxes_a), xyxyr_to_xywhr(boxes_b)
    found = box_iou_rotated(a, b, mode=mode, clockwise=False)
    if mode == "iof":  # the intersection over a's area: times that area
        found = found * (a[:, 2] * a[:, 3])[:, None]
    return found


def boxes_overlap_bev_gpu(boxes_a: Tensor, boxes_b: Tensor, ans_overlap: Tensor) -> int:
    """``ans_overlap`` ``(M, N)`` <- the BEV intersection areas of ``(M, 5)`` and
    ``(N, 5)`` ``(x1, y1, x2, y2, ry)`` boxes. Returns 1."""
    where = f"{_IOU3D}.boxes_overlap_bev_gpu"
    _check_boxes(where, "boxes_a", boxes_a, 5)
    _check_boxes(where, "boxes_b", boxes_b, 5)
    write(where, "ans_overlap", ans_overlap, _bev_overlaps(boxes_a, boxes_b, "iof"))
    return 1


def boxes_iou_bev_gpu(boxes_a: Tensor, boxes_b: Tensor, ans_iou: Tensor) -> int:
    """``ans_iou`` ``(M, N)`` <- the BEV IoUs of ``(x1, y1, x2, y2, ry)`` boxes. Returns 1."""
    where = f"{_IOU3D}.boxes_iou_bev_gpu"
    _check_boxes(where, "boxes_a", boxes_a, 5)
    _check_boxes(where, "boxes_b", boxes_b, 5)
    write(where, "ans_iou", ans_iou, _bev_overlaps(boxes_a, boxes_b, "iou"))
    return 1


def _rotated_iou(a: Tensor, b: Tensor) -> Tensor:
    return box_iou_rotated(xyxyr_to_xywhr(a), xyxyr_to_xywhr(b), aligned=True, clockwise=False)


def _normal_iou(a: Tensor, b: Tensor) -> Tensor:
    """The kernel's ``iou_normal`` of aligned pairs: axis-aligned ``[x1, x2] x [y1, y2]``."""
    low = torch.fmax(a[:, :2], b[:, :2])
    high = torch.fmin(a[:, 2:4], b[:, 2:4])
    side = torch.fmax(high - low, high.new_zeros(()))
    inter = side[:, 0] * side[:, 1]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a + area_b - inter
    return inter / torch.fmax(union, union.new_tensor(_EPS))


def _extents(boxes: Tensor, turned: bool):
    """Closed axis-aligned extents holding each box's rectangle (turned, if so)."""
    c = xyxyr_to_xywhr(boxes)
    if turned:
        cos, sin = torch.cos(c[:, 4]).abs(), torch.sin(c[:, 4]).abs()
        half_x = (c[:, 2].abs() * cos + c[:, 3].abs() * sin) / 2
        half_y = (c[:, 2].abs() * sin + c[:, 3].abs() * cos) / 2
    else:
        half_x, half_y = c[:, 2].abs() / 2, c[:, 3].abs() / 2
    slack = 1e-5 * (c[:, :2].abs().sum(1) + c[:, 2:4].abs().sum(1)) + 1e-6
    return (
        c[:, 0] - half_x - slack,
        c[:, 0] + half_x + slack,
        c[:, 1] - half_y - slack,
        c[:, 1] + half_y + slack,
    )


def _nms(where: str, boxes: Tensor, keep: Tensor, thresh: float, turned: bool) -> int:
    _check_boxes(where, "boxes", boxes, 5)
    if keep.numel() < boxes.shape[0]:
        raise ValueError(
            f"{where}: keep must hold {boxes.shape[0]} indices, found {tuple(keep.shape)}"
        )
    ordered = boxes.detach().to(torch.float32)
    areas = (ordered[:, 2] - ordered[:, 0]) * (ordered[:, 3] - ordered[:, 1])
    iou = _rotated_iou if turned else _normal_iou
    kept = greedy_keep(ordered, _extents(ordered, turned), areas.abs(), iou, float(thresh))
    write(where, "keep", keep[: kept.numel()], kept)
    return int(kept.numel())


def nms_gpu(boxes: Tensor, keep: Tensor, nms_overlap_thresh: float, device_id: int) -> int:
    """Greedy NMS of ``(N, 5)`` score-sorted ``(x1, y1, x2, y2, ry)`` boxes by BEV IoU.

    Writes the kept positions (ascending) into ``keep[:K]`` (``(N,)`` long, any device)
    and returns ``K``. ``device_id`` is ignored.
    """
    return _nms(f"{_IOU3D}.nms_gpu", boxes, keep, nms_overlap_thresh, True)


def nms_normal_gpu(boxes: Tensor, keep: Tensor, nms_overlap_thresh: float, device_id: int) -> int:
    """As :func:`nms_gpu` with ``ry`` ignored (axis-aligned IoU)."""
    return _nms(f"{_IOU3D}.nms_normal_gpu", boxes, keep, nms_overlap_thresh, False)


# ------------------------------------------------------------------ roiaware_pool3d_ext


def points_in_boxes_gpu(
    boxes_tensor: Tensor, pts_tensor: Tensor, box_idx_of_points_tensor: Tensor
) -> int:
    """``box_idx_of_points_tensor`` ``(B, M)`` int32 <- the first of the ``(B, T, 7)``
    LiDAR boxes holding each of the ``(B, M, 3)`` points, -1 for none. Returns 1."""
    found = mmcv_points_in_boxes.points_in_boxes_part(pts_tensor, lidar_boxes_to_mmcv(boxes_tensor))
    write(
        f"{_ROIAWARE}.points_in_boxes_gpu",
        "box_idx_of_points_tensor",
        box_idx_of_points_tensor,
        found,
    )
    return 1


def points_in_boxes_batch(
    boxes_tensor: Tensor, pts_tensor: Tensor, box_idx_of_points_tensor: Tensor
) -> int:
    """``box_idx_of_points_tensor`` ``(B, M, T)`` int32 <- 1 where a point is in a box.
    Returns 1."""
    found = mmcv_points_in_boxes.points_in_boxes_all(pts_tensor, lidar_boxes_to_mmcv(boxes_tensor))
    write(
        f"{_ROIAWARE}.points_in_boxes_batch",
        "box_idx_of_points_tensor",
        box_idx_of_points_tensor,
        found,
    )
    return 1


def points_in_boxes_cpu(
    boxes_tensor: Tensor, pts_tensor: Tensor, pts_indices_tensor: Tensor
) -> int:
    """``pts_indices_tensor`` ``(T, M)`` int32 <- 1 where point ``m`` of ``(M, 3)`` is in
    box ``t`` of ``(T, 7)`` (unbatched, float32). Returns 1."""
    found = mmcv_points_in_boxes.points_in_boxes_cpu(
        pts_tensor[None], lidar_boxes_to_mmcv(boxes_tensor)[None]
    )
    write(f"{_ROIAWARE}.points_in_boxes_cpu", "pts_indices_tensor", pts_indices_tensor, found[0].T)
    return 1


def _layout(
    members: "tuple[Tensor, Tensor]", num_pts: int, pts_idx_of_voxels: Tensor
) -> "tuple[Tensor, Tensor, Tensor]":
    """Fill ``pts_idx_of_voxels`` (count in slot 0, then the points in index order);
    return the members sorted by (voxel, point) and the counts."""
    voxel, point = members
    order = torch.argsort(voxel * max(num_pts, 1) + point)
    voxel, point = voxel[order], point[order]
    flat = pts_idx_of_voxels.view(-1, pts_idx_of_voxels.shape[-1])
    count = torch.bincount(voxel, minlength=flat.shape[0])
    flat[:, 0] = count.to(flat.dtype)
    flat[voxel, 1 + group_ranks(voxel)] = point.to(flat.dtype)
    return voxel, point, count


def roiaware_forward(
    rois: Tensor,
    pts: Tensor,
    pts_feature: Tensor,
    argmax: Tensor,
    pts_idx_of_voxels: Tensor,
    pooled_features: Tensor,
    pool_method: int,
) -> int:
    """RoI-aware pooling of ``pts_feature`` ``(P, C)`` into ``pooled_features`` ``(N,
    out_x, out_y, out_z, C)`` (0 max, 1 avg), writing ``pts_idx_of_voxels`` ``(N, out_x,
    out_y, out_z, max_pts)`` and, for max, ``argmax`` (the pooled point, -1 for none). Returns 1."""
    where = f"{_ROIAWARE}.forward"
    if pool_method not in (0, 1):
        raise ValueError(f"{where}: pool_method must be 0 (max) or 1 (avg), found {pool_method!r}")
    _check_boxes(where, "rois", rois, 7)
    grid = tuple(pts_idx_of_voxels.shape[1:4])
    members = voxel_members(
        lidar_boxes_to_mmcv(rois.detach()),
        pts.detach().to(rois.dtype),
        grid,
        pts_idx_of_voxels.shape[-1] - 1,
    )
    voxel, point, count = _layout(members, pts.shape[0], pts_idx_of_voxels)
    channels = pts_feature.shape[1]
    features = pts_feature.detach().index_select(0, point)
    if pool_method == 1:
        pooled = features.new_zeros(count.numel(), channels).index_add_(0, voxel, features)
        write(
            where,
            "pooled_features",
            pooled_features,
            pooled / count.clamp(min=1)[:, None].to(pooled.dtype),
        )
        return 1
    values = features.masked_fill(torch.isnan(features), -torch.inf)
    where_idx = voxel[:, None].expand(-1, channels)
    best = values.new_full((count.numel(), channels), -torch.inf).scatter_reduce_(
        0, where_idx, values, "amax"
    )
    valid = best > -torch.inf
    last = torch.iinfo(torch.long).max
    candidate = torch.where(values == best.index_select(0, voxel), point[:, None], last)
    first = torch.full_like(best, last, dtype=torch.long).scatter_reduce_(
        0, where_idx, candidate, "amin"
    )
    write(where, "pooled_features", pooled_features, best.where(valid, 0))
    write(where, "argmax", argmax, first.where(valid, -1))
    return 1


def roiaware_backward(
    pts_idx_of_voxels: Tensor, argmax: Tensor, grad_out: Tensor, grad_in: Tensor, pool_method: int
) -> int:
    """Add the pooling's gradient for ``grad_out`` into ``grad_in`` ``(P, C)``: to each
    voxel's ``argmax`` point (max), or shared among its points (avg). Returns 1."""
    where = f"{_ROIAWARE}.backward"
    if pool_method not in (0, 1):
        raise ValueError(f"{where}: pool_method must be 0 (max) or 1 (avg), found {pool_method!r}")
    channels = grad_out.shape[-1]
    grad = grad_out.reshape(-1, channels).to(grad_in.dtype)
    if pool_method == 0:
        arg = argmax.reshape(-1).long()
        valid = arg >= 0
        target = (
            arg.view(-1, channels) * channels + torch.arange(channels, device=grad.device)
        ).reshape(-1)
        grad_in.view(-1).index_add_(0, target[valid], grad.reshape(-1)[valid])
        return 1
    flat = pts_idx_of_voxels.reshape(-1, pts_idx_of_voxels.shape[-1]).long()
    count = flat[:, 0]
    slot = torch.arange(flat.shape[1], device=flat.device)
    voxel, at = ((slot >= 1) & (slot <= count[:, None])).nonzero(as_tuple=True)
    share = grad.index_select(0, voxel) / count.index_select(0, voxel).clamp(min=1)[:, None].to(
        grad.dtype
    )
    grad_in.index_add_(0, flat[voxel, at], share)
    return 1


#: Full module name -> {pybind name: function}.
MODULES: Dict[str, Dict[str, Callable[..., int]]] = {
    _IOU3D: {
        "boxes_overlap_bev_gpu": boxes_overlap_bev_gpu,
        "boxes_iou_bev_gpu": boxes_iou_bev_gpu,
        "nms_gpu": nms_gpu,
        "nms_normal_gpu": nms_normal_gpu,
    },
    _ROIAWARE: {
        "forward": roiaware_forward,
        "backward": roiaware_backward,
        "points_in_boxes_gpu": points_in_boxes_gpu,
        "points_in_boxes_batch": points_in_boxes_batch,
        "points_in_boxes_cpu": points_in_boxes_cpu,
    },
}
