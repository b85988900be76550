"""Multi-scale deformable attention (Deformable DETR), as ``mmcv.ops.multi_scale_deform_attn``.

Every device runs the plain-torch path (one ``F.grid_sample`` per feature level):
mmcv-full's CUDA kernel samples the same points with the same bilinear rule
(pixel centres at ``(i + 0.5) / w``, zeros outside the map), so results agree
up to float rounding. ``im2col_step`` (a batching knob of that kernel) has no
effect here.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "MultiScaleDeformableAttention",
    "MultiScaleDeformableAttnFunction",
    "multi_scale_deformable_attn_pytorch",
]

_FUNC = "multi_scale_deformable_attn_pytorch"


def _level_shapes(spatial_shapes: Union[Tensor, Sequence[Sequence[int]]]) -> list[tuple[int, int]]:
    """The (h, w) of every level as Python ints (one host read of a device tensor)."""
    rows = spatial_shapes.tolist() if isinstance(spatial_shapes, Tensor) else spatial_shapes
    shapes = [tuple(int(v) for v in row) for row in rows]
    if any(len(s) != 2 for s in shapes):
        found = tuple(spatial_shapes.shape) if isinstance(spatial_shapes, Tensor) else rows
        raise ValueError(
            f"{_FUNC}: value_spatial_shapes must be (num_levels, 2) rows of (h, w), found {found}"
        )
    return shapes  # type: ignore[return-value]


def _check_shapes(
    value: Tensor,
    shapes: list[tuple[int, int]],
    sampling_locations: Tensor,
    attention_weights: Tensor,
) -> None:
    """Raises ValueError unless the four inputs describe one consistent attention."""
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
    if total != num_keys:
        raise ValueError(
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
        ValueError: inconsistent shapes.
    """
    shapes = _level_shapes(value_spatial_shapes)
    _check_shapes(value, shapes, sampling_locations, attention_weights)
    bs, _, num_heads, head_dims = value.shape
    _, num_queries, _, _, num_points, _ = sampling_locations.shape
    # Mixed dtypes (amp leaves the locations in float32) are computed in the wider one.
    dtype = torch.promote_types(value.dtype, sampling_locations.dtype)
    grids = sampling_locations.to(dtype) * 2 - 1
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


