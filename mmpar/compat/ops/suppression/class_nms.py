"""batched_nms's parts: its checks, the classes moved apart, NMS class by class.

Not an mmcv module: :func:`mmpar.compat.ops.nms.batched_nms` is mmcv's op, built
from these.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.backend import float_compute_dtype, torchvision_ops
from mmpar.compat.ops.suppression.nms_args import descending, integer, nms_args

__all__ = [
    "check_batched",
    "check_nms_cfg",
    "finite_max",
    "move_classes_apart",
    "nms_class_by_class",
    "nms_per_class",
]

#: The columns of a box for each ``nms_cfg['type']``.
BOX_COLUMNS = {"nms": 4, "soft_nms": 4, "nms_rotated": 5, "nms_quadri": 8}


def check_batched(boxes: Tensor, scores: Tensor, idxs: Tensor, nms_type: Optional[str]) -> None:
    for name, value in (("boxes", boxes), ("scores", scores), ("idxs", idxs)):
        if not isinstance(value, Tensor):
            raise TypeError(
                f"mmcv.ops.batched_nms: {name} must be a torch.Tensor, got {type(value).__name__}"
            )
    for name, value in (("boxes", boxes), ("scores", scores)):
        if not value.is_floating_point():
            raise TypeError(
                f"mmcv.ops.batched_nms: {name} must be floating point, got {value.dtype}"
            )
    if idxs.dtype == torch.bool or idxs.is_complex():
        raise TypeError(
            "mmcv.ops.batched_nms: idxs must be class indices (an integer tensor), "
            f"got {idxs.dtype}"
        )
    columns = None if nms_type is None else BOX_COLUMNS[nms_type]
    if boxes.dim() != 2 or (columns is not None and boxes.shape[1] != columns):
        kind = f"nms_cfg type {nms_type!r}" if columns and columns > 4 else "this nms_cfg type"
        want = f"(N, {columns}) for {kind}" if columns is not None else "(N, C)"
        raise ValueError(
            f"mmcv.ops.batched_nms: boxes must have shape {want}, got {tuple(boxes.shape)}"
        )
    n = boxes.shape[0]
    for name, value in (("scores", scores), ("idxs", idxs)):
        if value.shape != (n,):
            raise ValueError(
                f"mmcv.ops.batched_nms: {name} must have shape (N,) = ({n},), "
                f"got {tuple(value.shape)}"
            )
        if value.device != boxes.device:
            raise ValueError(
                f"mmcv.ops.batched_nms: boxes and {name} must be on the same device, "
                f"got {boxes.device} and {value.device}"
            )


def check_nms_cfg(nms_type: str, nms_op: Callable[..., Any], cfg: Dict[str, Any]) -> None:
    """``cfg``'s keys are arguments of ``nms_op``, with its ``iou_threshold``."""
    params = inspect.signature(nms_op).parameters
    takes = list(params)[2:]  # after the boxes and the scores
    unknown = sorted(set(cfg) - set(takes) - {"iou_thr"})
    if unknown:
        raise TypeError(
            f"mmcv.ops.batched_nms: nms_cfg has {unknown}, which nms_cfg['type'] {nms_type!r} "
            f"does not take (it takes {takes}, with type, split_thr and class_agnostic)"
        )
    need = params.get("iou_threshold")
    if (
        need is not None
        and need.default is need.empty
        and not {"iou_threshold", "iou_thr"} & set(cfg)
    ):
        raise ValueError(
            f"mmcv.ops.batched_nms: nms_cfg must give iou_threshold for type {nms_type!r}"
        )


def finite_max(values: Tensor) -> Tensor:
    """The largest finite element of ``values`` (0 if none), on their device."""
    finite = torch.where(torch.isfinite(values), values, torch.full_like(values, -float("inf")))
    top = finite.max()
    return torch.where(torch.isfinite(top), top, torch.zeros_like(top))


