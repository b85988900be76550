"""3D and bird's-eye-view box overlaps and NMS: mmcv 1.7.2's ``mmcv.ops.iou3d`` in plain torch.

mmcv 1.7.2's functions, with their box layouts:

* :func:`boxes_overlap_bev`, :func:`boxes_iou3d`, :func:`nms3d`, :func:`nms3d_normal`
  take ``(N, 7)`` boxes ``(x, y, z, dx, dy, dz, heading)``. Seen from above a box is the
  rectangle of centre ``(x, y)``, sides ``dx``, ``dy``, turned counter-clockwise by
  ``heading`` (:mod:`mmpar.compat.ops.boxes3d.bev`). :func:`boxes_iou3d` takes ``z`` as
  the box's centre height, as mmcv 1.7.2's Python does (``z +- dz / 2``):
  ``overlap_bev * height_overlap / max(vol_a + vol_b - overlap_3d, 1e-6)``.
* :func:`boxes_iou_bev`, :func:`nms_bev`, :func:`nms_normal_bev` are mmcv 1.7.2's
  deprecated wrappers (each warns ``DeprecationWarning`` as mmcv does): ``(N, 5)``
  boxes ``(x1, y1, x2, y2, ry)``, turned into ``(cx, cy, w, h, ry)`` and handed to
  ``box_iou_rotated``, ``nms_rotated`` and ``nms`` (mmpar's, as mmcv hands them to its own).

The BEV overlap is mmcv's kernel's (``box_overlap``, :mod:`mmpar.compat.ops.boxes3d.bev_kernel`):
the rectangles' edge crossings and the corners of each within ``1e-2`` (absolute) of
inside the other, sorted by angle about their mean, summed as a fan of triangles. It
is the exact intersection area but where a corner lies within ``1e-2`` outside the
other rectangle, which it counts (up to about ``1e-2`` times a side more). mmcv's own
test pins that: ``nms3d`` of its 555 random boxes keeps 176 with the kernel's overlap
and 179 with the exact one. The NMS are mmcv's greedy ones
(:mod:`mmpar.compat.ops.boxes3d.greedy`): the boxes are visited in the order of mmcv's
``scores.sort(0, descending=True)``, and a box is dropped when its IoU with a kept box
is strictly above the threshold (a float32), the IoU being ``overlap / fmax(area_a +
area_b - overlap, 1e-8)``: for :func:`nms3d` the kernel's BEV overlap, for
:func:`nms3d_normal` that of the rectangles with the heading set to 0
(``iou_normal``). Both return long indices, highest score first.

NaN/inf: as the kernels: a box with a NaN or infinite coordinate overlaps nothing (0)
in :func:`boxes_overlap_bev` and :func:`boxes_iou3d`, and in the NMS has an IoU of 0
with every box (it drops none and, with a threshold of 0 or more, is dropped by none).
A NaN score sorts first, as in mmcv's sort. A NaN threshold is a ``ValueError``.

Differences from mmcv-full: mmcv's kernels are CUDA only and float32 only; these run on
any device. The overlaps are computed in float32 (float64 for float64 boxes;
float16/bfloat16 in float32, returned in their dtype) and are differentiable; where
CUDA fuses a multiply-add the last bit may differ. The NMS compute in float32, as the
kernels. Bad input is a ``TypeError``/``ValueError`` (mmcv asserts the widths and fails
in its kernel on other dtypes).
"""

from __future__ import annotations

import warnings
from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from mmpar.compat.ops.backend import check_int
from mmpar.compat.ops.box_iou_rotated import box_iou_rotated
from mmpar.compat.ops.boxes3d.args import BOX_LAYOUT, check_same, check_tensor, check_threshold
from mmpar.compat.ops.boxes3d.bev import bev_extents, bev_overlap_areas
from mmpar.compat.ops.boxes3d.bev_kernel import kernel_bev_iou, kernel_normal_iou
from mmpar.compat.ops.boxes3d.greedy import greedy_keep
from mmpar.compat.ops.nms import nms, nms_rotated

