"""mmpar.compat.ops.multi_scale_deform_attn against an explicit per-sample bilinear loop."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from mmpar.compat.ops.multi_scale_deform_attn import (
    MultiScaleDeformableAttention,
    MultiScaleDeformableAttnFunction,
    multi_scale_deformable_attn_pytorch,
)
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, bilinear_zero_padded

SHAPES = [(3, 4), (2, 5), (1, 1)]  # (h, w) per level: non-square, and a 1x1 level


def _bilinear(img: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """img (C, h, w) at normalised (x, y): pixel i's centre at (i + 0.5) / w, zeros outside."""
    _, h, w = img.shape
    return bilinear_zero_padded(img, y * h - 0.5, x * w - 0.5)


def _reference(value, shapes, locations, weights):
    """Explicit loop over every batch, query, head, level and point."""
    bs, _, heads, dims = value.shape
    _, queries, _, levels, points, _ = locations.shape
    starts = [0]
    for h, w in shapes:
        starts.append(starts[-1] + h * w)
    out = value.new_zeros(bs, queries, heads * dims)
    rows = []
    for b in range(bs):
        for q in range(queries):
            heads_out = []
            for k in range(heads):
                acc = value.new_zeros(dims)
                for lvl, (h, w) in enumerate(shapes):
                    # (h*w, dims) row-major -> (dims, h, w)
                    img = value[b, starts[lvl] : starts[lvl + 1], k].t().reshape(dims, h, w)
                    for p in range(points):
                        x, y = locations[b, q, k, lvl, p]
                        acc = acc + weights[b, q, k, lvl, p] * _bilinear(img, x, y)
                heads_out.append(acc)
            rows.append(torch.cat(heads_out))
    if rows:
        out = torch.stack(rows).view(bs, queries, heads * dims)
    return out


