"""mmdet3d 0.17's Python wrappers of its compiled ops, made to run on the CPU too.

mmdet3d 0.17's wrappers allocate their outputs on CUDA whatever the inputs' device
(``torch.cuda.IntTensor(B, npoint, sample_num)`` in ``ball_query``, ``grouping_operation``,
``three_nn``, ``three_interpolate``, ``furthest_point_sample``, ``gather_points``), and
``nms_gpu`` / ``points_in_boxes_gpu`` call ``.cuda(device)`` and
``torch.cuda.current_device()``, and ``BaseInstance3DBoxes.overlaps`` (the 3D IoU of
PartA2's and SSN's assigners) moves the boxes to CUDA with ``.cuda()``: on a CPU they
fail before reaching the extension.
When each wrapper module is imported, its public functions are rebound to ones that
call the original on CUDA tensors (the compiled extension, or mmpar's stand-in) and
otherwise do the same work device-agnostically: mmpar's op (mmcv 1.7's version of the
same op, which the stand-ins call too), or, for the box wrappers, the wrapper's own
steps around the extension call, with the outputs allocated on the inputs' device.
The package-level names (``mmdet3d.ops.ball_query``, ...) are bound after the
submodule runs, so they, and every later importer, get the rebound function.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

from mmpar.compat.import_hook import on_import
from mmpar.compat.ops.backend import ArgumentError

__all__ = [
    "BOX3D_MODULE",
    "WRAPPERS",
    "mend_cpu_wrappers",
    "nms_gpu",
    "nms_normal_gpu",
    "points_in_boxes_batch",
    "points_in_boxes_gpu",
]


def _ext(name: str) -> ModuleType:
    # Imported by the mmdet3d wrapper module being mended (mmpar's stand-in, or a build).
    return sys.modules[f"mmdet3d.ops.{name}"]


def _nms(
    fn: str,
    boxes: Tensor,
    scores: Tensor,
    thresh: float,
    pre_max: Optional[int],
    post_max: Optional[int],
) -> Tensor:
    order = scores.sort(0, descending=True)[1]
    if pre_max is not None:
        order = order[:pre_max]
    boxes = boxes[order].contiguous()
    keep = torch.zeros(boxes.size(0), dtype=torch.long, device=boxes.device)
    num = getattr(_ext("iou3d.iou3d_cuda"), fn)(boxes, keep, thresh, boxes.device.index)
    keep = order[keep[:num]].contiguous()
    return keep if post_max is None else keep[:post_max]


def nms_gpu(
    boxes: Tensor,
    scores: Tensor,
    thresh: float,
    pre_maxsize: Optional[int] = None,
    post_max_size: Optional[int] = None,
) -> Tensor:
    """mmdet3d 0.17's ``nms_gpu`` on any device: the kept indices, highest score first."""
    return _nms("nms_gpu", boxes, scores, thresh, pre_maxsize, post_max_size)


def nms_normal_gpu(boxes: Tensor, scores: Tensor, thresh: float) -> Tensor:
    """mmdet3d 0.17's ``nms_normal_gpu`` on any device."""
    return _nms("nms_normal_gpu", boxes, scores, thresh, None, None)


def _in_boxes(fn: str, points: Tensor, boxes: Tensor, fill: int, shape: Tuple[int, ...]) -> Tensor:
    for what, t, width in (("boxes", boxes, 7), ("points", points, 3)):
        if t.dim() != 3 or t.shape[2] != width:
            raise ValueError(
                f"mmdet3d.ops.roiaware_pool3d.{fn}: {what} must be (B, N, {width}), "
                f"found {tuple(t.shape)}"
            )
    if boxes.shape[0] != points.shape[0]:
        raise ValueError(
            f"mmdet3d.ops.roiaware_pool3d.{fn}: points and boxes must have the same batch size, "
            f"found {points.shape[0]} and {boxes.shape[0]}"
        )
    out = torch.full(shape, fill, dtype=torch.int32, device=points.device)
    getattr(_ext("roiaware_pool3d.roiaware_pool3d_ext"), fn)(
        boxes.contiguous(), points.contiguous(), out
    )
    return out


def points_in_boxes_gpu(points: Tensor, boxes: Tensor) -> Tensor:
    """mmdet3d 0.17's ``points_in_boxes_gpu`` on any device: ``(B, M)`` first box or -1."""
    return _in_boxes("points_in_boxes_gpu", points, boxes, -1, tuple(points.shape[:2]))


def points_in_boxes_batch(points: Tensor, boxes: Tensor) -> Tensor:
    """mmdet3d 0.17's ``points_in_boxes_batch`` on any device: ``(B, M, T)`` 0/1."""
    return _in_boxes("points_in_boxes_batch", points, boxes, 0, (*points.shape[:2], boxes.shape[1]))


