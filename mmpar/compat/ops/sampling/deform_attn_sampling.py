"""Multi-scale deformable attention's sampling (not an mmcv module; mmcv's
``multi_scale_deform_attn`` gives these names).

Every device runs the plain-torch path (one ``F.grid_sample`` per feature level):
mmcv-full's CUDA kernel samples the same points with the same bilinear rule
(pixel centres at ``(i + 0.5) / w``, zeros outside the map), so results agree
up to float rounding. ``im2col_step`` (a batching knob of that kernel) has no
effect here. Between the passes only the inputs are kept, as the kernel keeps
them: the backward samples again, one level at a time.

A NaN or infinite sampling location reads 0 and gets no gradient, as in
mmcv-full's kernel (whose bounds test is false for it; ``grid_sample`` alone
would give NaN). A NaN in ``value`` or in the attention weights reaches the
outputs that read it.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import torch
from torch import Tensor

from mmpar.compat.ops.backend import ArgumentError, check_float_tensors
from mmpar.compat.ops.sampling.deform_attn_kernel import (
    DeformAttnFunction,
    attend_backward,
    to_grids,
)

__all__ = [
    "MultiScaleDeformableAttnFunction",
    "multi_scale_deformable_attn_grads",
    "multi_scale_deformable_attn_pytorch",
]

_FUNC = "mmcv.ops.multi_scale_deformable_attn_pytorch"


def _level_shapes(spatial_shapes: Union[Tensor, Sequence[Sequence[int]]]) -> list[tuple[int, int]]:
    """The (h, w) of every level as Python ints (one host read of a device tensor)."""
    if isinstance(spatial_shapes, Tensor) and (
        spatial_shapes.is_floating_point() or spatial_shapes.dtype == torch.bool
    ):  # int() would cut 2.5 to 2: another level size than the caller's
        raise TypeError(
            f"{_FUNC}: value_spatial_shapes must be an integer tensor, found {spatial_shapes.dtype}"
        )
    rows = spatial_shapes.tolist() if isinstance(spatial_shapes, Tensor) else spatial_shapes
    if any(isinstance(v, float) and v != int(v) for row in rows for v in row):
        raise TypeError(f"{_FUNC}: value_spatial_shapes must be integers, found {rows}")
    shapes = [tuple(int(v) for v in row) for row in rows]
    if any(len(s) != 2 or min(s) < 0 for s in shapes):
        found = tuple(spatial_shapes.shape) if isinstance(spatial_shapes, Tensor) else rows
        raise ValueError(
            f"{_FUNC}: value_spatial_shapes must be (num_levels, 2) rows of (h, w) >= 0, "
            f"found {found}"
        )
    return shapes  # type: ignore[return-value]


def _check_shapes(
    value: Tensor,
    shapes: list[tuple[int, int]],
    sampling_locations: Tensor,
    attention_weights: Tensor,
) -> None:
    """Raises TypeError or ValueError unless the inputs describe one consistent attention."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{_FUNC}: value must be a floating-point tensor, found {type(value).__name__}"
        )
    check_float_tensors(
        _FUNC,
        value.device,
        "value's",
        value=value,
        sampling_locations=sampling_locations,
        attention_weights=attention_weights,
    )
    if value.dim() != 4:
        raise ValueError(
            f"{_FUNC}: value must be (bs, num_keys, num_heads, dims_per_head), "
            f"found shape {tuple(value.shape)}"
        )
    if sampling_locations.dim() != 6 or sampling_locations.shape[-1] != 2:
        raise ValueError(
            f"{_FUNC}: sampling_locations must be (bs, num_queries, num_heads, num_levels, "
            f"num_points, 2), found shape {tuple(sampling_locations.shape)}"
        )
    if tuple(attention_weights.shape) != tuple(sampling_locations.shape[:-1]):
        raise ValueError(
            f"{_FUNC}: attention_weights must be (bs, num_queries, num_heads, num_levels, "
            f"num_points) = {tuple(sampling_locations.shape[:-1])} (sampling_locations' "
            f"leading dims), found {tuple(attention_weights.shape)}"
        )
    bs, num_keys, num_heads, _ = value.shape
    loc_bs, _, loc_heads, num_levels, _, _ = sampling_locations.shape
    if (loc_bs, loc_heads) != (bs, num_heads):
        raise ValueError(
            f"{_FUNC}: sampling_locations' (bs, num_heads) must be value's {(bs, num_heads)}, "
            f"found {(loc_bs, loc_heads)}"
        )
    if len(shapes) != num_levels:
        raise ValueError(
            f"{_FUNC}: value_spatial_shapes must have one row per level "
            f"({num_levels}, from sampling_locations), found {len(shapes)}"
        )
    total = sum(h * w for h, w in shapes)
    if total != num_keys:  # mmcv asserts it
        raise ArgumentError(
            f"{_FUNC}: the levels' h * w must add up to value's num_keys ({num_keys}), "
            f"found {total} from value_spatial_shapes {shapes}"
        )