def _inputs(bs=2, queries=3, heads=2, dims=3, points=2, dtype=torch.float64, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    keys = sum(h * w for h, w in SHAPES)
    value = torch.randn(bs, keys, heads, dims, generator=gen, dtype=dtype)
    # Some samples fall outside [0, 1]: those read zeros (partly or wholly).
    locations = torch.rand(bs, queries, heads, len(SHAPES), points, 2, generator=gen, dtype=dtype)
    locations = locations * 1.4 - 0.2
    weights = torch.rand(bs, queries, heads, len(SHAPES), points, generator=gen, dtype=dtype)
    shapes = torch.tensor(SHAPES, dtype=torch.long)
    return [t.to(device) for t in (value, shapes, locations, weights)]


@pytest.mark.parametrize("device", DEVICES)
def test_forward_and_grads_match_the_loop(device):
    value, shapes, locations, weights = _inputs(device=device)
    ours_in = [t.clone().requires_grad_() for t in (value, locations, weights)]
    ref_in = [t.detach().cpu().clone().requires_grad_() for t in (value, locations, weights)]
    ours = multi_scale_deformable_attn_pytorch(ours_in[0], shapes, ours_in[1], ours_in[2])
    ref = _reference(ref_in[0], SHAPES, ref_in[1], ref_in[2])
    assert ours.shape == (2, 3, 6)
    torch.testing.assert_close(ours.cpu(), ref)
    grad = torch.randn_like(ref)
    ours.backward(grad.to(device))
    ref.backward(grad)
    for a, b in zip(ours_in, ref_in):
        torch.testing.assert_close(a.grad.cpu(), b.grad)


def test_gradcheck():
    value, shapes, locations, weights = _inputs(bs=1, queries=2, heads=2, dims=2, points=2)
    inputs = [t.requires_grad_() for t in (value, locations, weights)]
    assert torch.autograd.gradcheck(
        lambda v, loc, w: multi_scale_deformable_attn_pytorch(v, shapes, loc, w), inputs
    )


def test_sample_on_a_pixel_centre_reads_it():
    # One level 2x3, one head, one point at the centre of pixel (row 1, col 2).
    value = torch.arange(6.0).view(1, 6, 1, 1)
    loc = torch.tensor([(2 + 0.5) / 3, (1 + 0.5) / 2]).view(1, 1, 1, 1, 1, 2)
    out = multi_scale_deformable_attn_pytorch(
        value, torch.tensor([[2, 3]]), loc, torch.full((1, 1, 1, 1, 1), 2.0)
    )
    assert out.item() == pytest.approx(2 * 5.0)
    # Half a pixel past the right edge: half the edge pixel, half zero.
    loc[..., 0] = 1.0
    out = multi_scale_deformable_attn_pytorch(
        value, torch.tensor([[2, 3]]), loc, torch.ones(1, 1, 1, 1, 1)
    )
    assert out.item() == pytest.approx(0.5 * 5.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_dtypes_close_to_float32(device, dtype):
    value, shapes, locations, weights = _inputs(dtype=torch.float32, device=device)
    expected = multi_scale_deformable_attn_pytorch(value, shapes, locations, weights)
    half = [t.to(dtype) for t in (value, locations, weights)]
    out = multi_scale_deformable_attn_pytorch(half[0], shapes, half[1], half[2])
    assert out.dtype == dtype and out.device == value.device
    torch.testing.assert_close(out.float(), expected, atol=0.1, rtol=0.05)
    # amp-style mixed dtypes: float32 locations and weights with a half value.
    mixed = multi_scale_deformable_attn_pytorch(half[0], shapes, locations, weights)
    assert mixed.dtype == dtype
    torch.testing.assert_close(mixed.float(), expected, atol=0.1, rtol=0.05)


def test_empty_batch_and_queries():
    value, shapes, locations, weights = _inputs(queries=0)
    assert multi_scale_deformable_attn_pytorch(value, shapes, locations, weights).shape == (
        2,
        0,
        6,
    )
    value, shapes, locations, weights = _inputs(bs=0)
    assert multi_scale_deformable_attn_pytorch(value, shapes, locations, weights).shape == (
        0,
        3,
        6,
    )


def test_empty_level_contributes_nothing():
    value, _, locations, weights = _inputs()
    shapes = torch.tensor([*SHAPES, (0, 4)])
    locations = torch.cat([locations, locations[:, :, :, :1]], dim=3)
    weights = torch.cat([weights, weights[:, :, :, :1]], dim=3)
    out = multi_scale_deformable_attn_pytorch(value, shapes, locations, weights)
    torch.testing.assert_close(out, _reference(value, SHAPES, locations[:, :, :, :3], weights))


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda v, s, loc, w: (v[0], s, loc, w), "value must be"),
        (lambda v, s, loc, w: (v[:, :-1], s, loc, w), "num_keys"),
        (lambda v, s, loc, w: (v, s[:2], loc, w), "one row per level"),
        (lambda v, s, loc, w: (v, s, loc[..., :1], w), "sampling_locations must be"),
        (lambda v, s, loc, w: (v, s, loc, w[..., :1]), "attention_weights must be"),
        (lambda v, s, loc, w: (v, s, loc[:, :, :1], w[:, :, :1]), "num_heads"),
        (lambda v, s, loc, w: (v, s[:, :1], loc, w), r"\(h, w\)"),
    ],
)
def test_bad_shapes_raise(change, match):
    with pytest.raises(ValueError, match=match):
        multi_scale_deformable_attn_pytorch(*change(*_inputs()))


def test_function_apply_is_the_pytorch_path():
    value, shapes, locations, weights = _inputs()
    start = torch.tensor([0, 12, 22])
    out = MultiScaleDeformableAttnFunction.apply(value, shapes, start, locations, weights, 64)
    torch.testing.assert_close(
        out, multi_scale_deformable_attn_pytorch(value, shapes, locations, weights)
    )


# The module.


