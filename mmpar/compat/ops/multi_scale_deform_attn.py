"""Multi-scale deformable attention (Deformable DETR), as ``mmcv.ops.multi_scale_deform_attn``.

The sampling, on every device the plain-torch path, is
:mod:`mmpar.compat.ops.sampling.deform_attn_sampling`'s (its two names are mmcv's, and
this module's too); ``im2col_step`` (a batching knob of mmcv's CUDA kernel) has
no effect here.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Optional

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import check_int, check_layer_input
from mmpar.compat.ops.sampling.deform_attn_sampling import (
    MultiScaleDeformableAttnFunction,
    multi_scale_deformable_attn_pytorch,
)

__all__ = [
    "MultiScaleDeformableAttention",
    "MultiScaleDeformableAttnFunction",
    "multi_scale_deformable_attn_pytorch",
]

_MODULE = "mmcv.ops.MultiScaleDeformableAttention"


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
        TypeError: a size that is not an int.
        ValueError: a size below 1, or ``embed_dims`` not divisible by ``num_heads``.
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
        for name, count in (
            ("embed_dims", embed_dims),
            ("num_heads", num_heads),
            ("num_levels", num_levels),
            ("num_points", num_points),
        ):
            check_int(_MODULE, name, count, 1)
        if embed_dims % num_heads != 0:
            raise ValueError(
                f"{_MODULE}: embed_dims must be divisible by num_heads, "
                f"found embed_dims={embed_dims}, num_heads={num_heads}"
            )
        expected = f"{_MODULE}: dropout must be a probability in [0, 1]"
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
            raise TypeError(f"{expected}, found {type(dropout).__name__}")
        if not 0.0 <= dropout <= 1.0:  # NaN too
            raise ValueError(f"{expected}, found {dropout!r}")
        self.init_cfg = init_cfg
        self.norm_cfg = norm_cfg
        self.dropout = nn.Dropout(float(dropout))
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
            TypeError: query or value not floating point or not of the layer's
                dtype (outside autocast), spatial_shapes not integer, or an
                argument that is not a tensor.
            ValueError: reference_points or spatial_shapes missing or malformed,
                query, value, identity, query_pos, key_padding_mask or
                reference_points of shapes that do not fit together (batch
                sizes included) or not on the layer's device; ``ArgumentError``
                (mmcv asserts it) for a value whose length is not the levels'
                total size.
        """
        if "residual" in kwargs:
            if identity is not None:
                raise ValueError(
                    f"{_MODULE}.forward: got both identity and its deprecated name residual; "
                    "pass identity only"
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
                f"{_MODULE}.forward: reference_points and spatial_shapes "
                f"are required, found reference_points={type(reference_points).__name__}, "
                f"spatial_shapes={type(spatial_shapes).__name__}"
            )
        if value is None:
            value = query
        if identity is None:
            identity = query
        self._check_inputs(query, value, identity, query_pos)
        if query_pos is not None:
            query = query + query_pos
        if not self.batch_first:
            query = query.transpose(0, 1)
            value = value.transpose(0, 1)
        bs, num_queries, _ = query.shape
        num_keys = value.shape[1]
        self._check_mask_and_references(bs, num_queries, num_keys, key_padding_mask,
                                        reference_points, spatial_shapes)  # fmt: skip

        value = self.value_proj(value)
        if key_padding_mask is not None:
            value = value.masked_fill(key_padding_mask[..., None], 0.0)
        value = value.view(bs, num_keys, self.num_heads, self.embed_dims // self.num_heads)
        sample_dims = (bs, num_queries, self.num_heads, self.num_levels, self.num_points)
        offsets = self.sampling_offsets(query).view(*sample_dims, 2)
        weights = self.attention_weights(query).view(
            bs, num_queries, self.num_heads, self.num_levels * self.num_points
        )
        weights = weights.softmax(-1).view(sample_dims)
        locations = self._sampling_locations(reference_points, offsets, spatial_shapes)
        if spatial_shapes.shape[0] < self.num_levels:
            locations, weights = _as_kernel_reads(locations, weights, spatial_shapes.shape[0])
        output = multi_scale_deformable_attn_pytorch(value, spatial_shapes, locations, weights)
        output = self.output_proj(output)
        if not self.batch_first:
            output = output.transpose(0, 1)
        return self.dropout(output) + identity

    def _check_inputs(
        self, query: Tensor, value: Tensor, identity: Tensor, query_pos: Optional[Tensor]
    ) -> None:
        """One-line errors for the tensors of :meth:`forward`, in their given layout."""
        layout = "(bs, n, embed_dims)" if self.batch_first else "(n, bs, embed_dims)"
        batch_dim = 0 if self.batch_first else 1
        for name, tensor in (("query", query), ("value", value)):
            if not isinstance(tensor, Tensor) or not tensor.is_floating_point():
                found = tensor.dtype if isinstance(tensor, Tensor) else type(tensor).__name__
                raise TypeError(f"{_MODULE}: {name} must be a floating-point tensor, found {found}")
            if tensor.dim() != 3 or tensor.shape[-1] != self.embed_dims:
                raise ValueError(
                    f"{_MODULE}: {name} must be {layout} with embed_dims={self.embed_dims}, "
                    f"found {tuple(tensor.shape)}"
                )
        if value.shape[batch_dim] != query.shape[batch_dim]:
            raise ValueError(
                f"{_MODULE}: value's batch size must be query's ({query.shape[batch_dim]}), "
                f"found {value.shape[batch_dim]} (value {tuple(value.shape)}, layout {layout})"
            )
        for name, tensor in (("identity", identity), ("query_pos", query_pos)):
            if tensor is not None and not isinstance(tensor, Tensor):
                raise TypeError(
                    f"{_MODULE}: {name} must be a tensor or None, found {type(tensor).__name__}"
                )
            if tensor is not None and tuple(tensor.shape) != tuple(query.shape):
                raise ValueError(
                    f"{_MODULE}: {name} must have query's shape {tuple(query.shape)}, "
                    f"found {tuple(tensor.shape)}"
                )
        for name, tensor in (("query", query), ("value", value), ("query_pos", query_pos)):
            if tensor is not None:
                check_layer_input(_MODULE, name, tensor, self.value_proj.weight)

    def _check_mask_and_references(
        self,
        bs: int,
        num_queries: int,
        num_keys: int,
        key_padding_mask: Optional[Tensor],
        reference_points: Tensor,
        spatial_shapes: Tensor,
    ) -> None:
        """One-line errors for ``key_padding_mask``, ``reference_points`` and ``spatial_shapes``."""
        # One level where the layer has more is what mmcv's kernel reads as one level:
        # UniAD's panoptic head builds num_levels=4 layers over its single BEV map.
        if (
            not isinstance(spatial_shapes, Tensor)
            or spatial_shapes.dim() != 2
            or spatial_shapes.shape[1] != 2
            or spatial_shapes.shape[0] not in (self.num_levels, 1)
        ):
            found = (
                tuple(spatial_shapes.shape)
                if isinstance(spatial_shapes, Tensor)
                else type(spatial_shapes).__name__
            )
            raise ValueError(
                f"{_MODULE}: spatial_shapes must be a (num_levels, 2) = ({self.num_levels}, 2) "
                f"tensor of (h, w) (or one level's (1, 2)), found {found}"
            )
        if spatial_shapes.is_floating_point() or spatial_shapes.dtype == torch.bool:
            raise TypeError(
                f"{_MODULE}: spatial_shapes must be an integer (long) tensor, "
                f"found {spatial_shapes.dtype}"
            )
        for name, tensor in (
            ("spatial_shapes", spatial_shapes),
            ("key_padding_mask", key_padding_mask),
            ("reference_points", reference_points),
        ):
            if tensor is not None and not isinstance(tensor, Tensor):
                raise TypeError(
                    f"{_MODULE}: {name} must be a tensor, found {type(tensor).__name__}"
                )
            if tensor is not None and tensor.device != self.value_proj.weight.device:
                raise ValueError(
                    f"{_MODULE}: {name} must be on the layer's device "
                    f"{self.value_proj.weight.device}, found {tensor.device}"
                )
        if key_padding_mask is not None and (
            key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (bs, num_keys)
        ):
            raise ValueError(
                f"{_MODULE}: key_padding_mask must be a bool (bs, num_keys) = {(bs, num_keys)} "
                f"tensor, found {key_padding_mask.dtype} {tuple(key_padding_mask.shape)}"
            )
        expected = (bs, num_queries, self.num_levels)
        given = (bs, num_queries, spatial_shapes.shape[0])
        if tuple(reference_points.shape[:-1]) not in (expected, given):
            raise ValueError(
                f"{_MODULE}: reference_points must be (bs, num_queries, num_levels, 2 or 4) with "
                f"(bs, num_queries, num_levels) = {expected}, "
                f"found {tuple(reference_points.shape)}"
            )

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
            f"{_MODULE}.forward: reference_points' last dim must be "
            f"2 (x, y) or 4 (x, y, w, h), found {reference_points.shape[-1]}"
        )


def _as_kernel_reads(locations: Tensor, weights: Tensor, levels: int) -> tuple[Tensor, Tensor]:
    """The locations and weights that mmcv's kernel reads when given fewer levels.

    The kernel takes the level count from ``spatial_shapes`` and reads the contiguous
    buffers of (bs, nq, heads, num_levels, points, 2) locations and (bs, nq, heads,
    num_levels, points) weights as if they held that many levels: their first
    elements, laid out for ``levels`` levels. The same elements, read the same way.

    Returns:
        (bs, nq, heads, levels, points, 2) locations and (bs, nq, heads, levels, points)
        weights.
    """
    bs, nq, heads, _, points = weights.shape
    shape = (bs, nq, heads, levels, points)
    size = bs * nq * heads * levels * points
    read_locations = locations.contiguous().reshape(-1)[: size * 2].view(*shape, 2)
    return read_locations, weights.contiguous().reshape(-1)[:size].view(shape)