def move_classes_apart(boxes: Tensor, idxs: Tensor) -> Tensor:
    """``boxes`` shifted by ``idxs * (max coordinate + 1)``, so that classes never overlap.

    Rotated boxes move by their centres, the max coordinate taken as mmcv does:
    ``max(x, y) + max(w, h)``; quadrilaterals move every vertex, as boxes do.
    Non-finite coordinates are left out of the max.
    """
    if boxes.shape[0] == 0:  # mmcv fails on the max of no boxes; there is nothing to move
        return boxes
    # float16 would overflow at a few classes of large images; the NMS runs in float32 anyway.
    moved = boxes.float() if boxes.dtype in (torch.float16, torch.bfloat16) else boxes
    if moved.shape[1] == 5:
        offsets = idxs.to(moved) * (finite_max(moved[:, :2]) + finite_max(moved[:, 2:4]) + 1)
        return torch.cat((moved[:, :2] + offsets[:, None], moved[:, 2:]), 1)
    offsets = idxs.to(moved) * (finite_max(moved) + 1)
    return moved + offsets[:, None]


def nms_per_class(boxes: Tensor, scores: Tensor, idxs: Tensor, cfg: Dict[str, Any]) -> Tensor:
    """mmcv's ``split_thr`` branch for ``type='nms'``: the kept indices, highest score first.

    One sort groups the boxes by class, by descending score within a class; then
    torchvision's kernel runs on each class's run of boxes: what
    :func:`mmpar.compat.ops.nms.nms` does class by class, without its per-call work.
    """
    cfg = dict(cfg)
    max_num = integer("batched_nms", "nms_cfg['max_num']", cfg.pop("max_num", -1))
    iou_threshold, score_threshold = nms_args(**cfg)
    boxes, all_scores = boxes.detach(), scores.detach()
    scores, chosen = all_scores, None
    if score_threshold > 0:
        chosen = torch.nonzero(scores > score_threshold).squeeze(1)
        boxes, scores, idxs = (t.index_select(0, chosen) for t in (boxes, scores, idxs))
    order = descending(scores)
    order = order.index_select(0, torch.sort(idxs.index_select(0, order), stable=True).indices)
    counts = torch.unique_consecutive(idxs.index_select(0, order), return_counts=True)[1]
    n = order.numel()
    dtype = float_compute_dtype(boxes.dtype) if n <= 2**24 else torch.float64
    ordered = boxes.index_select(0, order).to(dtype)
    # Strictly decreasing ranks: torchvision's kernel keeps the order given.
    ranks = torch.arange(n, 0, -1, dtype=dtype, device=boxes.device)
    torchvision_ops()
    kernel = torch.ops.torchvision.nms
    kept, start = [order[:0]], 0
    for count in counts.tolist():
        end = start + count
        kept.append(kernel(ordered[start:end], ranks[start:end], iou_threshold) + start)
        start = end
    keep = order.index_select(0, torch.cat(kept))
    if chosen is not None:
        keep = chosen.index_select(0, keep)
    keep = torch.sort(keep).values  # equal scores in input order
    keep = keep.index_select(0, descending(all_scores.index_select(0, keep)))
    return keep[:max_num] if max_num > 0 else keep


def nms_class_by_class(
    boxes: Tensor,
    boxes_for_nms: Tensor,
    scores: Tensor,
    idxs: Tensor,
    nms_op: Callable[..., Tuple[Tensor, Tensor]],
    cfg: Dict[str, Any],
) -> Tuple[Tensor, Tensor, Tensor]:
    """mmcv's ``split_thr`` branch: one NMS per class, merged and sorted by score.

    Returns:
        The kept ``(K, 4)`` boxes, ``(K,)`` scores after NMS and ``(K,)`` indices.
    """
    cfg = dict(cfg)
    max_num = integer("batched_nms", "nms_cfg['max_num']", cfg.pop("max_num", -1))
    kept = scores.new_zeros(scores.shape, dtype=torch.bool)
    # soft_nms lowers the scores it keeps: the merged result sorts by those.
    scores_after = scores.new_zeros(scores.shape)
    for cls in torch.unique(idxs):
        members = torch.nonzero(idxs == cls).view(-1)
        dets, keep = nms_op(boxes_for_nms[members], scores[members], **cfg)
        kept[members[keep]] = True
        scores_after[members[keep]] = dets[:, -1].to(scores_after.dtype)
    keep = torch.nonzero(kept).view(-1)
    keep = keep[descending(scores_after[keep])]
    kept_scores = scores_after[keep]
    if max_num > 0:
        keep, kept_scores = keep[:max_num], kept_scores[:max_num]
    return boxes[keep], kept_scores, keep