def test_init_weights_direction_grid():
    attn = MultiScaleDeformableAttention(embed_dims=16, num_heads=8, num_levels=2, num_points=3)
    bias = attn.sampling_offsets.bias.view(8, 2, 3, 2)
    # Head k points at angle 2*pi*k/8, scaled so the larger coordinate is +-1.
    directions = torch.tensor(
        [[1, 0], [1, 1], [0, 1], [-1, 1], [-1, 0], [-1, -1], [0, -1], [1, -1]], dtype=torch.float
    )
    for p in range(3):
        for lvl in range(2):
            torch.testing.assert_close(bias[:, lvl, p], directions * (p + 1), atol=1e-5, rtol=0)
    assert attn.sampling_offsets.weight.abs().sum() == 0
    assert attn.attention_weights.weight.abs().sum() == 0
    assert attn.attention_weights.bias.abs().sum() == 0
    for proj in (attn.value_proj, attn.output_proj):
        assert proj.bias.abs().sum() == 0
        bound = math.sqrt(6 / (16 + 16))  # xavier uniform
        assert 0 < proj.weight.abs().max() <= bound
    assert attn._is_init and attn.init_cfg is None


def test_state_dict_names_are_mmcv():
    attn = MultiScaleDeformableAttention(embed_dims=8, num_heads=2, num_levels=1, num_points=1)
    assert sorted(attn.state_dict()) == sorted(
        f"{m}.{p}"
        for m in ("sampling_offsets", "attention_weights", "value_proj", "output_proj")
        for p in ("weight", "bias")
    )
    assert isinstance(attn.dropout, nn.Dropout) and attn.dropout.p == 0.1
    assert (attn.im2col_step, attn.batch_first, attn.norm_cfg) == (64, False, None)


def test_embed_dims_not_divisible_raises():
    with pytest.raises(ValueError, match="embed_dims=10, num_heads=4"):
        MultiScaleDeformableAttention(embed_dims=10, num_heads=4)


def _module(seed=0, **kwargs):
    torch.manual_seed(seed)
    cfg = dict(embed_dims=8, num_heads=2, num_levels=3, num_points=2, dropout=0.0)
    cfg.update(kwargs)
    attn = MultiScaleDeformableAttention(**cfg).double().eval()
    with torch.no_grad():
        for param in attn.parameters():  # away from the init, so every term matters
            param.add_(torch.randn_like(param) * 0.3)
    return attn


def _expected(attn, query, value, refs, identity, mask=None):
    """The module's definition, batch first, with the explicit loop for the sampling."""
    bs, nq, _ = query.shape
    heads, levels, points = attn.num_heads, attn.num_levels, attn.num_points
    v = attn.value_proj(value)
    if mask is not None:
        v = v * (~mask)[..., None]
    v = v.view(bs, value.shape[1], heads, -1)
    offsets = attn.sampling_offsets(query).view(bs, nq, heads, levels, points, 2)
    weights = attn.attention_weights(query).view(bs, nq, heads, levels * points).softmax(-1)
    weights = weights.view(bs, nq, heads, levels, points)
    loc = torch.empty_like(offsets)
    for lvl, (h, w) in enumerate(SHAPES):
        for axis, size in ((0, w), (1, h)):
            r = refs[:, :, None, lvl, None, axis]
            if refs.shape[-1] == 2:
                loc[:, :, :, lvl, :, axis] = r + offsets[:, :, :, lvl, :, axis] / size
            else:
                extent = refs[:, :, None, lvl, None, 2 + axis]
                step = offsets[:, :, :, lvl, :, axis] / points * extent * 0.5
                loc[:, :, :, lvl, :, axis] = r + step
    out = _reference(v, SHAPES, loc, weights)
    return attn.output_proj(out) + identity


