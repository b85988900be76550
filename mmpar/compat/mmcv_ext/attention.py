"""Multi-scale deformable attention's ``mmcv._ext`` entry points on
:func:`mmpar.compat.ops.multi_scale_deform_attn.multi_scale_deformable_attn_pytorch`.

BEVFormer, UniAD, VAD, MapTR, SurroundOcc, TPVFormer, FB-BEV and their descendants
define their own autograd function around these two::

    ext_module = ext_loader.load_ext("_ext", ["ms_deform_attn_forward", "ms_deform_attn_backward"])

``ms_deform_attn_forward`` returns the output; ``ms_deform_attn_backward`` adds the
gradients into ``grad_value``, ``grad_sampling_loc`` and ``grad_attn_weight`` (the CUDA
kernel's atomic adds; callers pass zeros). ``value_level_start_index`` must agree with
``value_spatial_shapes`` (it is not read), and ``im2col_step`` has no effect.
NaN/inf: as mmpar's op (bilinear sampling with zero padding, NaN propagates).
"""

from __future__ import annotations

from typing import Callable, Dict

import torch
from torch import Tensor

from mmpar.compat.ops.multi_scale_deform_attn import multi_scale_deformable_attn_pytorch
from mmpar.compat.ops.sampling.deform_attn_sampling import multi_scale_deformable_attn_grads

__all__ = ["ENTRY_POINTS", "ms_deform_attn_backward", "ms_deform_attn_forward"]


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
    grads = multi_scale_deformable_attn_grads(
        value, value_spatial_shapes, sampling_locations, attention_weights, grad_output
    )
    for target, grad in zip((grad_value, grad_sampling_loc, grad_attn_weight), grads):
        target.add_(grad.to(target.dtype))


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "ms_deform_attn_backward": ms_deform_attn_backward,
    "ms_deform_attn_forward": ms_deform_attn_forward,
}
