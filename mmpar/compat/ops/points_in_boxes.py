"""Which 3D boxes hold each point: mmcv 1.7.2's ``mmcv.ops.points_in_boxes`` in plain torch.

Boxes are ``(x, y, z, x_size, y_size, z_size, rz)`` with ``(x, y, z)`` the centre of
the box's bottom face (LiDAR/depth coordinates). A point is in a box by the test of
mmcv's kernels (``check_pt_in_box3d``), computed with the same operations:
``|pz - (z + z_size / 2)| <= z_size / 2`` (the top and bottom faces are inside), and
the point's offset turned by ``-rz`` strictly inside ``(-x_size / 2, x_size / 2)``
and ``(-y_size / 2, y_size / 2)`` (the side faces are outside), without a margin.
See :mod:`mmpar.compat.ops.boxes3d.frame`.

* :func:`points_in_boxes_part`: ``(B, M)`` int32, the first box holding each point, or -1;
* :func:`points_in_boxes_all`: ``(B, M, T)`` int32, 1 where the point is in the box;
* :func:`points_in_boxes_cpu`: the same ``(B, M, T)`` answer, computed in float32 (mmcv
  casts both inputs with ``.float()``) and, as mmcv's, a transposed view of a
  ``(B, T, M)`` tensor (strides ``(T * M, 1, M)``).

NaN/inf: as the kernels: a NaN x or y coordinate (of the point or the box) is in no
box; a NaN z or z_size does not fail the z test, which mmcv writes "not above", so
the x-y test decides. An infinite coordinate is compared as a number.

Differences from mmcv-full: ``points_in_boxes_part`` and ``points_in_boxes_all`` run on
any device (mmcv's are CUDA only) and compute float16/bfloat16 inputs in float32
(mmcv's CUDA kernel in the input's type), float64 in float64 throughout (mmcv's CUDA
kernel rounds ``|pz - cz|`` to float32 with ``fabsf``). ``cos(-rz)`` and ``sin(-rz)``
are rounded from float64, as the C library of mmcv's CPU kernel rounds them:
``points_in_boxes_cpu`` gave mmcv-full's CPU kernel's answer on each of 4 million
(point, box) pairs, half the points on faces, edges, tops and bottoms of turned boxes
(torch's float32 ``cos`` is an ulp off for ~5% of angles, which moved 213 of those
answers); CUDA's ``cosf`` may be an ulp off too. Bad input is a
``TypeError``/``ValueError`` (mmcv asserts the shapes and fails in its kernel on other
dtypes). The test runs on at most ``boxes3d.pairs.CHUNK_PAIRS`` (box, point) pairs at
once.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.boxes3d.args import BOX_LAYOUT, check_same, check_tensor
from mmpar.compat.ops.boxes3d.pairs import inside_mask_rows

__all__ = ["points_in_boxes_all", "points_in_boxes_cpu", "points_in_boxes_part"]


def _check(op: str, points: Tensor, boxes: Tensor, same_dtype: bool) -> None:
    check_tensor(op, "points", points, ("B", "M", 3), "(x, y, z)")
    check_tensor(op, "boxes", boxes, ("B", "T", 7), BOX_LAYOUT)
    check_same(
        op, [("batch size", ("points", 0), ("boxes", 0))], same_dtype, points=points, boxes=boxes
    )


def _mask(points: Tensor, boxes: Tensor, dtype: torch.dtype) -> Tensor:
    """``(B, T, M)`` bool: whether point ``m`` of batch element ``b`` is in its box ``t``."""
    batch, n = points.shape[:2]
    per_batch = boxes.shape[1]
    points, boxes = points.detach().to(dtype), boxes.detach().to(dtype)
    mask = torch.zeros(batch * per_batch, n, dtype=torch.bool, device=points.device)
    for start, rows in inside_mask_rows(points, boxes):
        mask[start : start + rows.shape[0]] = rows
    return mask.view(batch, per_batch, n)


def points_in_boxes_part(points: Tensor, boxes: Tensor) -> Tensor:
    """The first box (lowest index) that holds each point.

    Args:
        points: ``(B, M, 3)`` float ``(x, y, z)``, LiDAR/depth coordinates.
        boxes: ``(B, T, 7)`` float ``(x, y, z, x_size, y_size, z_size, rz)``, ``(x, y, z)``
            the bottom centre; same dtype and device as ``points``.

    Returns:
        ``(B, M)`` int32: the index of the first box of its batch element holding each
        point, -1 for none.

    Raises:
        TypeError: not floating-point tensors, or different dtypes.
        ValueError: bad shapes, batch sizes or devices.
    """
    _check("points_in_boxes_part", points, boxes, True)
    batch, n = points.shape[:2]
    per_batch = boxes.shape[1]
    dtype = float_compute_dtype(points.dtype)
    points_d, boxes_d = points.detach().to(dtype), boxes.detach().to(dtype)
    # The smallest holding box index per (batch element, point); T for none.
    first = torch.full((batch, n), per_batch, dtype=torch.int32, device=points.device)
    for start, rows in inside_mask_rows(points_d, boxes_d):
        row = torch.arange(start, start + rows.shape[0], device=points.device)
        index = torch.where(rows, (row % per_batch).to(torch.int32)[:, None], per_batch)
        owner = (row // per_batch)[:, None].expand_as(index)
        first.scatter_reduce_(0, owner, index, "amin")
    return torch.where(first == per_batch, -1, first).to(torch.int32)


def points_in_boxes_all(points: Tensor, boxes: Tensor) -> Tensor:
    """Every box that holds each point.

    Args:
        points: ``(B, M, 3)`` float ``(x, y, z)``, LiDAR/depth coordinates.
        boxes: ``(B, T, 7)`` float bottom-centre boxes, same dtype and device.

    Returns:
        ``(B, M, T)`` int32, contiguous: 1 where point ``m`` is in box ``t`` of its
        batch element, else 0.

    Raises:
        TypeError: not floating-point tensors, or different dtypes.
        ValueError: bad shapes, batch sizes or devices.
    """
    _check("points_in_boxes_all", points, boxes, True)
    mask = _mask(points, boxes, float_compute_dtype(points.dtype))
    return mask.transpose(1, 2).to(torch.int32, memory_format=torch.contiguous_format)


def points_in_boxes_cpu(points: Tensor, boxes: Tensor) -> Tensor:
    """Every box that holds each point, computed in float32 as mmcv's CPU kernel.

    Args:
        points: ``(B, M, 3)`` float ``(x, y, z)``; cast to float32, as mmcv does.
        boxes: ``(B, T, 7)`` float bottom-centre boxes on the device of ``points``
            (any float dtype: cast to float32 too).

    Returns:
        ``(B, M, T)`` int32: 1 where point ``m`` is in box ``t`` of its batch element,
        else 0; as mmcv's, the transpose of a contiguous ``(B, T, M)`` tensor.

    Raises:
        TypeError: not floating-point tensors.
        ValueError: bad shapes, batch sizes or devices.
    """
    _check("points_in_boxes_cpu", points, boxes, False)
    return _mask(points, boxes, torch.float32).to(torch.int32).transpose(1, 2)
