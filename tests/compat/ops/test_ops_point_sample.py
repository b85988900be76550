"""mmpar's ``mmcv.ops.point_sample`` against explicit bilinear grid math, one point at a time."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mmpar.compat.ops.point_sample import (
    SimpleRoIAlign,
    abs_img_point_to_rel_img_point,
    bilinear_grid_sample,
    denormalize,
    generate_grid,
    get_shape_from_feature_map,
    normalize,
    point_sample,
    rel_roi_point_to_abs_img_point,
    rel_roi_point_to_rel_img_point,
)
from tests.compat.ops._reference import DEVICES, HALF_DTYPES, bilinear_zero_padded


def _read(fmap: torch.Tensor, gx: float, gy: float, align_corners: bool) -> torch.Tensor:
    """Bilinear read of ``(C, H, W)`` at grid point ``(gx, gy)`` in [-1, 1]; zeros outside."""
    _, h, w = fmap.shape
    if align_corners:
        px, py = (gx + 1) / 2 * (w - 1), (gy + 1) / 2 * (h - 1)
    else:
        px, py = ((gx + 1) * w - 1) / 2, ((gy + 1) * h - 1) / 2
    return bilinear_zero_padded(fmap.double(), py, px)


def _reference_grid_sample(im, grid, align_corners):
    """``(N, C, Hg, Wg)``: every grid point read on its own."""
    im, grid = im.double().cpu(), grid.double().cpu()
    n, hg, wg, _ = grid.shape
    out = torch.zeros(n, im.shape[1], hg, wg, dtype=torch.float64)
    for b in range(n):
        for i in range(hg):
            for j in range(wg):
                gx, gy = grid[b, i, j].tolist()
                out[b, :, i, j] = _read(im[b], gx, gy, align_corners)
    return out


def _grid(n, hg, wg, seed=0, corners=True):
    """Points in [-1.4, 1.4]: inside, near the edges, and more than a pixel outside; and
    two on the map's corners (where the read is not differentiable: not for gradcheck)."""
    gen = torch.Generator().manual_seed(seed)
    grid = torch.rand(n, hg, wg, 2, generator=gen, dtype=torch.float64) * 2.8 - 1.4
    if corners:
        grid[0, 0, 0] = torch.tensor([-1.0, 1.0])
        grid[0, 0, 1] = torch.tensor([1.0, -1.0])
    return grid


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("align_corners", [True, False])
def test_bilinear_grid_sample(device, align_corners):
    gen = torch.Generator().manual_seed(1)
    im = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64).to(device)
    grid = _grid(2, 3, 4).to(device)
    out = bilinear_grid_sample(im, grid, align_corners=align_corners)
    assert out.shape == (2, 3, 3, 4)
    torch.testing.assert_close(out.cpu(), _reference_grid_sample(im, grid, align_corners))
    # It is grid_sample's bilinear, zero-padded mode.
    expected = F.grid_sample(im, grid, align_corners=align_corners)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("align_corners", [True, False])