@pytest.mark.parametrize("ref_dims", [2, 4])
@pytest.mark.parametrize("batch_first", [False, True])
def test_module_forward_matches_definition(ref_dims, batch_first):
    attn = _module(batch_first=batch_first)
    gen = torch.Generator().manual_seed(1)
    bs, nq, keys = 2, 3, sum(h * w for h, w in SHAPES)
    query = torch.randn(bs, nq, 8, generator=gen, dtype=torch.float64)
    value = torch.randn(bs, keys, 8, generator=gen, dtype=torch.float64)
    pos = torch.randn(bs, nq, 8, generator=gen, dtype=torch.float64)
    identity = torch.randn(bs, nq, 8, generator=gen, dtype=torch.float64)
    refs = torch.rand(bs, nq, 3, ref_dims, generator=gen, dtype=torch.float64)
    mask = torch.rand(bs, keys, generator=gen) < 0.3
    shapes = torch.tensor(SHAPES)
    start = torch.tensor([0, 12, 22])

    def lay(t):
        return t if batch_first else t.transpose(0, 1)

    out = attn(
        lay(query),
        value=lay(value),
        identity=lay(identity),
        query_pos=lay(pos),
        key_padding_mask=mask,
        reference_points=refs,
        spatial_shapes=shapes,
        level_start_index=start,
        unused_extra_key=1,
    )
    expected = _expected(attn, query + pos, value, refs, identity, mask)
    torch.testing.assert_close(out, lay(expected))


def test_module_defaults_value_and_identity_to_query():
    attn = _module(num_levels=1)
    query = torch.rand(4, 1, 8, dtype=torch.float64)  # (nq = 2 * 2 keys, bs, dims)
    refs = torch.rand(1, 4, 1, 2, dtype=torch.float64)
    out = attn(query, reference_points=refs, spatial_shapes=torch.tensor([[2, 2]]))
    q = query.transpose(0, 1)
    v = attn.value_proj(q).view(1, 4, 2, 4)
    offsets = attn.sampling_offsets(q).view(1, 4, 2, 1, 2, 2)
    weights = attn.attention_weights(q).view(1, 4, 2, 2).softmax(-1).view(1, 4, 2, 1, 2)
    loc = refs[:, :, None, :, None, :] + offsets / 2
    expected = attn.output_proj(_reference(v, [(2, 2)], loc, weights)) + q
    torch.testing.assert_close(out, expected.transpose(0, 1))


def test_module_residual_is_identity_deprecated():
    attn = _module(num_levels=1)
    query = torch.rand(4, 1, 8, dtype=torch.float64)
    kwargs = dict(reference_points=torch.rand(1, 4, 1, 2, dtype=torch.float64))
    kwargs["spatial_shapes"] = torch.tensor([[2, 2]])
    identity = torch.rand_like(query)
    expected = attn(query, identity=identity, **kwargs)
    with pytest.warns(DeprecationWarning, match="residual"):
        torch.testing.assert_close(attn(query, residual=identity, **kwargs), expected)
    with pytest.raises(ValueError, match="identity"):
        attn(query, identity=identity, residual=identity, **kwargs)


def test_module_bad_reference_points():
    attn = _module(num_levels=1)
    query = torch.rand(4, 1, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="reference_points' last dim must be 2 .* or 4.*found 3"):
        attn(
            query,
            reference_points=torch.rand(1, 4, 1, 3, dtype=torch.float64),
            spatial_shapes=torch.tensor([[2, 2]]),
        )
    with pytest.raises(ValueError, match="reference_points"):
        attn(query, spatial_shapes=torch.tensor([[2, 2]]))


@pytest.mark.parametrize("device", DEVICES)
def test_module_backward_reaches_every_parameter(device):
    attn = MultiScaleDeformableAttention(embed_dims=8, num_heads=2, num_levels=3, num_points=2)
    attn = attn.to(device)
    query = torch.rand(3, 2, 8, device=device, requires_grad=True)
    value = torch.rand(sum(h * w for h, w in SHAPES), 2, 8, device=device)
    out = attn(
        query,
        value=value,
        reference_points=torch.rand(2, 3, 3, 2, device=device),
        spatial_shapes=torch.tensor(SHAPES, device=device),
    )
    assert out.shape == (3, 2, 8) and out.device == query.device
    out.square().sum().backward()
    assert query.grad is not None
    for name, param in attn.named_parameters():
        assert param.grad is not None, name


def test_levels_not_adding_up_is_an_assertion_error_too():
    # mmcv asserts sum(h * w) == num_keys: the error is an AssertionError too.
    value, shapes, locations, weights = _inputs()
    with pytest.raises(AssertionError, match="must add up to value's num_keys"):
        multi_scale_deformable_attn_pytorch(value[:, 1:], shapes, locations, weights)
    with pytest.raises(ValueError, match=r"rows of \(h, w\) >= 0"):
        multi_scale_deformable_attn_pytorch(value, -shapes, locations, weights)


