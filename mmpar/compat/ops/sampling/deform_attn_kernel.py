"""Multi-scale deformable attention's arithmetic: bilinear samples summed with weights.

The forward reads every level's value map with one ``F.grid_sample`` (mmcv-full's CUDA
kernel's bilinear rule: pixel centres at ``(i + 0.5) / w``, zeros off the map); the
backward samples again, one level at a time, and hands the samples' gradient to
``grid_sample``'s own backward. Between the passes only the inputs are kept, as that
kernel keeps them. Shapes and dtypes are checked by the callers
(:mod:`mmpar.compat.ops.sampling.deform_attn_sampling`).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["DeformAttnFunction", "attend", "attend_backward", "to_grids"]

#: A normalised grid coordinate whose sample lies wholly off any map (x * w - 0.5 < -1).
_OFF_MAP = -3.0


def to_grids(sampling_locations: Tensor, dtype: torch.dtype) -> Tensor:
    """Locations (bs, nq, nh, L, P, 2) in [0, 1] as grid_sample's [-1, 1]; non-finite: off-map."""
    grids = sampling_locations.to(dtype) * 2 - 1
    return torch.nan_to_num(grids, nan=_OFF_MAP, posinf=_OFF_MAP, neginf=_OFF_MAP)


def _level_inputs(
    value: Tensor, h: int, w: int, start: int, grids: Tensor, level: int
) -> tuple[Tensor, Tensor]:
    """One level's value map (bs * nh, d, h, w) and sampling grid (bs * nh, nq, P, 2)."""
    bs, _, num_heads, head_dims = value.shape
    level_map = value[:, start : start + h * w].permute(0, 2, 3, 1)
    level_map = level_map.reshape(bs * num_heads, head_dims, h, w)
    return level_map, grids[:, :, :, level].transpose(1, 2).flatten(0, 1)


def _sample(level_map: Tensor, level_grid: Tensor) -> Tensor:
    """Bilinear samples (bs * nh, d, nq, P), zeros off the map, pixel centres at (i + 0.5) / w."""
    return F.grid_sample(
        level_map, level_grid, mode="bilinear", padding_mode="zeros", align_corners=False
    )


def _starts(shapes: list[tuple[int, int]]) -> list[int]:
    """Where every level's keys start in value's num_keys."""
    starts, total = [], 0
    for h, w in shapes:
        starts.append(total)
        total += h * w
    return starts


def attend(value: Tensor, shapes: list[tuple[int, int]], grids: Tensor, weights: Tensor) -> Tensor:
    """Every query's bilinear samples summed with their attention weights.

    Args:
        value: (bs, num_keys, nh, d), in the compute dtype.
        shapes: (h, w) of every level.
        grids: (bs, nq, nh, L, P, 2), as :func:`to_grids` makes them.
        weights: (bs, nq, nh, L, P), in the compute dtype.

    Returns:
        (bs * nh, d, nq): every head's output, channels first.
    """
    bs, _, num_heads, head_dims = value.shape
    num_queries = grids.shape[1]
    # (bs, nq, nh, L, P) -> (bs * nh, 1, nq, L, P), to broadcast over the head's dims.
    weights = weights.transpose(1, 2).flatten(0, 1).unsqueeze(1)
    out = value.new_zeros((bs * num_heads, head_dims, num_queries))
    for level, ((h, w), start) in enumerate(zip(shapes, _starts(shapes))):
        if h * w == 0:
            continue  # an empty level contributes nothing (grid_sample rejects it)
        samples = _sample(*_level_inputs(value, h, w, start, grids, level))
        out += (samples * weights[..., level, :]).sum(-1)
    return out


def attend_backward(
    value: Tensor,
    shapes: list[tuple[int, int]],
    grids: Tensor,
    weights: Tensor,
    grad_out: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of :func:`attend`'s output, the samples computed again.

    Only the inputs are kept between the passes (as mmcv-full's CUDA kernel keeps
    them): a level's samples, d times the size of its attention weights, live
    during that level's step alone.

    Args:
        value: As :func:`attend`'s.
        shapes: As :func:`attend`'s.
        grids: As :func:`attend`'s.
        weights: As :func:`attend`'s.
        grad_out: (bs * nh, d, nq), the gradient of the forward's output.

    Returns:
        The gradients of value (bs, num_keys, nh, d), of the grids
        (bs, nq, nh, L, P, 2) and of the weights (bs, nq, nh, L, P).
    """
    bs, num_keys, num_heads, head_dims = value.shape
    num_queries, _, num_levels, num_points, _ = grids.shape[1:]
    flat_weights = weights.transpose(1, 2).flatten(0, 1).unsqueeze(1)
    grad_value = value.new_zeros((bs, num_keys, num_heads, head_dims))
    grad_grids = grids.new_zeros((bs * num_heads, num_queries, num_levels, num_points, 2))
    grad_weights = weights.new_zeros((bs * num_heads, num_queries, num_levels, num_points))
    grad_heads = grad_out.unsqueeze(-1)  # (bs * nh, d, nq, 1)
    for level, ((h, w), start) in enumerate(zip(shapes, _starts(shapes))):
        if h * w == 0:
            continue
        level_map, level_grid = _level_inputs(value, h, w, start, grids, level)
        samples = _sample(level_map, level_grid)
        grad_weights[:, :, level] = (samples * grad_heads).sum(1)
        del samples
        grad_map, grad_grid = torch.ops.aten.grid_sampler_2d_backward(
            grad_heads * flat_weights[..., level, :],
            level_map,
            level_grid,
            0,  # bilinear
            0,  # zeros
            False,
            [True, True],
        )
        grad_value[:, start : start + h * w] = grad_map.view(
            bs, num_heads, head_dims, h * w
        ).permute(0, 3, 1, 2)
        grad_grids[:, :, level] = grad_grid
    unflat = (bs, num_heads, num_queries)
    return (
        grad_value,
        grad_grids.unflatten(0, unflat[:2]).transpose(1, 2),
        grad_weights.unflatten(0, unflat[:2]).transpose(1, 2),
    )


class DeformAttnFunction(torch.autograd.Function):
    """Autograd around :func:`attend` / :func:`attend_backward`: saves the inputs alone."""

    @staticmethod
    def forward(ctx: Any, value: Tensor, shapes: Any, grids: Tensor, weights: Tensor) -> Tensor:
        ctx.shapes = shapes
        ctx.save_for_backward(value, grids, weights)
        return attend(value, shapes, grids, weights)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Optional[Tensor], ...]:
        value, grids, weights = ctx.saved_tensors
        grads = attend_backward(value, ctx.shapes, grids, weights, grad_out.contiguous())
        return grads[0], None, grads[1], grads[2]