def test_bilinear_grid_sample_gradcheck(align_corners):
    gen = torch.Generator().manual_seed(2)
    im = torch.randn(1, 2, 3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    grid = _grid(1, 2, 3, seed=3, corners=False).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, g: bilinear_grid_sample(a, g, align_corners), (im, grid)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("grid_dims", [3, 4])
def test_point_sample(device, align_corners, grid_dims):
    gen = torch.Generator().manual_seed(4)
    im = torch.randn(2, 3, 5, 4, generator=gen, dtype=torch.float64).to(device)
    points = normalize(_grid(2, 2, 3, seed=5)).to(device)  # [0, 1] coordinates
    if grid_dims == 3:
        points = points.reshape(2, 6, 2)
    out = point_sample(im, points, align_corners=align_corners)
    expected = _reference_grid_sample(im, denormalize(points.reshape(2, -1, 1, 2)), align_corners)
    assert out.shape == ((2, 3, 6) if grid_dims == 3 else (2, 3, 2, 3))
    torch.testing.assert_close(out.cpu(), expected.reshape(out.shape))


def test_point_sample_gradcheck_and_kwargs():
    gen = torch.Generator().manual_seed(6)
    im = torch.randn(1, 2, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    points = normalize(_grid(1, 5, 1, seed=7, corners=False)).reshape(1, 5, 2).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, p: point_sample(a, p), (im, points))
    nearest = point_sample(im, points, mode="nearest", padding_mode="border")
    expected = F.grid_sample(
        im,
        denormalize(points)[:, :, None],
        mode="nearest",
        padding_mode="border",
        align_corners=False,
    )
    torch.testing.assert_close(nearest, expected[..., 0])


def test_point_sample_bad_inputs_name_the_parameter():
    im, points = torch.zeros(2, 3, 4, 4), torch.rand(3, 5, 2)
    with pytest.raises(
        ValueError, match="points must have input's batch size 2 .* found .3, 5, 2."
    ):
        point_sample(im, points)
    with pytest.raises(ValueError, match=r"input must be \(N, C, H, W\)"):
        point_sample(im[0], points[:2])
    with pytest.raises(ValueError, match="points must have 3 or 4 dims ending in 2"):
        point_sample(im, points[:2, :, :1])
    with pytest.raises(TypeError, match="points must be a floating-point tensor"):
        point_sample(im, points[:2].long())


def test_point_sample_integer_input_is_refused():
    """An integer or bool map is a TypeError (it was promoted and read as float)."""
    points = torch.rand(2, 5, 2)
    for dtype in (torch.long, torch.bool):
        with pytest.raises(TypeError, match="point_sample: input must be floating point"):
            point_sample(torch.zeros(2, 3, 4, 4, dtype=dtype), points)


@pytest.mark.parametrize(
    ("im_shape", "points_shape", "out_shape"),
    [
        ((0, 3, 4, 4), (0, 5, 2), (0, 3, 5)),
        ((2, 3, 4, 4), (2, 0, 2), (2, 3, 0)),
        ((2, 3, 0, 4), (2, 5, 2), (2, 3, 5)),  # a map without rows reads 0
        ((2, 3, 4, 0), (2, 2, 3, 2), (2, 3, 2, 3)),
    ],
)
def test_point_sample_empty_forward_and_backward(im_shape, points_shape, out_shape):
    im = torch.randn(im_shape, requires_grad=True)
    points = torch.rand(points_shape, requires_grad=True)
    out = point_sample(im, points)
    assert out.shape == out_shape
    assert not out.any() or 0 not in im_shape[2:]
    out.sum().backward()
    assert im.grad.shape == im.shape


def test_point_sample_nan_point_reads_nan_as_grid_sample():
    im = torch.ones(1, 2, 3, 3)
    points = torch.tensor([[[0.5, 0.5], [float("nan"), 0.5]]])
    out = point_sample(im, points)
    assert torch.equal(out[..., 0], torch.ones(1, 2)) and out[..., 1].isnan().all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_point_sample_half_types(device, dtype):
    gen = torch.Generator().manual_seed(8)
    im = torch.randn(2, 3, 5, 4, generator=gen).to(device)
    points = torch.rand(2, 7, 2, generator=gen).to(device)
    out = point_sample(im.to(dtype), points.to(dtype))
    assert out.dtype == dtype
    expected = point_sample(im.to(dtype).float(), points.to(dtype).float())
    torch.testing.assert_close(out.float(), expected, atol=3e-2, rtol=3e-2)
    # Mixed dtypes are promoted (grid_sample alone would refuse them).
    assert point_sample(im.to(dtype), points).dtype == torch.float32


def test_normalize_and_generate_grid():
    grid = torch.tensor([-1.0, 0.0, 0.5, 1.0])
    torch.testing.assert_close(normalize(grid), torch.tensor([0.0, 0.5, 0.75, 1.0]))
    torch.testing.assert_close(denormalize(normalize(grid)), grid)
    points = generate_grid(3, (2, 4), device=torch.device("cpu"))
    assert points.shape == (3, 8, 2) and points.dtype == torch.float32
    xs = torch.tensor([0.125, 0.375, 0.625, 0.875])
    expected = torch.stack([xs.repeat(2), torch.tensor([0.25, 0.75]).repeat_interleave(4)], 1)
    torch.testing.assert_close(points[2], expected)
    # The same points as mmcv's identity affine grid, mapped to [0, 1].
    theta = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    affine = normalize(F.affine_grid(theta, [1, 1, 2, 4], align_corners=False))
    torch.testing.assert_close(points[0], affine.view(-1, 2))


def test_point_conversions():
    rois = torch.tensor([[0, 2.0, 4.0, 12.0, 8.0], [1, 0.0, 0.0, 4.0, 2.0]], requires_grad=True)
    rel = torch.tensor([[[0.0, 0.0], [0.5, 0.25], [1.0, 1.0]], [[0.25, 0.5]] * 3])
    absolute = rel_roi_point_to_abs_img_point(rois, rel)
    expected = torch.tensor(
        [[[2.0, 4.0], [7.0, 5.0], [12.0, 8.0]], [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]]
    )
    torch.testing.assert_close(absolute, expected)
    assert not absolute.requires_grad
    torch.testing.assert_close(rel_roi_point_to_abs_img_point(rois[:, 1:], rel), expected)

    feat = torch.zeros(2, 1, 4, 16)  # (H, W) = (4, 16)
    scale = get_shape_from_feature_map(feat)
    assert scale.tolist() == [[[16.0, 4.0]]] and scale.dtype == torch.float32
    by_size = abs_img_point_to_rel_img_point(expected, feat.shape[2:], 0.5)
    torch.testing.assert_close(by_size, expected / torch.tensor([16.0, 4.0]) * 0.5)
    torch.testing.assert_close(abs_img_point_to_rel_img_point(expected, (4, 16), 0.5), by_size)
    torch.testing.assert_close(abs_img_point_to_rel_img_point(expected, feat, 0.5), by_size)
    torch.testing.assert_close(rel_roi_point_to_rel_img_point(rois, rel, feat, 0.5), by_size)
    with pytest.raises(TypeError, match="img"):
        abs_img_point_to_rel_img_point(expected, 4)
    with pytest.raises(ValueError, match="one row per roi"):
        rel_roi_point_to_abs_img_point(rois, rel[:1])


def _reference_simple_roi_align(feats, rois, out_size, scale, aligned):
    """Each bin: the bilinear read at its centre, in the map's [-1, 1] grid coordinates."""
    feats, rois = feats.double().cpu(), rois.double().cpu()
    h, w = feats.shape[2:]
    out = torch.zeros(rois.shape[0], feats.shape[1], *out_size, dtype=torch.float64)
    for k, (b, x1, y1, x2, y2) in enumerate(rois.tolist()):
        for i in range(out_size[0]):
            for j in range(out_size[1]):
                x = x1 + (j + 0.5) / out_size[1] * (x2 - x1)
                y = y1 + (i + 0.5) / out_size[0] * (y2 - y1)
                gx, gy = x * scale / w * 2 - 1, y * scale / h * 2 - 1
                out[k, :, i, j] = _read(feats[int(b)], gx, gy, align_corners=not aligned)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aligned", [True, False])
def test_simple_roi_align(device, aligned):
    gen = torch.Generator().manual_seed(9)
    feats = torch.randn(3, 2, 6, 5, generator=gen, dtype=torch.float64).to(device)
    feats.requires_grad_()
    # Images out of order, one image without rois, a roi partly outside the map.
    rois = torch.tensor(
        [[2, 1.0, 2.0, 7.0, 9.0], [0, 0.0, 0.0, 9.0, 11.0], [2, -3.0, 4.0, 5.0, 14.0]],
        dtype=torch.float64,
        device=device,
    )
    layer = SimpleRoIAlign((2, 3), spatial_scale=0.5, aligned=aligned)
    out = layer(feats, rois)
    assert out.shape == (3, 2, 2, 3)
    expected = _reference_simple_roi_align(feats.detach(), rois, (2, 3), 0.5, aligned)
    # The bin centres are float32 (generate_grid, as mmcv's): float32-sized errors.
    torch.testing.assert_close(out.detach().cpu(), expected, atol=2e-6, rtol=2e-6)
    out.sum().backward()
    assert feats.grad[1].abs().sum() == 0 and feats.grad[0].abs().sum() > 0
    empty = layer(feats, rois[:0])
    assert empty.shape == (0, 2, 2, 3)


def test_simple_roi_align_module():
    layer = SimpleRoIAlign(7, 0.25)
    assert layer.output_size == (7, 7) and layer.use_torchvision is False and layer.aligned
    assert repr(layer) == "SimpleRoIAlign(output_size=(7, 7), spatial_scale=0.25"
    feats = torch.randn(1, 2, 4, 4)
    with pytest.raises(ValueError, match="batch indices"):
        layer(feats, torch.tensor([[1, 0.0, 0.0, 2.0, 2.0]]))
    with pytest.raises(ValueError, match="batch indices"):
        layer(feats, torch.tensor([[0, 0.0, 0.0, 2.0, 2.0], [3, 0.0, 0.0, 2.0, 2.0]]))


def test_simple_roi_align_bad_input():
    feats = torch.randn(2, 2, 4, 4)
    layer = SimpleRoIAlign(2, 0.5)
    # (K, 4) boxes have no batch index: mmcv reads x1 as one and pools another image.
    with pytest.raises(ValueError, match=r"rois must have shape \(K, 5\)"):
        layer(feats, torch.tensor([[1.0, 0.0, 2.0, 2.0]]))
    with pytest.raises(ValueError, match="finite"):
        layer(feats, torch.tensor([[0, 0.0, float("nan"), 2.0, 2.0]]))
    with pytest.raises(TypeError, match="input must be a floating-point"):
        layer(feats.long(), torch.tensor([[0, 0.0, 0.0, 2.0, 2.0]]))
    for scale in (0, -0.5, float("inf")):
        with pytest.raises(ValueError, match="spatial_scale"):
            SimpleRoIAlign(2, scale)
    with pytest.raises(TypeError, match="output_size"):
        SimpleRoIAlign("7", 0.5)
    with pytest.raises(ValueError, match="output_size"):
        SimpleRoIAlign((0, 2), 0.5)


def test_simple_roi_align_no_rois_backward():
    feats = torch.randn(2, 3, 4, 4, requires_grad=True)
    out = SimpleRoIAlign((2, 3), 0.5)(feats, torch.zeros(0, 5))
    assert out.shape == (0, 3, 2, 3)
    out.sum().backward()
    assert feats.grad is not None and not feats.grad.any()


def test_point_sample_bad_mode_names_it() -> None:
    x, points = torch.rand(1, 2, 4, 4), torch.rand(1, 3, 2)
    with pytest.raises(ValueError, match=r"point_sample: mode must be one of .*, found 'linear'"):
        point_sample(x, points, mode="linear")
    with pytest.raises(ValueError, match="point_sample: padding_mode must be one of"):
        point_sample(x, points, padding_mode="zero")
    near = point_sample(x, points, mode="nearest", padding_mode="border")
    assert torch.equal(
        near, F.grid_sample(x, 2 * points[:, :, None] - 1, "nearest", "border", False)[..., 0]
    )