def test_function_bad_dtypes_and_batch():
    value, shapes, locations, weights = _inputs()
    with pytest.raises(TypeError, match="sampling_locations must be a floating-point"):
        multi_scale_deformable_attn_pytorch(value, shapes, locations.long(), weights)
    with pytest.raises(TypeError, match="attention_weights must be a floating-point"):
        multi_scale_deformable_attn_pytorch(value, shapes, locations, weights.bool())
    with pytest.raises(ValueError, match="sampling_locations' .bs, num_heads. must be value's"):
        multi_scale_deformable_attn_pytorch(value, shapes, locations[:1], weights[:1])


@pytest.mark.parametrize("device", DEVICES)
def test_non_finite_locations_read_zero_as_mmcv_kernel(device):
    value, shapes, locations, weights = _inputs(device=device)
    bad = locations.clone()
    bad[0, 1, 0, 2, 1, 0] = float("nan")
    bad[1, 2, 1, 0, 0, 1] = float("inf")
    bad[1, 0, 0, 1, 1, 0] = -float("inf")
    far = locations.clone()
    far[0, 1, 0, 2, 1, 0], far[1, 2, 1, 0, 0, 1], far[1, 0, 0, 1, 1, 0] = 9.0, 9.0, -9.0
    bad.requires_grad_()
    out = multi_scale_deformable_attn_pytorch(value, shapes, bad, weights)
    torch.testing.assert_close(
        out, multi_scale_deformable_attn_pytorch(value, shapes, far, weights)
    )
    out.sum().backward()
    assert torch.isfinite(bad.grad).all() and bad.grad[0, 1, 0, 2, 1, 0] == 0


def test_empty_forward_and_backward():
    for kwargs in ({"bs": 0}, {"queries": 0}):
        value, shapes, locations, weights = _inputs(**kwargs)
        value.requires_grad_(), locations.requires_grad_(), weights.requires_grad_()
        multi_scale_deformable_attn_pytorch(value, shapes, locations, weights).sum().backward()
        assert value.grad.shape == value.shape and locations.grad.shape == locations.shape
    attn = _module(num_levels=1)
    query = torch.zeros(0, 2, 8, dtype=torch.float64, requires_grad=True)  # no queries
    value = torch.rand(4, 2, 8, dtype=torch.float64)
    out = attn(
        query,
        value=value,
        reference_points=torch.rand(2, 0, 1, 2, dtype=torch.float64),
        spatial_shapes=torch.tensor([[2, 2]]),
    )
    assert out.shape == (0, 2, 8)
    out.sum().backward()
    assert query.grad.shape == query.shape


def _call(attn, query, value, **kwargs):
    kwargs.setdefault("reference_points", torch.rand(2, 4, 1, 2, dtype=torch.float64))
    kwargs.setdefault("spatial_shapes", torch.tensor([[2, 2]]))
    return attn(query, value=value, **kwargs)