def _box_overlaps(cls: Any, boxes1: Any, boxes2: Any, mode: str = "iou") -> Tensor:
    """``BaseInstance3DBoxes.overlaps`` on the boxes' device: the 3D IoU (or IoF) of every
    pair, the BEV overlap of the ``(x1, y1, x2, y2, ry)`` boxes times the height overlap."""
    module = sys.modules[BOX3D_MODULE]  # the mended class's own module
    if type(boxes1) is not type(boxes2) or mode not in ("iou", "iof"):
        raise ArgumentError(  # mmdet3d asserts these
            f"BaseInstance3DBoxes.overlaps: boxes of one type and mode 'iou' or 'iof' expected, "
            f"found {type(boxes1).__name__}, {type(boxes2).__name__} and {mode!r}"
        )
    rows, cols = len(boxes1), len(boxes2)
    if rows * cols == 0:
        return boxes1.tensor.new_zeros(rows, cols)
    height = cls.height_overlaps(boxes1, boxes2)
    bev_a = module.xywhr2xyxyr(boxes1.bev).contiguous()
    bev_b = module.xywhr2xyxyr(boxes2.bev).contiguous()
    bev = bev_a.new_zeros(rows, cols)
    module.iou3d_cuda.boxes_overlap_bev_gpu(bev_a, bev_b, bev)
    inter = bev * height
    volume1, volume2 = boxes1.volume.view(-1, 1), boxes2.volume.view(1, -1)
    if mode == "iou":
        return inter / torch.clamp(volume1 + volume2 - inter, min=1e-8)
    return inter / torch.clamp(volume1, min=1e-8)


def _mend_box_overlaps(module: ModuleType) -> None:
    if not hasattr(module, "iou3d_cuda"):
        return  # mmdet3d >= 1.0: mmcv.ops' overlap, on the boxes' device already
    cls = module.BaseInstance3DBoxes
    original = cls.overlaps.__func__
    if getattr(original, "__mmpar_mended__", False):
        return

    @functools.wraps(original)
    def overlaps(cls: Any, boxes1: Any, boxes2: Any, mode: str = "iou") -> Tensor:
        if boxes1.tensor.is_cuda:
            return original(cls, boxes1, boxes2, mode)
        return _box_overlaps(cls, boxes1, boxes2, mode)

    overlaps.__mmpar_mended__ = True  # type: ignore[attr-defined]
    cls.overlaps = classmethod(overlaps)


#: The module of ``BaseInstance3DBoxes``.
BOX3D_MODULE = "mmdet3d.core.bbox.structures.base_box3d"


def _mmpar(module: str, name: str) -> Callable[..., Any]:
    def get() -> Callable[..., Any]:
        from mmpar.compat.ops import MODULES

        return getattr(MODULES[module], name)

    return get


#: mmdet3d module -> {function name: (index of the tensor argument that decides the
#: device, getter of the device-agnostic replacement)}.
WRAPPERS: Dict[str, Dict[str, Tuple[int, Callable[[], Callable[..., Any]]]]] = {
    "mmdet3d.ops.ball_query.ball_query": {"ball_query": (3, _mmpar("ball_query", "ball_query"))},
    "mmdet3d.ops.knn.knn": {"knn": (1, _mmpar("knn", "knn"))},
    "mmdet3d.ops.group_points.group_points": {
        "grouping_operation": (0, _mmpar("group_points", "grouping_operation"))
    },
    "mmdet3d.ops.interpolate.three_nn": {"three_nn": (0, _mmpar("three_nn", "three_nn"))},
    "mmdet3d.ops.interpolate.three_interpolate": {
        "three_interpolate": (0, _mmpar("three_interpolate", "three_interpolate"))
    },
    "mmdet3d.ops.furthest_point_sample.furthest_point_sample": {
        "furthest_point_sample": (0, _mmpar("furthest_point_sample", "furthest_point_sample")),
        "furthest_point_sample_with_dist": (
            0,
            _mmpar("furthest_point_sample", "furthest_point_sample_with_dist"),
        ),
    },
    "mmdet3d.ops.gather_points.gather_points": {
        "gather_points": (0, _mmpar("gather_points", "gather_points"))
    },
    "mmdet3d.ops.iou3d.iou3d_utils": {
        "nms_gpu": (0, lambda: nms_gpu),
        "nms_normal_gpu": (0, lambda: nms_normal_gpu),
    },
    "mmdet3d.ops.roiaware_pool3d.points_in_boxes": {
        "points_in_boxes_gpu": (0, lambda: points_in_boxes_gpu),
        "points_in_boxes_batch": (0, lambda: points_in_boxes_batch),
    },
}


def _dispatch(
    original: Callable[..., Any], at: int, other: Callable[[], Callable[..., Any]]
) -> Callable[..., Any]:
    @functools.wraps(original)
    def on_any_device(*args: Any, **kwargs: Any) -> Any:
        decider = args[at] if len(args) > at else None
        if isinstance(decider, Tensor) and decider.is_cuda:
            return original(*args, **kwargs)
        return other()(*args, **kwargs)

    on_any_device.__mmpar_mended__ = True  # type: ignore[attr-defined]
    return on_any_device


def _rebind(module: ModuleType) -> None:
    for name, (at, other) in WRAPPERS[module.__name__].items():
        original = getattr(module, name, None)
        if original is not None and not getattr(original, "__mmpar_mended__", False):
            setattr(module, name, _dispatch(original, at, other))


def mend_cpu_wrappers() -> None:
    """Rebind the wrappers of :data:`WRAPPERS` when (or if already) their modules are imported."""
    for name in WRAPPERS:
        on_import(name, _rebind)
    on_import(BOX3D_MODULE, _mend_box_overlaps)
