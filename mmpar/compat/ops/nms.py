"""Non-maximum suppression: mmcv 1.7.2's ``mmcv.ops.nms`` on torchvision and plain torch.

* :func:`nms` runs ``torchvision.ops.nms``; boxes of equal score are visited in
  input order (lower index first), on every device (mmcv leaves that order to an
  unstable sort). ``offset=1`` is not supported.
* :func:`soft_nms` gives the result of mmcv's CPU kernel (``softnms_cpu``): the
  same selection, rescoring, dropping below ``min_score`` and tie order, computed
  by :mod:`mmpar.compat.ops.suppression.soft_nms_rounds` without a pass over all boxes per
  box taken. It runs on the CPU, as mmcv's does, and returns on the input's device.
* :func:`batched_nms` is mmcv's: the per-class coordinate offsets, ``split_thr``,
  ``class_agnostic`` and ``max_num`` in ``nms_cfg``, and ``nms_cfg=None``.
* :func:`nms_match` groups boxes as mmcv's ``nms_match_cpu`` does.
* :func:`nms_rotated` and :func:`nms_quadri` are :mod:`mmpar.compat.ops.suppression.rotated_nms`'s,
  re-exported here; ``batched_nms`` runs them on rotated ``(N, 5)`` boxes and on
  quadrilaterals ``(N, 8)``. They rank a NaN score after every other, ``-inf``
  included (mmcv's sort puts it first).

mmcv's kernels take float32 only; here float64 runs in float64, and
float16/bfloat16 run in float32 (the returned boxes keep the input's dtype).
Non-finite values (mmcv leaves them to its kernels' arithmetic):

* a NaN score ranks as ``-inf``: after every other score, never ahead of a finite
  one, so it never suppresses (nor lowers) a box of finite score. Kept boxes of
  NaN score come last (``score_threshold`` above 0 filters them out);
* a box with a NaN or infinite coordinate has an IoU of NaN or 0 with every box:
  it neither suppresses nor is suppressed, as in mmcv's and torchvision's kernels.
  soft_nms counts a NaN IoU as 0 (weight 1; mmcv's ``gaussian`` turns the score
  NaN), and so does it for two boxes of zero area;
* batched_nms moves the classes apart by the largest finite coordinate (mmcv's
  ``boxes.max()`` is NaN with one NaN coordinate, and then nothing is suppressed).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from mmpar.compat.ops.backend import (
    ArgumentError,
    float_compute_dtype,
    renamed_kwargs,
    torchvision_ops,
)
from mmpar.compat.ops.suppression.class_nms import (
    check_batched,
    check_nms_cfg,
    move_classes_apart,
    nms_class_by_class,
    nms_per_class,
)
from mmpar.compat.ops.suppression.nms_args import (
    ArrayLike,
    box_score_tensors,
    check_offset,
    descending,
    finite_number,
    fraction,
    integer,
    nms_args,
    real_number,
)
from mmpar.compat.ops.suppression.rotated_nms import nms_quadri, nms_rotated
from mmpar.compat.ops.suppression.soft_nms_kernel import SoftNMSParams, box_areas, pair_iou
from mmpar.compat.ops.suppression.soft_nms_rounds import soft_nms_keep

__all__ = ["batched_nms", "nms", "nms_match", "nms_quadri", "nms_rotated", "soft_nms"]

#: soft_nms's methods.
_SOFT_NMS_METHODS = ("gaussian", "linear", "naive")


#: Lets a function take mmcv's deprecated keyword ``iou_thr`` for ``iou_threshold``.
_accepts_iou_thr = renamed_kwargs(
    {"iou_thr": "iou_threshold"},
    "mmcv.ops.{owner}: got both {old} (deprecated) and {new}; pass {new} only",
)


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
    order = descending(scores)
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
    visited in input order. Runs on the device of ``boxes``, without a host sync.

    Non-finite values: a NaN score ranks as ``-inf`` (after every other score), so
    it never suppresses a box of finite score, and a kept box of NaN score comes
    last; a box with a NaN or infinite coordinate has an IoU of NaN or 0 with every
    box, so it neither suppresses nor is suppressed.

    Args:
        boxes: ``(N, 4)`` float tensor or array, ``x1, y1, x2, y2``.
        scores: ``(N,)`` float, on the device of ``boxes``.
        iou_threshold: IoU above which the lower-scored box is dropped, in
            ``[0, 1]``. The deprecated keyword ``iou_thr`` is accepted, with a
            DeprecationWarning.
        offset: 0 only (mmcv's ``offset=1`` raises ``UnsupportedOpError``).
        score_threshold: If above 0, only boxes whose score is above it take part.
        max_num: If above 0, keep at most this many boxes.

    Returns:
        ``dets`` ``(K, 5)``: the kept boxes and their scores, highest score first,
        and ``inds`` ``(K,)`` long: their indices in ``boxes``. Numpy arrays if
        ``boxes`` is one, else tensors on its device.

    Raises:
        UnsupportedOpError: ``offset=1``.
        TypeError: Bad types or dtypes.
        ValueError: Bad shapes, devices or values (``ArgumentError``, an
            ``AssertionError`` too, where mmcv asserts: shapes, ``offset``).
    """
    boxes_t, scores_t, is_numpy = box_score_tensors("nms", boxes, scores)
    iou_threshold, score_threshold = nms_args(iou_threshold, offset, score_threshold)
    max_num = integer("nms", "max_num", max_num)
    inds = _nms_inds(boxes_t, scores_t, iou_threshold, score_threshold, max_num)
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

    Non-finite values: a NaN score ranks as ``-inf`` (after every other score) and
    is never below ``min_score``, so boxes of NaN score are kept, last, in mmcv's
    slot order; ``inf * 0`` (``naive``) makes a NaN. A NaN IoU (a box with a NaN
    coordinate, two boxes of zero area) counts as 0: weight 1.

    Args:
        boxes: ``(N, 4)`` float tensor or array, ``x1, y1, x2, y2``.
        scores: ``(N,)`` float, on the device of ``boxes``.
        iou_threshold: IoU threshold of the ``naive`` and ``linear`` methods, in
            ``[0, 1]``. The deprecated keyword ``iou_thr`` is accepted, with a
            DeprecationWarning.
        sigma: Width of the ``gaussian`` method, above 0.
        min_score: Boxes whose score falls below this (finite) are dropped.
        method: ``"naive"``, ``"linear"`` or ``"gaussian"``.
        offset: 0 or 1; a box's width is ``x2 - x1 + offset``.

    Returns:
        ``dets`` ``(K, 5)``: the kept boxes and their lowered scores, in the order
        taken, in ``boxes``' dtype; and ``inds`` ``(K,)`` long: their indices in
        ``boxes``. Numpy arrays if ``boxes`` is one, else tensors on its device
        (not differentiable).

    Raises:
        TypeError: Bad types or dtypes.
        ValueError: Bad shapes, devices or values (``ArgumentError``, an
            ``AssertionError`` too, where mmcv asserts: shapes, ``method``, ``offset``).
    """
    boxes_t, scores_t, is_numpy = box_score_tensors("soft_nms", boxes, scores)
    check_offset("soft_nms", offset, (0, 1))
    params = _soft_nms_params(iou_threshold, sigma, min_score, method, offset)
    cpu_boxes = boxes_t.detach().cpu()
    dtype = float_compute_dtype(cpu_boxes.dtype)
    inds, kept_scores = soft_nms_keep(
        cpu_boxes.to(dtype), scores_t.detach().cpu().to(dtype), params
    )
    dets = torch.cat((cpu_boxes.index_select(0, inds), kept_scores[:, None].to(cpu_boxes.dtype)), 1)
    if is_numpy:
        return dets.numpy(), inds.numpy()
    return dets.to(boxes_t.device), inds.to(boxes_t.device)


def _soft_nms_params(
    iou_threshold: Any, sigma: Any, min_score: Any, method: Any, offset: int
) -> SoftNMSParams:
    """soft_nms's parameters, checked."""
    if not isinstance(method, str) or method not in _SOFT_NMS_METHODS:
        raise ArgumentError(
            f"mmcv.ops.soft_nms: method must be one of {sorted(_SOFT_NMS_METHODS)}, got {method!r}"
        )
    iou_threshold = fraction("soft_nms", "iou_threshold", iou_threshold)
    sigma = real_number("soft_nms", "sigma", sigma)
    if method == "gaussian" and not 0 < sigma < float("inf"):
        raise ValueError(
            "mmcv.ops.soft_nms: sigma must be above 0 and finite for method='gaussian', "
            f"got {sigma!r}"
        )
    min_score = finite_number("soft_nms", "min_score", min_score)
    return SoftNMSParams(iou_threshold, sigma, min_score, method, int(offset))


