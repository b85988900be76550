"""mmcv-full's raw ``mmcv._ext`` entry points on mmpar's ops, for code that loads them itself.

Research code of the mmcv 1.x era (BEVFormer, UniAD, VAD, SurroundOcc, TPVFormer, MapTR,
FB-BEV) defines its own autograd functions around mmcv-full's C++ entry points::

    ext_module = ext_loader.load_ext("_ext", ["ms_deform_attn_forward", "ms_deform_attn_backward"])

Where mmpar's ops serve ``mmcv.ops`` (:func:`mmpar.compat.supply_mmcv_ops`), ``import
mmcv._ext`` gives :func:`ext_module`: the functions below under mmcv-full's names, with
its argument names and order (``mmcv/ops/csrc/pytorch/pybind.cpp`` at v1.7.2). Each
returns what mmcv-full returns and writes in place what it writes in place, on any
device. A name that mmcv-full has and mmpar does not supply is a
:class:`~mmpar.compat.mmcv_ops.MissingOpError` naming it, which escapes mmcv's
``load_ext`` (its ``hasattr`` check) as one line.

Gradients written in place are *added* to the tensors given, as the CUDA kernels'
atomic adds do: mmcv's callers pass zeros, for which adding and writing agree.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable, Dict

import torch
from torch import Tensor

from mmpar.compat.ops.box_iou_rotated import box_iou_rotated as _box_iou_rotated
from mmpar.compat.ops.multi_scale_deform_attn import multi_scale_deformable_attn_pytorch
from mmpar.compat.ops.nms import nms as _nms

__all__ = ["ENTRY_POINTS", "ext_module"]

NAME = "mmcv._ext"


def ms_deform_attn_forward(
    value: Tensor,
    value_spatial_shapes: Tensor,
    value_level_start_index: Tensor,
    sampling_locations: Tensor,
    attention_weights: Tensor,
    im2col_step: int,
) -> Tensor:
    """Multi-scale deformable attention's forward.

    Args:
        value: ``(bs, num_keys, num_heads, dims_per_head)`` float.
        value_spatial_shapes: ``(num_levels, 2)`` long, ``(h, w)`` per level.
        value_level_start_index: ``(num_levels,)`` long; the levels start where
            ``value_spatial_shapes`` puts them (mmcv's callers pass its cumulative sum).
        sampling_locations: ``(bs, num_queries, num_heads, num_levels, num_points, 2)``.
        attention_weights: ``(bs, num_queries, num_heads, num_levels, num_points)``.
        im2col_step: mmcv's CUDA batch chunk; no effect.

    Returns:
        ``(bs, num_queries, num_heads * dims_per_head)`` in value's dtype.
    """
    del value_level_start_index, im2col_step
    with torch.no_grad():
        return multi_scale_deformable_attn_pytorch(
            value, value_spatial_shapes, sampling_locations, attention_weights
        )


def ms_deform_attn_backward(
    value: Tensor,
    value_spatial_shapes: Tensor,
    value_level_start_index: Tensor,
    sampling_locations: Tensor,
    attention_weights: Tensor,
    grad_output: Tensor,
    grad_value: Tensor,
    grad_sampling_loc: Tensor,
    grad_attn_weight: Tensor,
    im2col_step: int,
) -> None:
    """Multi-scale deformable attention's backward: adds the gradients into ``grad_*``.

    Args:
        value: As :func:`ms_deform_attn_forward`'s.
        value_spatial_shapes: As :func:`ms_deform_attn_forward`'s.
        value_level_start_index: As :func:`ms_deform_attn_forward`'s.
        sampling_locations: As :func:`ms_deform_attn_forward`'s.
        attention_weights: As :func:`ms_deform_attn_forward`'s.
        grad_output: ``(bs, num_queries, num_heads * dims_per_head)``.
        grad_value: Like ``value``; receives the gradient to ``value``.
        grad_sampling_loc: Like ``sampling_locations``; receives theirs.
        grad_attn_weight: Like ``attention_weights``; receives theirs.
        im2col_step: As :func:`ms_deform_attn_forward`'s.
    """
    del value_level_start_index, im2col_step
    inputs = [t.detach().requires_grad_() for t in (value, sampling_locations, attention_weights)]
    with torch.enable_grad():
        out = multi_scale_deformable_attn_pytorch(inputs[0], value_spatial_shapes, *inputs[1:])
        grads = torch.autograd.grad(out, inputs, grad_output.reshape(out.shape))
    for target, grad in zip((grad_value, grad_sampling_loc, grad_attn_weight), grads):
        target.add_(grad.to(target.dtype))


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float, offset: int) -> Tensor:
    """Greedy NMS: the kept boxes' indices, highest score first (mmcv's ``nms`` entry point).

    Args:
        boxes: ``(N, 4)`` float, ``x1, y1, x2, y2``.
        scores: ``(N,)`` float.
        iou_threshold: IoU above which the lower-scored box is dropped.
        offset: 0 (mmcv's ``offset=1`` is refused, as by ``mmcv.ops.nms``).

    Returns:
        ``(K,)`` long indices into ``boxes``.
    """
    return _nms(boxes, scores, iou_threshold, offset)[1]


def box_iou_rotated(
    boxes1: Tensor, boxes2: Tensor, ious: Tensor, mode_flag: int, aligned: bool
) -> None:
    """Rotated-box IoU (``mode_flag`` 0) or IoF (1), written into ``ious``.

    Args:
        boxes1: ``(N, 5)`` ``(cx, cy, w, h, angle)``.
        boxes2: ``(M, 5)``.
        ious: ``(N * M,)``, or ``(N,)`` when ``aligned``: receives the overlaps.
        mode_flag: 0 for IoU, 1 for IoF.
        aligned: Overlaps of the pairs ``(boxes1[i], boxes2[i])`` only.
    """
    if mode_flag not in (0, 1):
        raise ValueError(f"{NAME}.box_iou_rotated: mode_flag must be 0 or 1, got {mode_flag!r}")
    mode = "iou" if mode_flag == 0 else "iof"
    found = _box_iou_rotated(boxes1, boxes2, mode=mode, aligned=bool(aligned))
    ious.copy_(found.reshape(ious.shape))


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "box_iou_rotated": box_iou_rotated,
    "ms_deform_attn_backward": ms_deform_attn_backward,
    "ms_deform_attn_forward": ms_deform_attn_forward,
    "nms": nms,
}


def ext_module(missing: Callable[[str], ImportError]) -> ModuleType:
    """A fresh ``mmcv._ext`` holding :data:`ENTRY_POINTS`.

    Args:
        missing: Makes the error for a name that is not supplied, given its full name.

    Returns:
        The module; looking up any other public name raises ``missing(name)``.
    """
    module = ModuleType(NAME)
    module.__doc__ = f"mmpar's stand-in for {NAME} (see mmpar.compat.mmcv_ext)."
    module.__mmpar_ops__ = True
    vars(module).update(ENTRY_POINTS)

    def __getattr__(attr: str) -> object:
        if attr.startswith("__"):
            raise AttributeError(f"module {NAME!r} has no attribute {attr!r}")
        raise missing(f"{NAME}.{attr}")

    module.__getattr__ = __getattr__
    return module
