"""Differentiable rotated IoU: mmcv 1.7.2's ``mmcv.ops.diff_iou_rotated`` in plain torch.

The IoU of aligned pairs of rotated 2D boxes, and of 3D boxes rotated about their
vertical axis, differentiable in every box parameter. As in mmcv, a box's corners
turn by ``+angle`` with the rotation ``[[cos, -sin], [sin, cos]]`` (the clockwise
convention of ``box_iou_rotated``), areas are ``w * h`` (volumes ``w * h * l``),
and ``iou = inter / (area1 + area2 - inter)`` without an epsilon.

Differences from mmcv-full: mmcv sorts the intersection's vertices with a CUDA-only
kernel (``diff_iou_rotated_sort_vertices_forward``); here the intersection is
:func:`mmpar.compat.ops.geometry.polygon.convex_intersection_area` (polygon clipping), on
any device, computed in float32 (float64 for float64 input) and returned in the
input's dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.geometry.polygon import convex_intersection_area, rotated_box_corners

__all__ = ["diff_iou_rotated_2d", "diff_iou_rotated_3d"]


def _check_pair(op: str, names: tuple[str, str], box1: object, box2: object, size: int) -> None:
    layout = "(x, y, w, h, angle)" if size == 5 else "(x, y, z, w, h, l, angle)"
    shapes = []
    for name, box in zip(names, (box1, box2)):
        if not isinstance(box, Tensor) or not box.is_floating_point():
            found = box.dtype if isinstance(box, Tensor) else type(box).__name__
            raise TypeError(f"mmcv.ops.{op}: {name} must be a floating-point tensor, got {found}")
        if box.dim() != 3 or box.shape[-1] != size:
            raise ValueError(
                f"mmcv.ops.{op}: {name} must have shape (B, N, {size}) {layout}, "
                f"got {tuple(box.shape)}"
            )
        shapes.append(f"{tuple(box.shape)} on {box.device}")
    if shapes[0] != shapes[1]:
        raise ValueError(
            f"mmcv.ops.{op}: {names[0]} and {names[1]} must have the same shape and device, "
            f"got {shapes[0]} and {shapes[1]}"
        )


def _intersection(box1: Tensor, box2: Tensor) -> Tensor:
    """``(B, N)`` intersection areas of ``(B, N, 5)`` boxes, centred on each pair."""
    shift = (box1[..., :2] + box2[..., :2]) / 2
    corners1 = rotated_box_corners(torch.cat((box1[..., :2] - shift, box1[..., 2:]), -1))
    corners2 = rotated_box_corners(torch.cat((box2[..., :2] - shift, box2[..., 2:]), -1))
    return convex_intersection_area(corners1, corners2)


def diff_iou_rotated_2d(box1: Tensor, box2: Tensor) -> Tensor:
    """IoU of aligned pairs of rotated boxes, differentiable.

    Args:
        box1: ``(B, N, 5)`` float, ``(x, y, w, h, angle)``, the angle in radians.
        box2: ``(B, N, 5)``, the same dtype and device.

    Returns:
        ``(B, N)`` IoU of ``box1[b, n]`` and ``box2[b, n]``, in ``box1``'s dtype.
        Two empty boxes give NaN (0 / 0), as in mmcv.
    """
    _check_pair("diff_iou_rotated_2d", ("box1", "box2"), box1, box2, 5)
    dtype = float_compute_dtype(box1.dtype)
    b1, b2 = box1.to(dtype), box2.to(dtype)
    inter = _intersection(b1, b2)
    area1, area2 = b1[..., 2] * b1[..., 3], b2[..., 2] * b2[..., 3]
    return (inter / (area1 + area2 - inter)).to(box1.dtype)


def diff_iou_rotated_3d(box3d1: Tensor, box3d2: Tensor) -> Tensor:
    """IoU of aligned pairs of 3D boxes rotated about the z axis, differentiable.

    Args:
        box3d1: ``(B, N, 7)`` float, ``(x, y, z, w, h, l, angle)``: the centre, the
            sizes along x, y and z before rotation, and the angle in the xy plane.
        box3d2: ``(B, N, 7)``, the same dtype and device.

    Returns:
        ``(B, N)`` IoU of the boxes' volumes, in ``box3d1``'s dtype.
    """
    _check_pair("diff_iou_rotated_3d", ("box3d1", "box3d2"), box3d1, box3d2, 7)
    dtype = float_compute_dtype(box3d1.dtype)
    b1, b2 = box3d1.to(dtype), box3d2.to(dtype)
    plane = [0, 1, 3, 4, 6]
    inter = _intersection(b1[..., plane], b2[..., plane])
    top1, bottom1 = b1[..., 2] + b1[..., 5] / 2, b1[..., 2] - b1[..., 5] / 2
    top2, bottom2 = b2[..., 2] + b2[..., 5] / 2, b2[..., 2] - b2[..., 5] / 2
    z_overlap = (torch.minimum(top1, top2) - torch.maximum(bottom1, bottom2)).clamp(min=0)
    inter = inter * z_overlap
    volume1 = b1[..., 3] * b1[..., 4] * b1[..., 5]
    volume2 = b2[..., 3] * b2[..., 4] * b2[..., 5]
    return (inter / (volume1 + volume2 - inter)).to(box3d1.dtype)
