"""Non-maximum suppression: mmcv 1.7.2's ``mmcv.ops.nms`` on torchvision and plain torch.

* :func:`nms` runs ``torchvision.ops.nms``; boxes of equal score are visited in
  input order (lower index first), on every device (mmcv leaves that order to an
  unstable sort). ``offset=1`` is not supported.
* :func:`soft_nms` replays mmcv's CPU kernel (``softnms_cpu``) step by step: the
  same selection, rescoring, dropping below ``min_score`` and tie order. It runs
  on the CPU, as mmcv's does, and returns on the input's device.
* :func:`batched_nms` is mmcv's: the per-class coordinate offsets, ``split_thr``,
  ``class_agnostic`` and ``max_num`` in ``nms_cfg``, and ``nms_cfg=None``.
* :func:`nms_match` groups boxes as mmcv's ``nms_match_cpu`` does.
* :func:`nms_rotated` is :mod:`mmpar.compat.ops.rotated_nms`'s, re-exported here;
  ``batched_nms`` runs it on rotated ``(N, 5)`` boxes.

mmcv's kernels take float32 only; here float64 runs in float64, and
float16/bfloat16 run in float32 (the returned boxes keep the input's dtype).
``nms_quadri`` is not supplied.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from mmpar.compat.ops.backend import (
    float_compute_dtype,
    renamed_kwargs,
    torchvision_ops,
    unsupported,
)
from mmpar.compat.ops.rotated_nms import nms_rotated

__all__ = ["batched_nms", "nms", "nms_match", "nms_rotated", "soft_nms"]

ArrayLike = Union[Tensor, np.ndarray]

#: soft_nms's methods, numbered as mmcv's kernel numbers them.
_SOFT_NMS_METHODS = {"naive": 0, "linear": 1, "gaussian": 2}
#: ``nms_cfg['type']`` values that mmcv resolves and mmpar does not supply.
_NOT_SUPPLIED = ("nms_quadri",)


#: Lets a function take mmcv's deprecated keyword ``iou_thr`` for ``iou_threshold``.
_accepts_iou_thr = renamed_kwargs(
    {"iou_thr": "iou_threshold"},
    "mmcv.ops.{owner}: got both {old} (deprecated) and {new}; pass {new} only",
)


def _as_tensors(op: str, boxes: ArrayLike, scores: ArrayLike) -> Tuple[Tensor, Tensor, bool]:
    """``boxes`` ``(N, 4)`` and ``scores`` ``(N,)`` as tensors, and whether ``boxes`` was numpy."""
    for name, value in (("boxes", boxes), ("scores", scores)):
        if not isinstance(value, (Tensor, np.ndarray)):
            raise TypeError(
                f"mmcv.ops.{op}: {name} must be a torch.Tensor or a numpy.ndarray, "
                f"got {type(value).__name__}"
            )
    is_numpy = isinstance(boxes, np.ndarray)
    boxes_t = torch.from_numpy(boxes) if isinstance(boxes, np.ndarray) else boxes
    scores_t = torch.from_numpy(scores) if isinstance(scores, np.ndarray) else scores
    if boxes_t.dim() != 2 or boxes_t.shape[1] != 4:
        raise ValueError(f"mmcv.ops.{op}: boxes must have shape (N, 4), got {tuple(boxes_t.shape)}")
    if scores_t.dim() != 1 or scores_t.shape[0] != boxes_t.shape[0]:
        raise ValueError(
            f"mmcv.ops.{op}: scores must have shape (N,) = ({boxes_t.shape[0]},), "
            f"got {tuple(scores_t.shape)}"
        )
    for name, value in (("boxes", boxes_t), ("scores", scores_t)):
        if not value.is_floating_point():
            raise TypeError(f"mmcv.ops.{op}: {name} must be floating point, got {value.dtype}")
    if scores_t.device != boxes_t.device:
        raise ValueError(
            f"mmcv.ops.{op}: boxes and scores must be on the same device, "
            f"got {boxes_t.device} and {scores_t.device}"
        )
    return boxes_t, scores_t, is_numpy


def _check_offset(op: str, offset: int, supported: Tuple[int, ...]) -> None:
    if offset in supported:
        return
    if offset in (0, 1):
        raise unsupported(op, "offset", offset, " or ".join(f"offset={o}" for o in supported))
    raise ValueError(f"mmcv.ops.{op}: offset must be 0 or 1, got {offset!r}")


def _descending(scores: Tensor) -> Tensor:
    """Indices of ``scores`` from highest to lowest; equal scores in input order."""
    return torch.sort(scores, descending=True, stable=True).indices


def _greedy_nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """torchvision's greedy NMS with ties pinned to input order.

    Args:
        boxes: ``(N, 4)`` float, ``x1, y1, x2, y2``.
        scores: ``(N,)`` float.
        iou_threshold: A box is dropped when its IoU with a kept box is above this.

    Returns:
        ``(K,)`` long indices into ``boxes``, highest score first.
    """
    n = boxes.shape[0]
    if n == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    order = _descending(scores)
    # torchvision sorts the scores again, with no promise of stability; handing it
    # strictly decreasing ranks in place of the scores keeps the order above. float32
    # holds the ranks exactly up to 2**24 boxes; beyond that they run in float64.
    dtype = float_compute_dtype(boxes.dtype) if n <= 2**24 else torch.float64
    ranks = torch.arange(n, 0, -1, dtype=dtype, device=boxes.device)
    keep = torchvision_ops().nms(boxes.index_select(0, order).to(dtype), ranks, iou_threshold)
    return order.index_select(0, keep)


@_accepts_iou_thr
def nms(
    boxes: ArrayLike,
    scores: ArrayLike,
    iou_threshold: float,
    offset: int = 0,
    score_threshold: float = 0,
    max_num: int = -1,
) -> Tuple[ArrayLike, ArrayLike]:
    """Greedy non-maximum suppression.

    Visits the boxes from the highest score down and drops every later box whose
    IoU with a kept one is above ``iou_threshold``; boxes of equal score are
    visited in input order. Runs on the device of ``boxes``.

    Args:
        boxes: ``(N, 4)`` float tensor or array, ``x1, y1, x2, y2``.
        scores: ``(N,)`` float, on the device of ``boxes``.
        iou_threshold: IoU above which the lower-scored box is dropped. The
            deprecated keyword ``iou_thr`` is accepted, with a DeprecationWarning.
        offset: 0 only (mmcv's ``offset=1`` raises ``UnsupportedOpError``).
        score_threshold: If above 0, only boxes whose score is above it take part.
        max_num: If above 0, keep at most this many boxes.

    Returns:
        ``dets`` ``(K, 5)``: the kept boxes and their scores, highest score first,
        and ``inds`` ``(K,)`` long: their indices in ``boxes``. Numpy arrays if
        ``boxes`` is one, else tensors on its device.

    Raises:
        UnsupportedOpError: ``offset=1``.
        TypeError, ValueError: Bad types, shapes or devices.
    """
    boxes_t, scores_t, is_numpy = _as_tensors("nms", boxes, scores)
    _check_offset("nms", offset, (0,))
    inds = _nms_inds(boxes_t, scores_t, float(iou_threshold), score_threshold, max_num)
    dets = torch.cat((boxes_t.index_select(0, inds), scores_t.index_select(0, inds)[:, None]), 1)
    if is_numpy:
        return dets.cpu().numpy(), inds.cpu().numpy()
    return dets, inds


def _nms_inds(
    boxes: Tensor, scores: Tensor, iou_threshold: float, score_threshold: float, max_num: int
) -> Tensor:
    """The ``(K,)`` indices :func:`nms` keeps."""
    boxes, scores = boxes.detach(), scores.detach()
    if score_threshold > 0:
        valid = torch.nonzero(scores > score_threshold).squeeze(1)
        kept = _greedy_nms(
            boxes.index_select(0, valid), scores.index_select(0, valid), iou_threshold
        )
        inds = valid.index_select(0, kept)
    else:
        inds = _greedy_nms(boxes, scores, iou_threshold)
    return inds[:max_num] if max_num > 0 else inds


@_accepts_iou_thr
def soft_nms(
    boxes: ArrayLike,
    scores: ArrayLike,
    iou_threshold: float = 0.3,
    sigma: float = 0.5,
    min_score: float = 1e-3,
    method: str = "linear",
    offset: int = 0,
) -> Tuple[ArrayLike, ArrayLike]:
    """Soft-NMS: lower the scores of overlapping boxes instead of dropping them.

    Repeatedly takes the box of highest current score, then multiplies the score
    of every box not yet taken by a weight of its IoU ``o`` with the taken box:
    ``naive``: 0 if ``o >= iou_threshold`` else 1; ``linear``: ``1 - o`` if
    ``o >= iou_threshold`` else 1; ``gaussian``: ``exp(-o**2 / sigma)``. A box
    whose score falls below ``min_score`` is dropped. The first box taken is kept
    whatever its score. Computed on the CPU, as mmcv does.

    Args:
        boxes: ``(N, 4)`` float tensor or array, ``x1, y1, x2, y2``.
        scores: ``(N,)`` float, on the device of ``boxes``.
        iou_threshold: IoU threshold of the ``naive`` and ``linear`` methods. The
            deprecated keyword ``iou_thr`` is accepted, with a DeprecationWarning.
        sigma: Width of the ``gaussian`` method.
        min_score: Boxes whose score falls below this are dropped.
        method: ``"naive"``, ``"linear"`` or ``"gaussian"``.
        offset: 0 or 1; a box's width is ``x2 - x1 + offset``.

    Returns:
        ``dets`` ``(K, 5)``: the kept boxes and their lowered scores, in the order
        taken, in ``boxes``' dtype; and ``inds`` ``(K,)`` long: their indices in
        ``boxes``. Numpy arrays if ``boxes`` is one, else tensors on its device
        (not differentiable).

    Raises:
        TypeError, ValueError: Bad types, shapes, ``method`` or ``offset``.
    """
    boxes_t, scores_t, is_numpy = _as_tensors("soft_nms", boxes, scores)
    _check_offset("soft_nms", offset, (0, 1))
    if method not in _SOFT_NMS_METHODS:
        raise ValueError(
            f"mmcv.ops.soft_nms: method must be one of {sorted(_SOFT_NMS_METHODS)}, got {method!r}"
        )
    cpu_boxes = boxes_t.detach().cpu()
    dtype = float_compute_dtype(cpu_boxes.dtype)
    inds, kept_scores = _soft_nms_cpu(
        cpu_boxes.to(dtype),
        scores_t.detach().cpu().to(dtype),
        _SoftNMSParams(iou_threshold, sigma, min_score, method, offset),
    )
    dets = torch.cat((cpu_boxes.index_select(0, inds), kept_scores[:, None].to(cpu_boxes.dtype)), 1)
    if is_numpy:
        return dets.numpy(), inds.numpy()
    return dets.to(boxes_t.device), inds.to(boxes_t.device)


class _SoftNMSParams:
    """soft_nms's scalar parameters."""

    def __init__(
        self, iou_threshold: float, sigma: float, min_score: float, method: str, offset: int
    ) -> None:
        self.iou_threshold = float(iou_threshold)
        self.sigma = float(sigma)
        self.min_score = float(min_score)
        self.method = method
        self.offset = int(offset)

    def weights(self, ovr: Tensor) -> Tensor:
        """The factor each score is multiplied by, from its IoU ``ovr`` with the taken box."""
        if self.method == "gaussian":
            return torch.exp(-(ovr * ovr) / self.sigma)
        near = ovr >= self.iou_threshold
        lowered = torch.zeros_like(ovr) if self.method == "naive" else 1 - ovr
        return torch.where(near, lowered, torch.ones_like(ovr))


def _soft_nms_cpu(boxes: Tensor, scores: Tensor, params: _SoftNMSParams) -> Tuple[Tensor, Tensor]:
    """mmcv's ``softnms_cpu``, vectorised over the boxes not yet taken.

    The kernel keeps the boxes in one array: slot ``i`` receives the ``i``-th box
    taken (swapped with the box it displaces), and a box dropped below
    ``min_score`` is overwritten by the array's last live box. Those moves decide
    which of several equal scores is taken first, so ``slots`` replays them.

    Args:
        boxes: ``(N, 4)`` float32/float64 CPU boxes.
        scores: ``(N,)`` scores of the same dtype.
        params: The method and its parameters.

    Returns:
        ``(K,)`` long indices of the kept boxes in the order taken, and ``(K,)``
        their scores when taken.
    """
    n = boxes.shape[0]
    scores = scores.clone()
    areas = _areas(boxes, params.offset)
    slots = torch.arange(n)  # slots[p]: the box in the kernel's array slot p
    live = n
    i = 0
    # index_select/index_copy_, not tensor[indices]: advanced indexing costs ~10x more per call.
    while i < live:
        best = i + int(torch.argmax(scores.index_select(0, slots[i:live])))  # first highest
        slots[i], slots[best] = slots[best].clone(), slots[i].clone()
        top, rest = slots[i], slots[i + 1 : live]
        if rest.numel() == 0:
            break
        ovr = _iou_with(
            boxes[top],
            areas[top],
            boxes.index_select(0, rest),
            areas.index_select(0, rest),
            params.offset,
        )
        rescored = scores.index_select(0, rest) * params.weights(ovr)
        scores.index_copy_(0, rest, rescored)
        dropped = rescored < params.min_score
        if bool(dropped.any()):
            rest = rest.index_select(0, _refill_order(dropped))
            slots[i + 1 : i + 1 + rest.numel()] = rest
            live = i + 1 + rest.numel()
        i += 1
    inds = slots[:live]
    return inds, scores.index_select(0, inds)


def _areas(boxes: Tensor, offset: int) -> Tensor:
    """``(N,)`` areas of ``(N, 4)`` boxes whose width is ``x2 - x1 + offset``."""
    return (boxes[:, 2] - boxes[:, 0] + offset) * (boxes[:, 3] - boxes[:, 1] + offset)


def _iou_with(top: Tensor, top_area: Tensor, others: Tensor, areas: Tensor, offset: int) -> Tensor:
    """``(M,)`` IoU of one box ``top`` ``(4,)`` with each of ``others`` ``(M, 4)``.

    Computed as mmcv's kernels do; ``top_area`` and ``areas`` are the boxes' areas
    with the same ``offset``.
    """
    lt = torch.maximum(top[:2], others[:, :2])
    rb = torch.minimum(top[2:], others[:, 2:])
    wh = (rb - lt + offset).clamp(min=0)
    inter = wh[:, 0] * wh[:, 1]
    return inter / (top_area + areas - inter)


def _refill_order(dropped: Tensor) -> Tensor:
    """Where mmcv's kernel leaves the kept boxes after dropping some.

    The kernel walks the slots forward and overwrites each dropped box with the
    last live box (dropping that one too if it is also dropped). So the kept boxes
    among the first ``m`` slots stay, and the holes there are filled, left to
    right, with the kept boxes beyond slot ``m`` taken from the end.

    Args:
        dropped: ``(L,)`` bool, per slot.

    Returns:
        ``(m,)`` long: for each final slot, the slot its box came from.
    """
    kept = ~dropped
    m = int(kept.sum())
    slot = torch.arange(dropped.numel())
    order = slot[:m].clone()
    order[dropped[:m]] = slot[m:][kept[m:]].flip(0)
    return order


def batched_nms(
    boxes: Tensor,
    scores: Tensor,
    idxs: Tensor,
    nms_cfg: Optional[Dict[str, Any]],
    class_agnostic: bool = False,
) -> Tuple[Tensor, Tensor]:
    """NMS within each class (``idxs``), in one call.

    Boxes of different classes are moved apart (class ``c`` by ``c * (max + 1)``,
    ``max`` the largest coordinate) so that one NMS keeps them independent. With
    ``split_thr`` boxes or more, NMS runs class by class instead, as in mmcv
    always by ``idxs``, even with ``class_agnostic``. Equal scores come out in
    input order. No boxes give no boxes (where mmcv fails on the max of none).

    Args:
        boxes: ``(N, 4)`` float, ``x1, y1, x2, y2``; or with ``type``
            ``"nms_rotated"``, ``(N, 5)`` rotated boxes (classes are moved apart by
            their centres).
        scores: ``(N,)`` float.
        idxs: ``(N,)`` int, the class of each box.
        nms_cfg: ``None`` to skip NMS (all boxes, sorted by score), or a dict:
            ``type`` (``"nms"``, the default, ``"soft_nms"`` or ``"nms_rotated"``),
            ``split_thr`` (default 10000), ``class_agnostic`` (overrides the
            argument), and the keyword arguments of the NMS op (``iou_threshold``,
            ``max_num``, ...).
        class_agnostic: NMS over all boxes regardless of ``idxs``.

    Returns:
        ``dets`` ``(K, 5)``: the kept boxes (unmoved) with their scores after NMS,
        highest first; and ``keep`` ``(K,)`` long: their indices in ``boxes``.

    Raises:
        UnsupportedOpError: ``type`` ``nms_quadri``.
        ValueError: An unknown ``type``, or bad shapes (4 columns, or 5 for
            ``nms_rotated``).
    """
    if nms_cfg is None:
        scores, inds = torch.sort(scores, descending=True, stable=True)
        return torch.cat([boxes[inds], scores[:, None]], -1), inds
    cfg = dict(nms_cfg)
    class_agnostic = cfg.pop("class_agnostic", class_agnostic)
    nms_type = cfg.pop("type", "nms")
    nms_op = _nms_op(nms_type)
    _check_batched(boxes, scores, idxs, 5 if nms_type == "nms_rotated" else 4)
    boxes_for_nms = boxes if class_agnostic else _move_classes_apart(boxes, idxs)
    split_thr = cfg.pop("split_thr", 10000)
    if boxes_for_nms.shape[0] < split_thr:
        dets, keep = nms_op(boxes_for_nms, scores, **cfg)
        kept_boxes, kept_scores = boxes.index_select(0, keep), dets[:, -1].to(scores.dtype)
    else:
        kept_boxes, kept_scores, keep = _nms_class_by_class(
            boxes, boxes_for_nms, scores, idxs, nms_op, cfg
        )
    return torch.cat([kept_boxes, kept_scores[:, None]], -1), keep


def _check_batched(boxes: Tensor, scores: Tensor, idxs: Tensor, columns: int) -> None:
    for name, value in (("boxes", boxes), ("scores", scores), ("idxs", idxs)):
        if not isinstance(value, Tensor):
            raise TypeError(
                f"mmcv.ops.batched_nms: {name} must be a torch.Tensor, got {type(value).__name__}"
            )
    if boxes.dim() != 2 or boxes.shape[1] != columns:
        kind = "nms_cfg type 'nms_rotated'" if columns == 5 else "this nms_cfg type"
        raise ValueError(
            f"mmcv.ops.batched_nms: boxes must have shape (N, {columns}) for {kind}, "
            f"got {tuple(boxes.shape)}"
        )
    n = boxes.shape[0]
    for name, value in (("scores", scores), ("idxs", idxs)):
        if value.shape != (n,):
            raise ValueError(
                f"mmcv.ops.batched_nms: {name} must have shape (N,) = ({n},), "
                f"got {tuple(value.shape)}"
            )


def _nms_op(name: str) -> Callable[..., Tuple[Tensor, Tensor]]:
    """The op ``nms_cfg['type']`` names."""
    if name == "nms":
        return nms
    if name == "soft_nms":
        return soft_nms
    if name == "nms_rotated":
        return nms_rotated
    supplied = "'nms', 'soft_nms' or 'nms_rotated'"
    if name in _NOT_SUPPLIED:
        raise unsupported("batched_nms", "nms_cfg['type']", name, f"type={supplied}")
    raise ValueError(f"mmcv.ops.batched_nms: nms_cfg['type'] must be {supplied}, got {name!r}")


def _move_classes_apart(boxes: Tensor, idxs: Tensor) -> Tensor:
    """``boxes`` shifted by ``idxs * (max coordinate + 1)``, so that classes never overlap.

    Rotated boxes move by their centres, the max coordinate taken as mmcv does:
    ``max(x, y) + max(w, h)``.
    """
    if boxes.shape[0] == 0:  # mmcv fails on the max of no boxes; there is nothing to move
        return boxes
    # float16 would overflow at a few classes of large images; the NMS runs in float32 anyway.
    moved = boxes.float() if boxes.dtype in (torch.float16, torch.bfloat16) else boxes
    if moved.shape[1] == 5:
        offsets = idxs.to(moved) * (moved[:, :2].max() + moved[:, 2:4].max() + 1)
        return torch.cat((moved[:, :2] + offsets[:, None], moved[:, 2:]), 1)
    offsets = idxs.to(moved) * (moved.max() + 1)
    return moved + offsets[:, None]


def _nms_class_by_class(
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
    max_num = cfg.pop("max_num", -1)
    kept = scores.new_zeros(scores.shape, dtype=torch.bool)
    # soft_nms lowers the scores it keeps: the merged result sorts by those.
    scores_after = scores.new_zeros(scores.shape)
    for cls in torch.unique(idxs):
        members = torch.nonzero(idxs == cls).view(-1)
        dets, keep = nms_op(boxes_for_nms[members], scores[members], **cfg)
        kept[members[keep]] = True
        scores_after[members[keep]] = dets[:, -1].to(scores_after.dtype)
    keep = torch.nonzero(kept).view(-1)
    kept_scores, order = torch.sort(scores_after[keep], descending=True, stable=True)
    keep = keep[order]
    if max_num > 0:
        keep, kept_scores = keep[:max_num], kept_scores[:max_num]
    return boxes[keep], kept_scores, keep


def nms_match(dets: ArrayLike, iou_threshold: float) -> List[ArrayLike]:
    """Group boxes by NMS: each kept box with the boxes it suppresses.

    Like :func:`nms`, but a box whose IoU with a kept box is at least (``>=``)
    ``iou_threshold`` joins that box's group. Areas have no offset, as in mmcv.

    Args:
        dets: ``(N, 5)`` float tensor or array, ``x1, y1, x2, y2, score``.
        iou_threshold: IoU from which a box joins a kept box's group.

    Returns:
        One ``(G,)`` long index array per kept box, in the order kept (highest
        score first): the kept box, then the boxes it suppressed in score order.
        Equal scores count in input order. Tensors on ``dets``' device if
        ``dets`` is a tensor, else numpy ``int`` arrays.

    Raises:
        TypeError, ValueError: ``dets`` is not a float ``(N, 5)`` tensor or array.
    """
    if not isinstance(dets, (Tensor, np.ndarray)):
        raise TypeError(
            "mmcv.ops.nms_match: dets must be a torch.Tensor or a numpy.ndarray, "
            f"got {type(dets).__name__}"
        )
    groups: List[List[int]] = []
    if dets.shape[0] != 0:
        if dets.ndim != 2 or dets.shape[1] != 5:
            raise ValueError(
                f"mmcv.ops.nms_match: dets must have shape (N, 5), got {tuple(dets.shape)}"
            )
        dets_t = dets.detach().cpu() if isinstance(dets, Tensor) else torch.from_numpy(dets)
        if not dets_t.is_floating_point():
            raise TypeError(f"mmcv.ops.nms_match: dets must be floating point, got {dets_t.dtype}")
        groups = _match_groups(dets_t.to(float_compute_dtype(dets_t.dtype)), float(iou_threshold))
    if isinstance(dets, Tensor):
        return [dets.new_tensor(g, dtype=torch.long) for g in groups]
    return [np.array(g, dtype=int) for g in groups]


def _match_groups(dets: Tensor, iou_threshold: float) -> List[List[int]]:
    """mmcv's ``nms_match_cpu`` on ``(N, 5)`` CPU dets: the groups, as index lists."""
    order = _descending(dets[:, 4])
    boxes = dets[order, :4]  # in score order from here on
    areas = _areas(boxes, 0)
    n = boxes.shape[0]
    suppressed = torch.zeros(n, dtype=torch.bool)
    is_suppressed = suppressed.numpy()  # a view, for cheap per-box reads
    order_list = order.tolist()
    groups = []
    for p in range(n):
        if is_suppressed[p]:
            continue
        ovr = _iou_with(boxes[p], areas[p], boxes[p + 1 :], areas[p + 1 :], 0)
        hits = torch.nonzero((ovr >= iou_threshold) & ~suppressed[p + 1 :]).view(-1) + (p + 1)
        suppressed.index_fill_(0, hits, True)
        groups.append([order_list[p]] + order.index_select(0, hits).tolist())
    return groups