__all__ = [
    "boxes_iou3d",
    "boxes_iou_bev",
    "boxes_overlap_bev",
    "nms3d",
    "nms3d_normal",
    "nms_bev",
    "nms_normal_bev",
]

_XYXYR = "(x1, y1, x2, y2, ry)"
# mmcv's Python's floor of a 3D union.
_EPS_3D = 1e-6


def _check_pair(op: str, boxes_a: Tensor, boxes_b: Tensor, width: int, layout: str) -> None:
    check_tensor(op, "boxes_a", boxes_a, ("M", width), layout)
    check_tensor(op, "boxes_b", boxes_b, ("N", width), layout)
    check_same(op, (), True, boxes_a=boxes_a, boxes_b=boxes_b)


def boxes_overlap_bev(boxes_a: Tensor, boxes_b: Tensor) -> Tensor:
    """The area of the overlap of every pair of boxes seen from above.

    Args:
        boxes_a: ``(M, 7)`` float ``(x, y, z, dx, dy, dz, heading)``.
        boxes_b: ``(N, 7)`` float, same dtype and device.

    Returns:
        ``(M, N)`` overlap areas of the rotated rectangles as mmcv's kernel measures them
        (the intersection, and corners within ``1e-2`` outside it), in the boxes' dtype.

    Raises:
        TypeError: not floating-point tensors, or different dtypes.
        ValueError: not ``(., 7)``, or on different devices.
    """
    _check_pair("boxes_overlap_bev", boxes_a, boxes_b, 7, BOX_LAYOUT)
    return bev_overlap_areas(boxes_a, boxes_b)


def boxes_iou3d(boxes_a: Tensor, boxes_b: Tensor) -> Tensor:
    """The 3D IoU of every pair of boxes, ``z`` being the boxes' centre height.

    Args:
        boxes_a: ``(M, 7)`` float ``(x, y, z, dx, dy, dz, heading)``.
        boxes_b: ``(N, 7)`` float, same dtype and device.

    Returns:
        ``(M, N)``: ``overlap_bev * height_overlap / max(vol_a + vol_b - that, 1e-6)``.

    Raises:
        TypeError: not floating-point tensors, or different dtypes.
        ValueError: not ``(., 7)``, or on different devices.
    """
    _check_pair("boxes_iou3d", boxes_a, boxes_b, 7, BOX_LAYOUT)
    top_a = (boxes_a[:, 2] + boxes_a[:, 5] / 2)[:, None]
    bottom_a = (boxes_a[:, 2] - boxes_a[:, 5] / 2)[:, None]
    top_b = (boxes_b[:, 2] + boxes_b[:, 5] / 2)[None]
    bottom_b = (boxes_b[:, 2] - boxes_b[:, 5] / 2)[None]
    height = (torch.minimum(top_a, top_b) - torch.maximum(bottom_a, bottom_b)).clamp(min=0)
    overlap = bev_overlap_areas(boxes_a, boxes_b) * height
    vol_a = (boxes_a[:, 3] * boxes_a[:, 4] * boxes_a[:, 5])[:, None]
    vol_b = (boxes_b[:, 3] * boxes_b[:, 4] * boxes_b[:, 5])[None]
    return overlap / (vol_a + vol_b - overlap).clamp(min=_EPS_3D)


def _check_nms(op: str, boxes: Tensor, scores: Tensor, width: int, layout: str) -> None:
    check_tensor(op, "boxes", boxes, ("N", width), layout)
    check_tensor(op, "scores", scores, ("N",))
    check_same(
        op, [("number of boxes", ("boxes", 0), ("scores", 0))], False, boxes=boxes, scores=scores
    )


