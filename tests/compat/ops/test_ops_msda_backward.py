"""Multi-scale deformable attention's backward: what it keeps, and its gradient function.

mmcv-full's CUDA kernel keeps only the attention's inputs between the passes; mmpar's
backward samples again rather than holding every sample (``dims_per_head`` times the
attention weights' size) from the forward. :func:`multi_scale_deformable_attn_grads` is
that backward without autograd, checked against autograd through the per-sample loop of
``test_ops_multi_scale_deform_attn.py``.
"""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.multi_scale_deform_attn import multi_scale_deformable_attn_pytorch
from mmpar.compat.ops.sampling.deform_attn_sampling import multi_scale_deformable_attn_grads
from tests.compat.ops._reference import DEVICES
from tests.compat.ops.test_ops_multi_scale_deform_attn import SHAPES, _inputs, _reference


def _saved_bytes(fn, *args) -> int:
    """Bytes of the distinct storages autograd keeps for the backward while ``fn`` runs."""
    storages = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return sum(storages.values())


def test_backward_keeps_the_inputs_not_the_samples() -> None:
    dims, queries, points = 64, 200, 4
    value, shapes, locations, weights = _inputs(
        bs=1, queries=queries, heads=2, dims=dims, points=points, dtype=torch.float32
    )
    inputs = [t.requires_grad_() for t in (value, locations, weights)]
    saved = _saved_bytes(multi_scale_deformable_attn_pytorch, inputs[0], shapes, *inputs[1:])
    # One level's samples alone: (bs * heads, dims, queries, points) float32.
    one_level_samples = 2 * dims * queries * points * 4
    input_bytes = sum(t.numel() * t.element_size() for t in inputs)
    assert saved <= 2 * input_bytes < one_level_samples


@pytest.mark.parametrize("device", DEVICES)
def test_grads_match_autograd_through_the_loop(device: str) -> None:
    value, shapes, locations, weights = _inputs(device=device, seed=4)
    locations[0, 1, 1, 2, 0, 1] = float("nan")  # reads 0, gets no gradient
    grad_out = torch.randn(2, 3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    ref_in = [t.detach().cpu().clone().requires_grad_() for t in (value, locations, weights)]
    ref_locations = torch.where(ref_in[1].isfinite(), ref_in[1], 9.0)
    _reference(ref_in[0], SHAPES, ref_locations, ref_in[2]).backward(grad_out)
    grads = multi_scale_deformable_attn_grads(
        value, shapes, locations, weights, grad_out.to(device)
    )
    for ours, ref, like in zip(grads, ref_in, (value, locations, weights)):
        assert ours.shape == like.shape and ours.dtype == like.dtype and ours.device == like.device
        torch.testing.assert_close(ours.cpu(), ref.grad)
    assert grads[1][0, 1, 1, 2, 0, 1] == 0


def test_grads_in_the_inputs_dtypes_from_mixed_precision() -> None:
    value, shapes, locations, weights = _inputs(dtype=torch.float32, seed=6)
    grads = multi_scale_deformable_attn_grads(
        value.bfloat16(), shapes, locations, weights, torch.ones(2, 3, 6)
    )
    assert [g.dtype for g in grads] == [torch.bfloat16, torch.float32, torch.float32]
    expected = multi_scale_deformable_attn_grads(
        value.bfloat16().float(), shapes, locations, weights, torch.ones(2, 3, 6)
    )
    torch.testing.assert_close(grads[1], expected[1])


@pytest.mark.parametrize("grad_output", [torch.ones(2, 3, 5), torch.ones(2, 18)])
def test_grads_reject_a_grad_output_of_another_shape(grad_output) -> None:
    value, shapes, locations, weights = _inputs()
    with pytest.raises(ValueError, match=r"grad_output must be the output's shape \(2, 3, 6\)"):
        multi_scale_deformable_attn_grads(value, shapes, locations, weights, grad_output)
    with pytest.raises(TypeError, match="grad_output must be a tensor, found list"):
        multi_scale_deformable_attn_grads(value, shapes, locations, weights, [[1.0]])


def test_gradcheck_through_the_backward_it_owns() -> None:
    value, shapes, locations, weights = _inputs(bs=1, queries=2, heads=2, dims=2, seed=7)
    locations = (locations * 16).round() / 16 + 1 / 64  # away from pixel centres
    inputs = [t.requires_grad_() for t in (value, locations, weights)]
    assert torch.autograd.gradcheck(
        lambda v, loc, w: multi_scale_deformable_attn_pytorch(v, shapes, loc, w), inputs
    )