class MultiScaleDeformableAttention(nn.Module):
    """The attention of Deformable DETR (https://arxiv.org/abs/2010.04159), as mmcv's module.

    Each query predicts, per head, level and point, an offset from its
    reference point and an attention weight (softmax over levels * points);
    the value maps are sampled there and summed.

    Args:
        embed_dims: Channels of query and value.
        num_heads: Attention heads; must divide ``embed_dims``.
        num_levels: Feature levels.
        num_points: Sampling points per query, head and level.
        im2col_step: mmcv's CUDA batching knob; kept as an attribute, no effect.
        dropout: Dropout on the output, before the identity is added.
        batch_first: Query/value are (bs, n, embed_dims) rather than (n, bs, embed_dims).
        norm_cfg: Kept as an attribute (mmcv does not use it either).
        init_cfg: mmcv's BaseModule init config; kept as an attribute.

    Raises:
        ValueError: ``embed_dims`` not divisible by ``num_heads``.
    """

    def __init__(
        self,
        embed_dims: int = 256,
        num_heads: int = 8,
        num_levels: int = 4,
        num_points: int = 4,
        im2col_step: int = 64,
        dropout: float = 0.1,
        batch_first: bool = False,
        norm_cfg: Optional[dict] = None,
        init_cfg: Optional[dict] = None,
    ) -> None:
        super().__init__()
        if embed_dims % num_heads != 0:
            raise ValueError(
                "MultiScaleDeformableAttention: embed_dims must be divisible by num_heads, "
                f"found embed_dims={embed_dims}, num_heads={num_heads}"
            )
        self.init_cfg = init_cfg
        self.norm_cfg = norm_cfg
        self.dropout = nn.Dropout(dropout)
        self.batch_first = batch_first
        self.im2col_step = im2col_step
        self.embed_dims = embed_dims
        self.num_levels = num_levels
        self.num_heads = num_heads
        self.num_points = num_points
        samples = num_heads * num_levels * num_points
        self.sampling_offsets = nn.Linear(embed_dims, samples * 2)
        self.attention_weights = nn.Linear(embed_dims, samples)
        self.value_proj = nn.Linear(embed_dims, embed_dims)
        self.output_proj = nn.Linear(embed_dims, embed_dims)
        self.init_weights()

    def init_weights(self) -> None:
        """mmcv's init: head k's points lie on the ray at angle 2*pi*k/num_heads.

        The offsets' bias puts point p (0-based) of head k at (p + 1) times the
        head's direction (cos, sin), scaled so its larger coordinate is +-1;
        the offsets' weight and the attention weights start at zero, and the
        value/output projections are xavier-uniform with zero bias.
        """
        nn.init.zeros_(self.sampling_offsets.weight)
        step = 2.0 * math.pi / self.num_heads
        angles = torch.arange(self.num_heads, dtype=torch.float32) * step
        directions = torch.stack([angles.cos(), angles.sin()], -1)
        directions = directions / directions.abs().max(-1, keepdim=True).values
        steps = torch.arange(1, self.num_points + 1, dtype=torch.float32)
        # (heads, 1, 1, 2) * (1, 1, points, 1) -> (heads, levels, points, 2)
        grid = directions[:, None, None, :] * steps[None, None, :, None]
        grid = grid.expand(self.num_heads, self.num_levels, self.num_points, 2)
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid.reshape(-1))
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for proj in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(proj.weight)
            nn.init.zeros_(proj.bias)
        self._is_init = True

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor] = None,
        value: Optional[Tensor] = None,
        identity: Optional[Tensor] = None,
        query_pos: Optional[Tensor] = None,
        key_padding_mask: Optional[Tensor] = None,
        reference_points: Optional[Tensor] = None,
        spatial_shapes: Optional[Tensor] = None,
        level_start_index: Optional[Tensor] = None,
        **kwargs: Any,
    ) -> Tensor:
        """Attends from every query to its sampled points.

        Args:
            query: (num_queries, bs, embed_dims), or (bs, num_queries, embed_dims)
                with ``batch_first``.
            key: Unused (as in mmcv).
            value: (num_keys, bs, embed_dims) (or batch first); ``query`` if None.
            identity: Added to the output, as ``query``'s shape; ``query`` if None.
                mmcv's deprecated name ``residual`` is accepted, with a
                DeprecationWarning.
            query_pos: Added to ``query`` (not to ``identity``) when given.
            key_padding_mask: (bs, num_keys) bool; True zeroes that value.
            reference_points: (bs, num_queries, num_levels, 2), (x, y) in [0, 1];
                or (bs, num_queries, num_levels, 4), (x, y, w, h) boxes, the
                offsets then scaled by (w, h) * 0.5 / num_points.
            spatial_shapes: (num_levels, 2) long, (h, w) per level.
            level_start_index: (num_levels,) long; unused (the levels follow
                ``spatial_shapes``).
            **kwargs: Ignored (mmcv's transformer passes extra keys).

        Returns:
            Same layout as ``query``.

        Raises:
            ValueError: reference_points or spatial_shapes missing or malformed,
                or value's length not the levels' total size.
        """
        if "residual" in kwargs:
            if identity is not None:
                raise ValueError(
                    "MultiScaleDeformableAttention.forward: got both identity and its "
                    "deprecated name residual; pass identity only"
                )
            warnings.warn(
                '"residual" is deprecated in `MultiScaleDeformableAttention.forward`, '
                'please use "identity" instead',
                DeprecationWarning,
                stacklevel=2,
            )
            identity = kwargs.pop("residual")
        if reference_points is None or spatial_shapes is None:
            raise ValueError(
                "MultiScaleDeformableAttention.forward: reference_points and spatial_shapes "
                f"are required, found reference_points={type(reference_points).__name__}, "
                f"spatial_shapes={type(spatial_shapes).__name__}"
            )
        if value is None:
            value = query
        if identity is None:
            identity = query
        if query_pos is not None:
            query = query + query_pos
        if not self.batch_first:
            query = query.transpose(0, 1)
            value = value.transpose(0, 1)
        bs, num_queries, _ = query.shape
        num_keys = value.shape[1]

        value = self.value_proj(value)
        if key_padding_mask is not None:
            value = value.masked_fill(key_padding_mask[..., None], 0.0)
        value = value.view(bs, num_keys, self.num_heads, -1)
        sample_dims = (bs, num_queries, self.num_heads, self.num_levels, self.num_points)
        offsets = self.sampling_offsets(query).view(*sample_dims, 2)
        weights = self.attention_weights(query).view(bs, num_queries, self.num_heads, -1)
        weights = weights.softmax(-1).view(sample_dims)
        locations = self._sampling_locations(reference_points, offsets, spatial_shapes)
        output = multi_scale_deformable_attn_pytorch(value, spatial_shapes, locations, weights)
        output = self.output_proj(output)
        if not self.batch_first:
            output = output.transpose(0, 1)
        return self.dropout(output) + identity

    def _sampling_locations(
        self, reference_points: Tensor, offsets: Tensor, spatial_shapes: Tensor
    ) -> Tensor:
        """(bs, nq, heads, levels, points, 2) locations from the references and the offsets."""
        # reference_points: (bs, nq, levels, 2 or 4) -> (bs, nq, 1, levels, 1, 2 or 4)
        refs = reference_points[:, :, None, :, None, :]
        if reference_points.shape[-1] == 2:
            # Offsets are in pixels of each level: divide by its (w, h).
            level_wh = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
            return refs + offsets / level_wh[None, None, None, :, None, :]
        if reference_points.shape[-1] == 4:
            return refs[..., :2] + offsets / self.num_points * refs[..., 2:] * 0.5
        raise ValueError(
            "MultiScaleDeformableAttention.forward: reference_points' last dim must be "
            f"2 (x, y) or 4 (x, y, w, h), found {reference_points.shape[-1]}"
        )