def batched_nms(
    boxes: Tensor,
    scores: Tensor,
    idxs: Tensor,
    nms_cfg: Optional[Dict[str, Any]],
    class_agnostic: bool = False,
) -> Tuple[Tensor, Tensor]:
    """NMS within each class (``idxs``), in one call.

    Boxes of different classes are moved apart (class ``c`` by ``c * (max + 1)``,
    ``max`` the largest finite coordinate) so that one NMS keeps them independent.
    With ``split_thr`` boxes or more, NMS runs class by class instead, as in mmcv
    always by ``idxs``, even with ``class_agnostic``. Equal scores come out in
    input order, NaN scores last (as ``-inf``; with ``nms_rotated``/``nms_quadri``,
    below ``split_thr``, after it). No boxes give no boxes (where mmcv fails on the
    max of none).

    Args:
        boxes: ``(N, 4)`` float, ``x1, y1, x2, y2``; or with ``type``
            ``"nms_rotated"``, ``(N, 5)`` rotated boxes (classes are moved apart by
            their centres); or with ``type`` ``"nms_quadri"``, ``(N, 8)``
            quadrilaterals (every vertex moves).
        scores: ``(N,)`` float.
        idxs: ``(N,)`` int (or float), the class of each box.
        nms_cfg: ``None`` to skip NMS (all boxes, sorted by score), or a dict:
            ``type`` (``"nms"``, the default, ``"soft_nms"``, ``"nms_rotated"`` or
            ``"nms_quadri"``),
            ``split_thr`` (default 10000), ``class_agnostic`` (overrides the
            argument), and the keyword arguments of the NMS op (``iou_threshold``,
            ``max_num``, ...).
        class_agnostic: NMS over all boxes regardless of ``idxs``.

    Returns:
        ``dets`` ``(K, 5)``: the kept boxes (unmoved) with their scores after NMS,
        highest first; and ``keep`` ``(K,)`` long: their indices in ``boxes``.

    Raises:
        TypeError: Bad types or dtypes (a bool ``idxs``), or an ``nms_cfg`` key
            that its op does not take.
        ValueError: An unknown ``type``, a missing ``iou_threshold``, bad values,
            devices or shapes (4 columns, 5 for ``nms_rotated``, 8 for ``nms_quadri``).
    """
    if nms_cfg is None:
        check_batched(boxes, scores, idxs, None)
        inds = descending(scores)
        return torch.cat([boxes[inds], scores[inds][:, None]], -1), inds
    if not isinstance(nms_cfg, Mapping):
        raise TypeError(
            f"mmcv.ops.batched_nms: nms_cfg must be a dict or None, got {type(nms_cfg).__name__}"
        )
    cfg = dict(nms_cfg)
    class_agnostic = cfg.pop("class_agnostic", class_agnostic)
    nms_type = cfg.pop("type", "nms")
    nms_op = _nms_op(nms_type)
    check_batched(boxes, scores, idxs, nms_type)
    split_thr = real_number("batched_nms", "nms_cfg['split_thr']", cfg.pop("split_thr", 10000))
    check_nms_cfg(nms_type, nms_op, cfg)
    boxes_for_nms = boxes if class_agnostic else move_classes_apart(boxes, idxs)
    if boxes_for_nms.shape[0] < split_thr:
        dets, keep = nms_op(boxes_for_nms, scores, **cfg)
        kept_boxes, kept_scores = boxes.index_select(0, keep), dets[:, -1].to(scores.dtype)
    elif nms_op is nms:
        keep = nms_per_class(boxes_for_nms, scores, idxs, cfg)
        kept_boxes, kept_scores = boxes.index_select(0, keep), scores.index_select(0, keep)
    else:
        kept_boxes, kept_scores, keep = nms_class_by_class(
            boxes, boxes_for_nms, scores, idxs, nms_op, cfg
        )
    return torch.cat([kept_boxes, kept_scores[:, None]], -1), keep


