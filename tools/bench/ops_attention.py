"""Multi-scale deformable attention's rows of the ops section (``tools/bench/ops.py``).

:func:`rows` times ``multi_scale_deformable_attn_pytorch`` with the section's ``compare``
(alternating rounds, one thread, median of the per-round ratios) against the textbook
plain-torch attention, written out here: one ``F.grid_sample`` per level, the samples
times the weights summed over the points, autograd for the backward (which keeps every
level's samples for it). mmpar's backward samples again instead, keeping only the
inputs; the case column gives both sides' bytes kept for the backward (counted with
``torch.autograd.graph.saved_tensors_hooks``).

The shapes are BEVFormer-base's spatial cross-attention over one camera: 2,500 BEV
queries that fall in it, 8 heads of 32 channels, 4 levels of a 1600 x 928 image's
stride-8 to stride-64 maps, 8 points per level (``quick``: 250 queries).
"""

from __future__ import annotations

from typing import Callable, List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

#: ``(op, case, reference, ours_s, reference_s, ratio, target)``, as ``ops.py``'s rows.
Row = Tuple[str, str, str, float, float, float, str]
#: ``compare(ours, reference, rounds) -> (ours_s, reference_s, ratio)``
Compare = Callable[[Callable[[], object], Callable[[], object], int], tuple]

SHAPES = [(116, 200), (58, 100), (29, 50), (15, 25)]
HEADS, DIMS, POINTS = 8, 32, 8


def reference(value: Tensor, shapes: List[Tuple[int, int]], locs: Tensor, weights: Tensor):
    """The textbook attention: (bs, nq, heads * dims), autograd through every level."""
    bs, _, heads, dims = value.shape
    nq = locs.shape[1]
    maps = value.split([h * w for h, w in shapes], dim=1)
    out = 0
    for level, ((h, w), level_value) in enumerate(zip(shapes, maps)):
        level_map = level_value.permute(0, 2, 3, 1).reshape(bs * heads, dims, h, w)
        grid = (locs[:, :, :, level] * 2 - 1).transpose(1, 2).flatten(0, 1)
        samples = F.grid_sample(level_map, grid, align_corners=False)  # (bs*heads, d, nq, P)
        level_weights = weights[:, :, :, level].transpose(1, 2).flatten(0, 1).unsqueeze(1)
        out = out + (samples * level_weights).sum(-1)
    return out.view(bs, heads * dims, nq).transpose(1, 2)


def _kept_bytes(fn: Callable[[], Tensor]) -> int:
    """Bytes of the distinct storages autograd keeps for the backward of ``fn()``."""
    kept = {}

    def pack(t: Tensor) -> Tensor:
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(kept.values())


def rows(quick: bool, compare: Compare) -> List[Row]:
    """The forward and forward + backward rows of the attention."""
    from mmpar.compat.ops.multi_scale_deform_attn import multi_scale_deformable_attn_pytorch as ours

    gen = torch.Generator().manual_seed(0)
    queries = 250 if quick else 2500
    keys = sum(h * w for h, w in SHAPES)
    value = torch.randn(1, keys, HEADS, DIMS, generator=gen).requires_grad_()
    locs = torch.rand(1, queries, HEADS, len(SHAPES), POINTS, 2, generator=gen)
    weights = torch.rand(1, queries, HEADS, len(SHAPES), POINTS, generator=gen).softmax(-1)
    locs.requires_grad_(), weights.requires_grad_()
    shapes = torch.tensor(SHAPES)
    grad = torch.randn(1, queries, HEADS * DIMS, generator=gen)
    rounds = 2 if quick else 7
    case = f"{queries} queries, {len(SHAPES)} levels x {POINTS} points, {HEADS} x {DIMS}"
    kept = (
        _kept_bytes(lambda: ours(value, shapes, locs, weights)) / 2**20,
        _kept_bytes(lambda: reference(value, SHAPES, locs, weights)) / 2**20,
    )
    with torch.no_grad():
        forward = compare(
            lambda: ours(value, shapes, locs, weights),
            lambda: reference(value, SHAPES, locs, weights),
            rounds,
        )
    both = compare(
        lambda: ours(value, shapes, locs, weights).backward(grad),
        lambda: reference(value, SHAPES, locs, weights).backward(grad),
        rounds,
    )
    name = "multi_scale_deformable_attn"
    ref = "grid_sample per level, autograd"
    return [
        (name, f"forward, {case}", ref, *forward, "<= 1.2x"),
        (
            name,
            f"forward + backward, {case}; kept for the backward: "
            f"{kept[0]:.1f} MiB (reference {kept[1]:.1f} MiB)",
            ref,
            *both,
            "<= 1.5x",
        ),
    ]