def test_module_bad_inputs_name_the_parameter():
    attn = _module(num_levels=1)
    query = torch.rand(4, 2, 8, dtype=torch.float64)  # (num_queries, bs, embed_dims)
    value = torch.rand(4, 2, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"value's batch size must be query's \(2\), found 3"):
        _call(attn, query, torch.rand(4, 3, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="value must be .* with embed_dims=8"):
        _call(attn, query, value[..., :6])
    with pytest.raises(ValueError, match="query must be .* with embed_dims=8"):
        _call(attn, query[0], value)
    with pytest.raises(TypeError, match="query must be a floating-point"):
        _call(attn, query.long(), value)
    with pytest.raises(ValueError, match="identity must have query's shape"):
        _call(attn, query, value, identity=query[:, :1])
    with pytest.raises(ValueError, match="query_pos must have query's shape"):
        _call(attn, query, value, query_pos=query[:1])
    with pytest.raises(ValueError, match=r"key_padding_mask must be a bool \(bs, num_keys\)"):
        _call(attn, query, value, key_padding_mask=torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_padding_mask must be a bool"):
        _call(attn, query, value, key_padding_mask=torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"reference_points must be \(bs, num_queries, num_lev"):
        _call(attn, query, value, reference_points=torch.rand(3, 4, 1, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"spatial_shapes must be a \(num_levels, 2\) = \(1, 2\)"):
        _call(attn, query, value, spatial_shapes=torch.tensor([[2, 2], [0, 0]]))
    with pytest.raises(AssertionError, match="must add up to value's num_keys"):
        _call(attn, query, value, spatial_shapes=torch.tensor([[2, 3]]))


def test_module_sizes_must_be_positive_ints():
    for name in ("embed_dims", "num_heads", "num_levels", "num_points"):
        with pytest.raises(ValueError, match=f"{name} must be an int >= 1"):
            MultiScaleDeformableAttention(**{name: 0})
    with pytest.raises(TypeError, match="num_points must be an int"):
        MultiScaleDeformableAttention(num_points=2.0)


def test_module_bad_dtypes_types_and_devices():
    attn = _module(num_levels=1)  # float64 weights
    query = torch.rand(4, 1, 8, dtype=torch.float64)
    kwargs = dict(reference_points=torch.rand(1, 4, 1, 2), spatial_shapes=torch.tensor([[2, 2]]))
    with pytest.raises(TypeError, match="query must have the layer's dtype torch.float64"):
        attn(query.float(), **kwargs)
    with pytest.raises(TypeError, match="query_pos must have the layer's dtype torch.float64"):
        attn(query, query_pos=query.half(), **kwargs)
    with pytest.raises(TypeError, match="spatial_shapes must be an integer .* found torch.float32"):
        attn(query, reference_points=kwargs["reference_points"], spatial_shapes=torch.ones(1, 2))
    with pytest.raises(TypeError, match="reference_points must be a tensor, found list"):
        attn(query, reference_points=[[[[0.5, 0.5]]]] * 4, spatial_shapes=torch.tensor([[2, 2]]))
    with pytest.raises(TypeError, match="identity must be a tensor or None, found list"):
        attn(query, identity=[0.0], **kwargs)
    with pytest.raises(ValueError, match="spatial_shapes must be on the layer's device cpu"):
        attn(query, reference_points=kwargs["reference_points"],
             spatial_shapes=torch.tensor([[2, 2]], device="meta"))  # fmt: skip


def test_module_dropout_must_be_a_probability() -> None:
    for dropout in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\]"):
            MultiScaleDeformableAttention(32, 4, 1, 2, dropout=dropout)
    for dropout in ("0.1", None, True):
        with pytest.raises(TypeError, match=r"dropout must be a probability in \[0, 1\], found"):
            MultiScaleDeformableAttention(32, 4, 1, 2, dropout=dropout)
    assert MultiScaleDeformableAttention(32, 4, 1, 2, dropout=0).dropout.p == 0.0


def test_function_spatial_shapes_must_be_integers():
    # int(2.5) would read a level of 2 rows where the caller meant another size.
    value = torch.arange(6.0).view(1, 6, 1, 1)
    loc, weights = torch.full((1, 1, 1, 1, 1, 2), 0.5), torch.ones(1, 1, 1, 1, 1)
    for shapes in (torch.tensor([[2.0, 3.0]]), torch.tensor([[True, True]])):
        with pytest.raises(TypeError, match="value_spatial_shapes must be an integer tensor"):
            multi_scale_deformable_attn_pytorch(value, shapes, loc, weights)
    with pytest.raises(TypeError, match=r"value_spatial_shapes must be integers, found \[\[2.5"):
        multi_scale_deformable_attn_pytorch(value, [[2.5, 2.4]], loc, weights)
    ints = multi_scale_deformable_attn_pytorch(value, torch.tensor([[2, 3]]), loc, weights)
    assert torch.equal(multi_scale_deformable_attn_pytorch(value, [[2.0, 3.0]], loc, weights), ints)