def _nms_op(name: str) -> Callable[..., Tuple[Tensor, Tensor]]:
    """The op ``nms_cfg['type']`` names."""
    if name == "nms":
        return nms
    if name == "soft_nms":
        return soft_nms
    if name == "nms_rotated":
        return nms_rotated
    if name == "nms_quadri":
        return nms_quadri
    supplied = "'nms', 'soft_nms', 'nms_rotated' or 'nms_quadri'"
    raise ValueError(f"mmcv.ops.batched_nms: nms_cfg['type'] must be {supplied}, got {name!r}")


def nms_match(dets: ArrayLike, iou_threshold: float) -> List[ArrayLike]:
    """Group boxes by NMS: each kept box with the boxes it suppresses.

    Like :func:`nms`, but a box whose IoU with a kept box is at least (``>=``)
    ``iou_threshold`` joins that box's group. Areas have no offset, as in mmcv.
    A NaN score ranks as ``-inf`` (after every other score); a box with a NaN
    coordinate joins no group but its own (its IoU is NaN).

    Args:
        dets: ``(N, 5)`` float tensor or array, ``x1, y1, x2, y2, score``.
        iou_threshold: IoU from which a box joins a kept box's group, in ``[0, 1]``.

    Returns:
        One ``(G,)`` long index array per kept box, in the order kept (highest
        score first): the kept box, then the boxes it suppressed in score order.
        Equal scores count in input order. Tensors on ``dets``' device if
        ``dets`` is a tensor, else numpy ``int`` arrays.

    Raises:
        TypeError: ``dets`` is not a float tensor or array.
        ValueError: ``dets`` is not ``(N, 5)`` (``ArgumentError``, an
            ``AssertionError`` too, as mmcv asserts it), or a bad ``iou_threshold``.
    """
    if not isinstance(dets, (Tensor, np.ndarray)):
        raise TypeError(
            "mmcv.ops.nms_match: dets must be a torch.Tensor or a numpy.ndarray, "
            f"got {type(dets).__name__}"
        )
    iou_threshold = fraction("nms_match", "iou_threshold", iou_threshold)
    groups: List[List[int]] = []
    if dets.ndim == 0 or dets.shape[0] != 0:
        if dets.ndim != 2 or dets.shape[1] != 5:
            raise ArgumentError(
                f"mmcv.ops.nms_match: dets must have shape (N, 5), got {tuple(dets.shape)}"
            )
        dets_t = dets.detach().cpu() if isinstance(dets, Tensor) else torch.from_numpy(dets)
        if not dets_t.is_floating_point():
            raise TypeError(f"mmcv.ops.nms_match: dets must be floating point, got {dets_t.dtype}")
        groups = _match_groups(dets_t.to(float_compute_dtype(dets_t.dtype)), iou_threshold)
    if isinstance(dets, Tensor):
        return [dets.new_tensor(g, dtype=torch.long) for g in groups]
    return [np.array(g, dtype=int) for g in groups]


def _match_groups(dets: Tensor, iou_threshold: float) -> List[List[int]]:
    """mmcv's ``nms_match_cpu`` on ``(N, 5)`` CPU dets: the groups, as index lists."""
    order = descending(dets[:, 4])
    boxes = dets[order, :4]  # in score order from here on
    areas = box_areas(boxes, 0)
    n = boxes.shape[0]
    suppressed = torch.zeros(n, dtype=torch.bool)
    is_suppressed = suppressed.numpy()  # a view, for cheap per-box reads
    order_list = order.tolist()
    groups = []
    for p in range(n):
        if is_suppressed[p]:
            continue
        ovr = pair_iou(boxes[p], areas[p], boxes[p + 1 :], areas[p + 1 :], 0)
        hits = torch.nonzero((ovr >= iou_threshold) & ~suppressed[p + 1 :]).view(-1) + (p + 1)
        suppressed.index_fill_(0, hits, True)
        groups.append([order_list[p]] + order.index_select(0, hits).tolist())
    return groups