def _sorted(boxes: Tensor, scores: Tensor) -> Tuple[Tensor, Tensor]:
    """mmcv's visiting order, and the boxes in it in float32 (its kernels' dtype)."""
    order = scores.detach().sort(0, descending=True)[1]
    return order, boxes.detach().index_select(0, order).to(torch.float32)


def _float32(value: float) -> float:
    """``value`` rounded to float32: mmcv's kernels take the threshold as a C float."""
    return float(np.float32(value))


def nms3d(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy NMS of 3D boxes by their rotated BEV IoU (mmcv's kernel's overlap).

    Args:
        boxes: ``(N, 7)`` float ``(x, y, z, dx, dy, dz, heading)``.
        scores: ``(N,)`` float, on the device of ``boxes``.
        iou_threshold: A box whose BEV IoU with a kept box is above this is dropped.

    Returns:
        ``(K,)`` long indices of the kept boxes, highest score first.

    Raises:
        TypeError: bad types or dtypes.
        ValueError: bad shapes or devices, or a NaN ``iou_threshold``.
    """
    _check_nms("nms3d", boxes, scores, 7, BOX_LAYOUT)
    threshold = _float32(check_threshold("nms3d", "iou_threshold", iou_threshold))
    order, ordered = _sorted(boxes, scores)
    areas = ordered[:, 3] * ordered[:, 4]
    keep = greedy_keep(ordered, bev_extents(ordered), areas, kernel_bev_iou, threshold)
    return order.index_select(0, keep)


def nms3d_normal(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy NMS of 3D boxes by the IoU of their BEV rectangles with the heading set to 0.

    Args:
        boxes: ``(N, 7)`` float ``(x, y, z, dx, dy, dz, heading)``; the heading is ignored.
        scores: ``(N,)`` float, on the device of ``boxes``.
        iou_threshold: A box whose IoU with a kept box is above this is dropped.

    Returns:
        ``(K,)`` long indices of the kept boxes, highest score first.

    Raises:
        TypeError: bad types or dtypes.
        ValueError: bad shapes or devices, or a NaN ``iou_threshold``.
    """
    _check_nms("nms3d_normal", boxes, scores, 7, BOX_LAYOUT)
    threshold = _float32(check_threshold("nms3d_normal", "iou_threshold", iou_threshold))
    order, ordered = _sorted(boxes, scores)
    half = ordered[:, 3:5] / 2
    low, high = ordered[:, :2] - half, ordered[:, :2] + half
    low, high = torch.minimum(low, high), torch.maximum(low, high)
    extents = (low[:, 0], high[:, 0], low[:, 1], high[:, 1])
    areas = ordered[:, 3] * ordered[:, 4]
    keep = greedy_keep(ordered, extents, areas, kernel_normal_iou, threshold)
    return order.index_select(0, keep)


def _xyxyr2xywhr(boxes: Tensor) -> Tensor:
    """``(N, 5)`` ``(x1, y1, x2, y2, ry)`` -> ``(cx, cy, w, h, ry)``, warning as mmcv does."""
    warnings.warn(
        "This function is deprecated and will be removed in the future.",
        DeprecationWarning,
        stacklevel=3,
    )
    return torch.stack(
        (
            (boxes[:, 0] + boxes[:, 2]) / 2,
            (boxes[:, 1] + boxes[:, 3]) / 2,
            boxes[:, 2] - boxes[:, 0],
            boxes[:, 3] - boxes[:, 1],
            boxes[:, 4],
        ),
        dim=-1,
    )


def boxes_iou_bev(boxes_a: Tensor, boxes_b: Tensor) -> Tensor:
    """BEV IoU of every pair of ``(x1, y1, x2, y2, ry)`` boxes (deprecated in mmcv 1.7.2).

    Args:
        boxes_a: ``(M, 5)`` float ``(x1, y1, x2, y2, ry)``.
        boxes_b: ``(N, 5)`` float, same dtype and device.

    Returns:
        ``(M, N)``: ``box_iou_rotated`` of the boxes as ``(cx, cy, w, h, ry)``.

    Raises:
        TypeError: not floating-point tensors, or different dtypes.
        ValueError: not ``(., 5)``, or on different devices.
    """
    _check_pair("boxes_iou_bev", boxes_a, boxes_b, 5, _XYXYR)
    warnings.warn(
        "`iou3d.boxes_iou_bev` is deprecated and will be removed in the future. "
        "Please, use `box_iou_rotated.box_iou_rotated`.",
        DeprecationWarning,
        stacklevel=2,
    )
    return box_iou_rotated(_xyxyr2xywhr(boxes_a), _xyxyr2xywhr(boxes_b))


def nms_bev(
    boxes: Tensor,
    scores: Tensor,
    thresh: float,
    pre_max_size: Optional[int] = None,
    post_max_size: Optional[int] = None,
) -> Tensor:
    """NMS of ``(x1, y1, x2, y2, ry)`` boxes by rotated IoU (deprecated in mmcv 1.7.2).

    The ``pre_max_size`` highest-scored boxes are handed to ``nms_rotated`` (whose CPU
    path drops an IoU ``>= thresh``, as mmcv's CPU kernel, and ``> thresh`` elsewhere).

    Args:
        boxes: ``(N, 5)`` float ``(x1, y1, x2, y2, ry)``.
        scores: ``(N,)`` float, on the device of ``boxes``.
        thresh: The IoU threshold.
        pre_max_size: Keep only this many highest-scored boxes before NMS (None: all).
        post_max_size: Return at most this many kept boxes (None: all).

    Returns:
        ``(K,)`` long indices into ``boxes``, highest score first.

    Raises:
        TypeError: bad types or dtypes.
        ValueError: bad shapes, devices or sizes, or a NaN ``thresh``.
    """
    _check_nms("nms_bev", boxes, scores, 5, _XYXYR)
    thresh = check_threshold("nms_bev", "thresh", thresh)
    sizes = {"pre_max_size": pre_max_size, "post_max_size": post_max_size}
    for name, size in sizes.items():
        if size is not None:
            check_int("mmcv.ops.nms_bev", name, size, 0)
    warnings.warn(
        "`iou3d.nms_bev` is deprecated and will be removed in the future. "
        "Please, use `nms.nms_rotated`.",
        DeprecationWarning,
        stacklevel=2,
    )
    order = scores.sort(0, descending=True)[1]
    if pre_max_size is not None:
        order = order[:pre_max_size]
    keep = order[nms_rotated(_xyxyr2xywhr(boxes)[order], scores[order], thresh)[1]]
    return keep if post_max_size is None else keep[:post_max_size]


def nms_normal_bev(boxes: Tensor, scores: Tensor, thresh: float) -> Tensor:
    """NMS of ``(x1, y1, x2, y2, ry)`` boxes ignoring ``ry`` (deprecated in mmcv 1.7.2).

    Args:
        boxes: ``(N, 5)`` float ``(x1, y1, x2, y2, ry)``.
        scores: ``(N,)`` float, on the device of ``boxes``.
        thresh: A box whose IoU with a kept box is above this is dropped.

    Returns:
        ``(K,)`` long indices into ``boxes``, highest score first: mmpar's ``nms`` of
        the ``(x1, y1, x2, y2)`` boxes.

    Raises:
        TypeError: bad types or dtypes.
        ValueError: bad shapes or devices, or a ``thresh`` outside ``[0, 1]``.
    """
    _check_nms("nms_normal_bev", boxes, scores, 5, _XYXYR)
    warnings.warn(
        "`iou3d.nms_normal_bev` is deprecated and will be removed in the future. "
        "Please, use `nms.nms`.",
        DeprecationWarning,
        stacklevel=2,
    )
    return nms(boxes[:, :-1], scores, thresh)[1]
