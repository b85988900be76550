"""Multi-scale deformable attention's sampling (not an mmcv module; mmcv's
``multi_scale_deform_attn`` gives these names).

Every device runs the plain-torch path (one ``F.grid_sample`` per feature level):
mmcv-full's CUDA kernel samples the same points with the same bilinear rule
(pixel centres at ``(i + 0.5) / w``, zeros outside the map), so results agree
up to float rounding. ``im2col_step`` (a batching knob of that kernel) has no
effect here.

A NaN or infinite sampling location reads 0 and gets no gradient, as in
mmcv-full's kernel (whose bounds test is false for it; ``grid_sample`` alone
would give NaN). A NaN in ``value`` or in the attention weights reaches the
outputs that read it.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from mmpar.compat.ops.backend import ArgumentError, check_float_tensors

__all__ = ["MultiScaleDeformableAttnFunction", "multi_scale_deformable_attn_pytorch"]

_FUNC = "mmcv.ops.multi_scale_deformable_attn_pytorch"
#: A normalised grid coordinate whose sample lies wholly off any map (x * w - 0.5 < -1).
_OFF_MAP = -3.0


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
    summed with the attention weights.

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
    _, num_queries, _, _, num_points, _ = sampling_locations.shape
    # Mixed dtypes (amp leaves the locations in float32) are computed in the wider one.
    dtype = torch.promote_types(value.dtype, sampling_locations.dtype)
    grids = sampling_locations.to(dtype) * 2 - 1
    grids = torch.where(grids.isfinite(), grids, _OFF_MAP)
    # (bs, nq, nh, L, P) -> (bs * nh, 1, nq, L, P), to broadcast over the head's dims.
    weights = attention_weights.to(dtype).transpose(1, 2).flatten(0, 1).unsqueeze(1)
    out = value.new_zeros((bs * num_heads, head_dims, num_queries), dtype=dtype)
    maps = value.to(dtype).split([h * w for h, w in shapes], dim=1)
    for level, ((h, w), level_value) in enumerate(zip(shapes, maps)):
        if h * w == 0:
            continue  # an empty level contributes nothing (grid_sample rejects it)
        # (bs, h*w, nh, d) -> (bs * nh, d, h, w)
        level_map = level_value.permute(0, 2, 3, 1).reshape(bs * num_heads, head_dims, h, w)
        # (bs, nq, nh, P, 2) -> (bs * nh, nq, P, 2)
        level_grid = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        samples = F.grid_sample(
            level_map, level_grid, mode="bilinear", padding_mode="zeros", align_corners=False
        )  # (bs * nh, d, nq, P)
        out = out + (samples * weights[..., level, :]).sum(-1)
    out = out.view(bs, num_heads * head_dims, num_queries).transpose(1, 2)
    return out.to(value.dtype).contiguous()


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
