"""Box overlaps: mmcv 1.7.2's ``mmcv.ops.bbox`` in plain torch.

:func:`bbox_overlaps` follows mmcv's CPU kernel (``bbox_overlaps_cpu.cpp``): no
epsilon in the denominator, ``offset`` added to every width and height, and an
aligned result of shape ``(m,)``. Unlike mmcv's kernel it is differentiable.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.backend import ArgumentError

__all__ = ["bbox_overlaps"]

_MODES = ("iou", "iof")


def _check_boxes(name: str, boxes: object) -> Tensor:
    """``boxes`` if it is ``(n, 4)`` float, or empty (``n == 0``, any shape); else an error."""
    if not isinstance(boxes, Tensor):
        raise TypeError(
            f"mmcv.ops.bbox_overlaps: {name} must be a torch.Tensor, got {type(boxes).__name__}"
        )
    if not boxes.is_floating_point():
        raise TypeError(
            f"mmcv.ops.bbox_overlaps: {name} must be a floating-point tensor, got {boxes.dtype}"
        )
    empty = boxes.dim() >= 1 and boxes.shape[0] == 0
    if not empty and (boxes.dim() != 2 or boxes.shape[1] != 4):
        raise ArgumentError(
            f"mmcv.ops.bbox_overlaps: {name} must have shape (n, 4) or be empty, "
            f"got {tuple(boxes.shape)}"
        )
    return boxes


def _areas(boxes: Tensor, offset: int) -> Tensor:
    """``(n,)`` areas of ``(n, 4)`` boxes whose width is ``x2 - x1 + offset``."""
    return (boxes[:, 2] - boxes[:, 0] + offset) * (boxes[:, 3] - boxes[:, 1] + offset)


def bbox_overlaps(
    bboxes1: Tensor,
    bboxes2: Tensor,
    mode: str = "iou",
    aligned: bool = False,
    offset: int = 0,
) -> Tensor:
    """Overlaps between two sets of boxes: IoU, or intersection over the first box's area.

    Args:
        bboxes1: ``(m, 4)`` float, ``x1, y1, x2, y2``; or empty (``m == 0``).
        bboxes2: ``(n, 4)`` float, same layout and dtype as ``bboxes1``; or empty.
            With ``aligned``, ``n == m``.
        mode: ``"iou"`` (intersection over union) or ``"iof"`` (intersection over
            the area of the box from ``bboxes1``).
        aligned: Overlap of each pair ``(bboxes1[i], bboxes2[i])`` instead of every
            pair.
        offset: 0 or 1; a box's width is ``x2 - x1 + offset`` (1: legacy integer
            pixel boxes).

    Returns:
        ``(m, n)`` overlaps, or ``(m,)`` with ``aligned``, in ``bboxes1``'s dtype.
        A pair whose denominator is 0 (two empty boxes) gives NaN, as in mmcv.
        A box with a NaN coordinate gives NaN with every box, and one with an
        infinite coordinate what the formula gives (0 or NaN), as mmcv's CPU
        path (on every device here).

    Raises:
        TypeError: A box set is not a floating-point tensor, or the dtypes differ.
        ValueError: A bad shape, ``mode``, ``offset`` or box count
            (``ArgumentError``, an ``AssertionError`` too, as mmcv asserts them),
            or different devices.
    """
    if mode not in _MODES:
        raise ArgumentError(f"mmcv.ops.bbox_overlaps: mode must be 'iou' or 'iof', got {mode!r}")
    if offset not in (0, 1) or isinstance(offset, bool):
        raise ArgumentError(f"mmcv.ops.bbox_overlaps: offset must be 0 or 1, got {offset!r}")
    bboxes1 = _check_boxes("bboxes1", bboxes1)
    bboxes2 = _check_boxes("bboxes2", bboxes2)
    rows, cols = bboxes1.shape[0], bboxes2.shape[0]
    if aligned and rows != cols:
        raise ArgumentError(
            "mmcv.ops.bbox_overlaps: with aligned=True bboxes1 and bboxes2 must have as many "
            f"boxes, got {rows} and {cols}"
        )
    if rows * cols == 0:
        # No elements, but on both inputs' graphs: backward gives them zero gradients.
        empty = bboxes1.reshape(-1)[:0] + bboxes2.reshape(-1)[:0].to(bboxes1)
        return empty.reshape((rows,) if aligned else (rows, cols))
    if bboxes1.dtype != bboxes2.dtype:
        raise TypeError(
            "mmcv.ops.bbox_overlaps: bboxes1 and bboxes2 must have the same dtype, "
            f"got {bboxes1.dtype} and {bboxes2.dtype}"
        )
    if bboxes1.device != bboxes2.device:
        raise ValueError(
            "mmcv.ops.bbox_overlaps: bboxes1 and bboxes2 must be on the same device, "
            f"got {bboxes1.device} and {bboxes2.device}"
        )
    out_dtype = bboxes1.dtype
    # float16/bfloat16 areas overflow or lose the small intersections: compute in float32.
    if out_dtype in (torch.float16, torch.bfloat16):
        bboxes1, bboxes2 = bboxes1.float(), bboxes2.float()
    return _overlaps(bboxes1, bboxes2, mode, aligned, offset).to(out_dtype)


def _overlaps(b1: Tensor, b2: Tensor, mode: str, aligned: bool, offset: int) -> Tensor:
    """The overlaps of non-empty ``(m, 4)`` and ``(n, 4)`` boxes of one dtype and device."""
    area1, area2 = _areas(b1, offset), _areas(b2, offset)
    if not aligned:
        # Every pair: (m, 1, .) against (n, .) broadcasts to (m, n, .).
        b1, area1 = b1[:, None], area1[:, None]
    lt = torch.maximum(b1[..., :2], b2[..., :2])
    rb = torch.minimum(b1[..., 2:], b2[..., 2:])
    wh = (rb - lt + offset).clamp(min=0)
    overlap = wh[..., 0] * wh[..., 1]
    if mode == "iou":
        return overlap / (area1 + area2 - overlap)
    return overlap / area1
