"""MultiScaleDeformableAttention given one level where it was built for more.

UniAD's panoptic head builds its ``MultiScaleDeformableAttention`` layers with
``num_levels=4`` and runs them over its single BEV map: ``spatial_shapes`` is (1, 2).
mmcv's kernel takes the level count from ``spatial_shapes`` and reads the first
elements of the (bs, nq, heads, 4, points, 2) locations and (bs, nq, heads, 4,
points) weights as if they were laid out for one level. The module does the same.
"""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.multi_scale_deform_attn import (
    MultiScaleDeformableAttention,
    multi_scale_deformable_attn_pytorch,
)

HEADS, LEVELS, POINTS, DIMS = 2, 4, 3, 8


def _layer() -> MultiScaleDeformableAttention:
    torch.manual_seed(0)
    attn = MultiScaleDeformableAttention(
        embed_dims=DIMS, num_heads=HEADS, num_levels=LEVELS, num_points=POINTS, dropout=0.0,
        batch_first=True,
    ).double()  # fmt: skip
    with torch.no_grad():
        for param in attn.parameters():  # away from the init, so every element matters
            param.add_(torch.randn_like(param) * 0.3)
    return attn


def _kernel_read(attn, query, value, refs, shape):
    """What mmcv's kernel computes: its buffers' first elements, laid out for one level."""
    bs, nq, _ = query.shape
    offsets = attn.sampling_offsets(query).view(bs, nq, HEADS, LEVELS, POINTS, 2)
    weights = attn.attention_weights(query).view(bs, nq, HEADS, LEVELS * POINTS).softmax(-1)
    w_h = torch.tensor([shape[1], shape[0]], dtype=torch.float64)
    locations = refs[:, :, None, :, None, :] + offsets / w_h
    flat_loc = locations.reshape(-1)[: bs * nq * HEADS * POINTS * 2]
    flat_w = weights.reshape(-1)[: bs * nq * HEADS * POINTS]
    v = attn.value_proj(value).view(bs, value.shape[1], HEADS, DIMS // HEADS)
    out = multi_scale_deformable_attn_pytorch(
        v,
        torch.tensor([shape]),
        flat_loc.view(bs, nq, HEADS, 1, POINTS, 2),
        flat_w.view(bs, nq, HEADS, 1, POINTS),
    )
    return attn.output_proj(out) + query


def test_one_level_reads_as_the_kernel_reads_it_and_trains():
    attn = _layer()
    gen = torch.Generator().manual_seed(1)
    shape = (5, 4)
    bs, nq = 2, 6
    query = torch.randn(bs, nq, DIMS, generator=gen, dtype=torch.float64)
    value = torch.randn(bs, shape[0] * shape[1], DIMS, generator=gen, dtype=torch.float64)
    refs = torch.rand(bs, nq, 1, 2, generator=gen, dtype=torch.float64)
    out = attn(
        query, value=value, reference_points=refs,
        spatial_shapes=torch.tensor([shape]), level_start_index=torch.tensor([0]),
    )  # fmt: skip
    torch.testing.assert_close(out, _kernel_read(attn, query, value, refs, shape))
    out.sum().backward()
    assert attn.sampling_offsets.weight.grad.abs().sum() > 0
    assert attn.value_proj.weight.grad.abs().sum() > 0


def test_two_of_four_levels_is_still_an_error():
    attn = _layer()
    query = torch.randn(1, 2, DIMS, dtype=torch.float64)
    value = torch.randn(1, 8, DIMS, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"spatial_shapes must be a \(num_levels, 2\) = \(4, 2\)"):
        attn(
            query, value=value, reference_points=torch.rand(1, 2, 2, 2, dtype=torch.float64),
            spatial_shapes=torch.tensor([[2, 2], [2, 2]]), level_start_index=torch.tensor([0, 4]),
        )  # fmt: skip