def multi_scale_deformable_attn_pytorch(
    value: Tensor,
    value_spatial_shapes: Tensor,
    sampling_locations: Tensor,
    attention_weights: Tensor,
) -> Tensor:
    """Multi-scale deformable attention in plain torch, differentiable in every float input.

    Every query, head, level and point samples its level's value map bilinearly
    at a normalised location (x, y) in [0, 1] (pixel ``i`` has its centre at
    ``(i + 0.5) / w``; samples outside the map read zeros), and the samples are
    summed with the attention weights. Between the forward and the backward pass
    only the inputs are kept, as with mmcv-full's CUDA kernel: the backward
    samples again, level by level, rather than holding every level's samples
    (``num_queries * num_heads * num_levels * num_points * dims_per_head``
    values) from the forward.

    Args:
        value: (bs, num_keys, num_heads, dims_per_head) float; the levels' maps
            one after another, each flattened row-major (num_keys = sum of h * w).
        value_spatial_shapes: (num_levels, 2) long, the (h, w) of every level.
        sampling_locations: (bs, num_queries, num_heads, num_levels, num_points, 2)
            float, the (x, y) of every sample, normalised to [0, 1].
        attention_weights: (bs, num_queries, num_heads, num_levels, num_points) float.

    Returns:
        (bs, num_queries, num_heads * dims_per_head), in value's dtype; heads
        side by side in the last dim.

    Raises:
        TypeError: a tensor that is not floating point.
        ValueError: inconsistent shapes or devices (``ArgumentError``, which mmcv
            asserts, where the levels do not add up to ``num_keys``).
    """
    shapes = _level_shapes(value_spatial_shapes)
    _check_shapes(value, shapes, sampling_locations, attention_weights)
    bs, _, num_heads, head_dims = value.shape
    num_queries = sampling_locations.shape[1]
    # Mixed dtypes (amp leaves the locations in float32) are computed in the wider one.
    dtype = torch.promote_types(value.dtype, sampling_locations.dtype)
    grids = to_grids(sampling_locations, dtype)
    out = DeformAttnFunction.apply(value.to(dtype), shapes, grids, attention_weights.to(dtype))
    out = out.view(bs, num_heads * head_dims, num_queries).transpose(1, 2)
    return out.to(value.dtype).contiguous()


def multi_scale_deformable_attn_grads(
    value: Tensor,
    value_spatial_shapes: Tensor,
    sampling_locations: Tensor,
    attention_weights: Tensor,
    grad_output: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of :func:`multi_scale_deformable_attn_pytorch`'s output, without autograd.

    One backward pass, the samples computed again level by level (no forward
    graph is built): what a hand-written autograd function around the attention
    needs in its ``backward``.

    Args:
        value: As :func:`multi_scale_deformable_attn_pytorch`'s.
        value_spatial_shapes: As :func:`multi_scale_deformable_attn_pytorch`'s.
        sampling_locations: As :func:`multi_scale_deformable_attn_pytorch`'s.
        attention_weights: As :func:`multi_scale_deformable_attn_pytorch`'s.
        grad_output: (bs, num_queries, num_heads * dims_per_head), the gradient
            of the attention's output.

    Returns:
        The gradients of ``value``, ``sampling_locations`` (0 where a location
        is not finite) and ``attention_weights``, each shaped and typed as its input.

    Raises:
        TypeError: a tensor that is not floating point, or a ``grad_output``
            that is not a tensor.
        ValueError: inconsistent shapes or devices, or a ``grad_output`` of
            another shape than the output's.
    """
    shapes = _level_shapes(value_spatial_shapes)
    _check_shapes(value, shapes, sampling_locations, attention_weights)
    bs, _, num_heads, head_dims = value.shape
    num_queries = sampling_locations.shape[1]
    expected = (bs, num_queries, num_heads * head_dims)
    if not isinstance(grad_output, Tensor):
        raise TypeError(
            f"{_FUNC}: grad_output must be a tensor, found {type(grad_output).__name__}"
        )
    if tuple(grad_output.shape) != expected:
        raise ValueError(
            f"{_FUNC}: grad_output must be the output's shape {expected}, "
            f"found {tuple(grad_output.shape)}"
        )
    dtype = torch.promote_types(value.dtype, sampling_locations.dtype)
    grad_heads = grad_output.to(dtype).transpose(1, 2).reshape(bs * num_heads, head_dims, -1)
    grad_value, grad_grids, grad_weights = attend_backward(
        value.to(dtype),
        shapes,
        to_grids(sampling_locations, dtype),
        attention_weights.to(dtype),
        grad_heads.contiguous(),
    )
    grad_locations = torch.where(sampling_locations.isfinite(), grad_grids * 2, 0.0)
    return (
        grad_value.to(value.dtype),
        grad_locations.to(sampling_locations.dtype),
        grad_weights.to(attention_weights.dtype),
    )


class MultiScaleDeformableAttnFunction:
    """Stand-in for mmcv's autograd Function of the CUDA kernel, for code that calls it directly.

    :meth:`apply` runs :func:`multi_scale_deformable_attn_pytorch`, whose
    gradients come from torch's autograd.
    """

    @staticmethod
    def apply(
        value: Tensor,
        value_spatial_shapes: Tensor,
        value_level_start_index: Tensor,
        sampling_locations: Tensor,
        attention_weights: Tensor,
        im2col_step: Any,
    ) -> Tensor:
        """mmcv's argument order; see :func:`multi_scale_deformable_attn_pytorch`.

        Args:
            value: (bs, num_keys, num_heads, dims_per_head) float.
            value_spatial_shapes: (num_levels, 2) long, (h, w) per level.
            value_level_start_index: (num_levels,) long; unused: the levels
                start where ``value_spatial_shapes`` puts them (mmcv's callers
                always pass its cumulative sum).
            sampling_locations: (bs, num_queries, num_heads, num_levels, num_points, 2).
            attention_weights: (bs, num_queries, num_heads, num_levels, num_points).
            im2col_step: The CUDA kernel's batch chunk; no effect here.

        Returns:
            (bs, num_queries, num_heads * dims_per_head).
        """
        del value_level_start_index, im2col_step
        return multi_scale_deformable_attn_pytorch(
            value, value_spatial_shapes, sampling_locations, attention_weights
        )
