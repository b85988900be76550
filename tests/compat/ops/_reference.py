"""Reference pieces shared by the tests of ``mmpar.compat.ops`` (tests only).

Each op is tested against a reference written from the op's definition. What more
than one of those definitions uses, and the parametrization lists the tests share,
is here. Only torch and pytest are imported: a test module that skips without
torchvision or mmcv skips the same way with this module imported.

API:

``DEVICES``, ``HALF_DTYPES``
    ``parametrize`` values: the CPU and CUDA (marked ``cuda``, skipped without a
    device); float16 and bfloat16.

``bilinear_zero_padded(img, y, x) -> Tensor``
    Bilinear read at pixel coordinates, neighbours outside the map reading 0
    (deformable convolution, ``grid_sample``, multi-scale deformable attention).

``roi_align_corners(y, x, height, width) -> (y_low, y_high, x_low, x_high, weights) | None``
    RoIAlign's neighbours and weights, clamped onto the map (roi_align,
    deform_roi_pool).

``roi_align_read(fmap, y, x) -> (value, taps)``
    RoIAlign's bilinear read of a map given as lists of rows, with the pixels and
    weights it reads (the rotated ops).

``rotated_roi_samples(roi, out_size, spatial_scale, sampling_ratio, aligned, clockwise)``
    Where rotated RoI Align samples each bin of a ``(batch_idx, cx, cy, w, h, angle)``
    roi, and the count it divides by (roi_align_rotated, riroi_align_rotated).

``box_overlap(a, b, mode="iou", offset=0) -> float``
    IoU / IoF of two boxes as mmcv's kernels define it (bbox_overlaps, nms).

``conv_out_size``, ``deform_conv_inputs``, ``deform_conv_reference``,
``deform_conv_grad_reference``
    DCNv1 and DCNv2 (modulated): the output size, random inputs, the
    definition as a loop over output pixels, and mmcv-full's offset and mask
    gradients (none at or beyond the border).

``MMCV_ROI_CASES``, ``GRADCHECK_ROIS``, ``roi_inputs``, ``assert_mmcv_roi_numbers``
    Inputs shared by the roi_align and roi_pool tests, and the check of mmcv's
    own expected numbers.

``box_corners(box, clockwise=True) -> [(x, y)] * 4``
    A rotated ``(cx, cy, w, h, angle)`` box's corners A, B, C, D, from the formula
    of mmcv's ``box_iou_rotated`` docstring.

``clipped_area(p, q) -> float``
    The area of the intersection of two convex polygons (lists of ``(x, y)``),
    by Sutherland-Hodgman clipping in Python floats.

``rotated_overlap(a, b, mode="iou", clockwise=True) -> float``
    IoU / IoF of two rotated boxes as mmcv's kernel defines it (0 below an area
    of 1e-14, no epsilon).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, List, Optional, Sequence, Tuple, Union

import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
        ],
    ),
]
HALF_DTYPES = [torch.float16, torch.bfloat16]

Coordinate = Union[float, torch.Tensor]


# ---------------------------------------------------------------- bilinear reads


def _as_float(value: Coordinate) -> float:
    return float(value.detach()) if isinstance(value, torch.Tensor) else float(value)


def bilinear_zero_padded(img: torch.Tensor, y: Coordinate, x: Coordinate) -> torch.Tensor:
    """Bilinear read of ``img`` (``(..., H, W)``) at pixel coordinates ``(y, x)``.

    Pixel ``(i, j)`` lies at ``(y, x) = (i, j)``. Of the four neighbours, those outside
    the map read 0, so a point at ``y <= -1`` or ``y >= H`` (likewise in x) reads 0.

    Args:
        img: The map; the read takes every leading index at once.
        y: Row coordinate. A tensor keeps the weights differentiable in it.
        x: Column coordinate, likewise.

    Returns:
        The ``img.shape[:-2]`` values, in ``img``'s dtype.
    """
    height, width = img.shape[-2:]
    y0, x0 = math.floor(_as_float(y)), math.floor(_as_float(x))
    out = img.new_zeros(img.shape[:-2])
    for row, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for col, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= row < height and 0 <= col < width:
                out = out + wy * wx * img[..., row, col]
    return out


RoIAlignCorners = Tuple[int, int, int, int, Tuple[float, float, float, float]]


def roi_align_corners(y: float, x: float, height: int, width: int) -> Optional[RoIAlignCorners]:
    """mmcv's RoIAlign neighbours of ``(y, x)`` on a ``height x width`` map.

    Unlike :func:`bilinear_zero_padded`, a point less than a pixel off the map is
    clamped onto it.

    Returns:
        None outside ``[-1, height] x [-1, width]``; else ``(y_low, y_high, x_low,
        x_high, weights)``, the weights of ``(y_low, x_low)``, ``(y_low, x_high)``,
        ``(y_high, x_low)`` and ``(y_high, x_high)`` in that order.
    """
    if y < -1 or y > height or x < -1 or x > width:
        return None
    yc, xc = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(yc), int(xc)
    if y_low >= height - 1:
        y_low = y_high = height - 1
        yc = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_low = x_high = width - 1
        xc = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = yc - y_low, xc - x_low
    hy, hx = 1 - ly, 1 - lx
    return y_low, y_high, x_low, x_high, (hy * hx, hy * lx, ly * hx, ly * lx)


def roi_align_read(
    fmap: Sequence[Sequence[float]], y: float, x: float
) -> Tuple[float, List[Tuple[int, int, float]]]:
    """RoIAlign's bilinear read of ``fmap`` (a list of rows) at ``(y, x)``.

    Returns:
        ``(value, taps)``: the value, and the ``(row, col, weight)`` it is the weighted sum
        of (none for a point more than a pixel off the map, which reads 0).
    """
    hit = roi_align_corners(y, x, len(fmap), len(fmap[0]))
    if hit is None:
        return 0.0, []
    y_low, y_high, x_low, x_high, weights = hit
    corners = ((y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high))
    taps = [(r, c, w) for (r, c), w in zip(corners, weights)]
    return sum(w * fmap[r][c] for r, c, w in taps), taps


def rotated_roi_samples(
    roi: Sequence[float],
    out_size: Tuple[int, int],
    spatial_scale: float,
    sampling_ratio: int,
    aligned: bool,
    clockwise: bool,
) -> Tuple[List[List[List[Tuple[float, float]]]], int]:
    """Where rotated RoI Align samples the bins of one roi.

    The roi ``(batch_idx, cx, cy, w, h, angle)`` is scaled (centre shifted by -0.5 with
    ``aligned``; at least 1 x 1 without) and cut into ``PH x PW`` bins in its own frame;
    each bin has a ``gh x gw`` grid of samples at its sub-cells' centres (``gh =
    sampling_ratio`` if positive, else ``ceil(h / PH)``, at least 0; likewise ``gw``).
    A sample ``(yy, xx)`` from the centre lies at ``y = yy cos t - xx sin t + cy``,
    ``x = yy sin t + xx cos t + cx`` in the map, ``t = -angle`` if ``clockwise`` else
    ``angle``.

    Returns:
        ``(points, count)``: ``points[ph][pw]``, the bin's ``(y, x)`` samples; ``count =
        max(gh * gw, 1)``, what the bin's sum is divided by.
    """
    off = 0.5 if aligned else 0.0
    cx, cy = roi[1] * spatial_scale - off, roi[2] * spatial_scale - off
    w, h = roi[3] * spatial_scale, roi[4] * spatial_scale
    if not aligned:
        w, h = max(w, 1.0), max(h, 1.0)
    theta = -roi[5] if clockwise else roi[5]
    cos, sin = math.cos(theta), math.sin(theta)
    ph_n, pw_n = out_size
    bin_h, bin_w = h / ph_n, w / pw_n
    gh = sampling_ratio if sampling_ratio > 0 else max(math.ceil(bin_h), 0)
    gw = sampling_ratio if sampling_ratio > 0 else max(math.ceil(bin_w), 0)
    points = []
    for ph in range(ph_n):
        row = []
        for pw in range(pw_n):
            samples = []
            for iy in range(gh):
                yy = -h / 2 + ph * bin_h + (iy + 0.5) * bin_h / gh
                for ix in range(gw):
                    xx = -w / 2 + pw * bin_w + (ix + 0.5) * bin_w / gw
                    samples.append((yy * cos - xx * sin + cy, yy * sin + xx * cos + cx))
            row.append(samples)
        points.append(row)
    return points, max(gh * gw, 1)


# ---------------------------------------------------------------- boxes


def box_overlap(
    a: Sequence[float], b: Sequence[float], mode: str = "iou", offset: int = 0
) -> float:
    """One pair of ``(x1, y1, x2, y2, ...)`` boxes, as mmcv's kernels define it.

    Args:
        a: The first box; ``"iof"`` divides by its area.
        b: The second box.
        mode: ``"iou"`` or ``"iof"``.
        offset: Added to every side length (1: boxes of whole pixels).

    Returns:
        The overlap, without an epsilon: nan for 0 / 0.
    """
    w = max(min(a[2], b[2]) - max(a[0], b[0]) + offset, 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]) + offset, 0.0)
    inter = w * h
    area_a = (a[2] - a[0] + offset) * (a[3] - a[1] + offset)
    area_b = (b[2] - b[0] + offset) * (b[3] - b[1] + offset)
    base = area_a + area_b - inter if mode == "iou" else area_a
    return inter / base if base != 0 else math.nan


# ---------------------------------------------------------------- deformable convolution


def conv_out_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """A convolution's output length along one axis."""
    return (size + 2 * padding - (dilation * (kernel - 1) + 1)) // stride + 1


def deform_conv_inputs(
    case: tuple,
    *,
    modulated: bool = False,
    n_img: int = 2,
    size: Tuple[int, int] = (5, 6),
    scale: float = 2.0,
    dtype: torch.dtype = torch.float64,
    device: str = "cpu",
    seed: int = 0,
) -> Tuple[torch.Tensor, ...]:
    """Random inputs of a deformable convolution.

    Args:
        case: ``(channels, out_channels, kernel, stride, padding, dilation, groups,
            deform_groups)``; ``kernel`` an int or ``(kh, kw)``.
        modulated: DCNv2's inputs (with a mask and a bias) instead of DCNv1's.
        n_img: Batch size.
        size: The input's ``(H, W)``.
        scale: Standard deviation of the offsets, in pixels: a few pixels send
            many samples outside the map.
        dtype: Of every tensor.
        device: Of every tensor.
        seed: Of the generator that draws them all.

    Returns:
        ``(input, offset, weight)``, or with ``modulated`` ``(input, offset, mask,
        weight, bias)``, the mask in [0, 1).
    """
    channels, out_ch, kernel, stride, padding, dilation, groups, dgroups = case
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    gen = torch.Generator().manual_seed(seed)
    inp = torch.randn(n_img, channels, *size, generator=gen, dtype=dtype)
    weight = torch.randn(out_ch, channels // groups, kh, kw, generator=gen, dtype=dtype)
    # DCNv2's bias comes before the offsets: the draws its tests were written with.
    bias = torch.randn(out_ch, generator=gen, dtype=dtype) if modulated else None
    oh = conv_out_size(size[0], kh, stride, padding, dilation)
    ow = conv_out_size(size[1], kw, stride, padding, dilation)
    offset = torch.randn(n_img, dgroups * 2 * kh * kw, oh, ow, generator=gen, dtype=dtype) * scale
    if not modulated:
        return inp.to(device), offset.to(device), weight.to(device)
    mask = torch.rand(n_img, dgroups * kh * kw, oh, ow, generator=gen, dtype=dtype)
    return tuple(t.to(device) for t in (inp, offset, mask, weight, bias))


def deform_conv_reference(
    inp: torch.Tensor,
    offset: torch.Tensor,
    weight: torch.Tensor,
    stride: int,
    padding: int,
    dilation: int,
    groups: int,
    deform_groups: int,
    *,
    mask: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """DCN's definition, one output pixel at a time.

    ``out[n, o, y, x] = bias[o] + sum_{c, i, j} w[o, c, i, j] * mask * bilinear(in[n, c],
    y * s - p + i * d + dy, x * s - p + j * d + dx)``, reading with
    :func:`bilinear_zero_padded`. For kernel point ``k = i * kw + j`` of deform group
    ``g``, ``(dy, dx)`` are offset channels ``g * 2 * kh * kw + 2 * k`` and ``+ 1``, and
    the mask is channel ``g * kh * kw + k``.

    Args:
        inp: ``(N, C, H, W)``.
        offset: ``(N, deform_groups * 2 * kh * kw, out_h, out_w)``.
        weight: ``(out_channels, C // groups, kh, kw)``.
        stride: Of both axes; likewise ``padding`` and ``dilation``.
        padding: See ``stride``.
        dilation: See ``stride``.
        groups: Convolution groups.
        deform_groups: Groups of input channels that share offsets (and mask).
        mask: DCNv2's modulation, ``(N, deform_groups * kh * kw, out_h, out_w)``;
            None for DCNv1.
        bias: ``(out_channels,)``, or None.

    Returns:
        ``(N, out_channels, out_h, out_w)``, in ``inp``'s dtype.
    """
    n_img, channels, height, width = inp.shape
    out_ch, ch_per_group, kh, kw = weight.shape
    out_h = conv_out_size(height, kh, stride, padding, dilation)
    out_w = conv_out_size(width, kw, stride, padding, dilation)
    out = inp.new_zeros(n_img, out_ch, out_h, out_w)
    ch_per_deform = channels // deform_groups
    out_per_group = out_ch // groups
    for n in range(n_img):
        for o in range(out_ch):
            for y in range(out_h):
                for x in range(out_w):
                    acc = bias[o].clone() if bias is not None else inp.new_zeros(())
                    for cl in range(ch_per_group):
                        c = (o // out_per_group) * ch_per_group + cl
                        g = c // ch_per_deform
                        for i in range(kh):
                            for j in range(kw):
                                k = i * kw + j
                                dy = float(offset[n, g * 2 * kh * kw + 2 * k, y, x])
                                dx = float(offset[n, g * 2 * kh * kw + 2 * k + 1, y, x])
                                coeff = weight[o, cl, i, j]
                                if mask is not None:
                                    coeff = coeff * mask[n, g * kh * kw + k, y, x]
                                sy = y * stride - padding + i * dilation + dy
                                sx = x * stride - padding + j * dilation + dx
                                acc = acc + coeff * bilinear_zero_padded(inp[n, c], sy, sx)
                    out[n, o, y, x] = acc
    return out


def deform_conv_grad_reference(
    inp: torch.Tensor,
    offset: torch.Tensor,
    weight: torch.Tensor,
    grad_out: torch.Tensor,
    stride: int,
    padding: int,
    dilation: int,
    groups: int,
    deform_groups: int,
    *,
    mask: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """DCN's offset and mask gradients by mmcv-full's rule, one sample at a time.

    A sample at ``(py, px)`` outside the open box ``(-1, H) x (-1, W)`` (on its border
    included) gets no gradient. Inside, with ``(y0, x0) = floor(py, px)``,
    ``(ly, lx) = (py - y0, px - x0)`` and ``v[a][b]`` the input at ``(y0 + a, x0 + b)``
    (0 off the map), the read ``sum v[a][b] * (a ? ly : 1 - ly) * (b ? lx : 1 - lx)``
    has the derivatives ``(1 - lx) (v10 - v00) + lx (v11 - v01)`` in ``py`` and
    ``(1 - ly) (v01 - v00) + ly (v11 - v10)`` in ``px``; its mask gradient is the read.
    Each is weighted by ``grad_out * weight`` (and the mask, for the offsets).

    Args:
        inp: ``(N, C, H, W)``.
        offset: ``(N, deform_groups * 2 * kh * kw, out_h, out_w)``.
        weight: ``(out_channels, C // groups, kh, kw)``.
        grad_out: ``(N, out_channels, out_h, out_w)``, the output's gradient.
        stride: Of both axes; likewise ``padding`` and ``dilation``.
        padding: See ``stride``.
        dilation: See ``stride``.
        groups: Convolution groups.
        deform_groups: Groups of input channels that share offsets (and mask).
        mask: DCNv2's modulation; None for DCNv1.

    Returns:
        ``(grad_offset, grad_mask)``, ``grad_mask`` None for DCNv1; float64.
    """
    n_img, channels, height, width = inp.shape
    out_ch, ch_per_group, kh, kw = weight.shape
    _, _, out_h, out_w = grad_out.shape
    grad_offset = torch.zeros(offset.shape, dtype=torch.float64)
    grad_mask = None if mask is None else torch.zeros(mask.shape, dtype=torch.float64)
    ch_per_deform = channels // deform_groups
    out_per_group = out_ch // groups

    def value(n: int, c: int, row: int, col: int) -> float:
        inside = 0 <= row < height and 0 <= col < width
        return float(inp[n, c, row, col]) if inside else 0.0

    for n, o, y, x in itertools.product(range(n_img), range(out_ch), range(out_h), range(out_w)):
        for cl, i, j in itertools.product(range(ch_per_group), range(kh), range(kw)):
            c = (o // out_per_group) * ch_per_group + cl
            g, k = c // ch_per_deform, i * kw + j
            oc = g * 2 * kh * kw + 2 * k
            py = y * stride - padding + i * dilation + float(offset[n, oc, y, x])
            px = x * stride - padding + j * dilation + float(offset[n, oc + 1, y, x])
            if not (-1 < py < height and -1 < px < width):
                continue
            y0, x0 = math.floor(py), math.floor(px)
            ly, lx = py - y0, px - x0
            v00, v01 = value(n, c, y0, x0), value(n, c, y0, x0 + 1)
            v10, v11 = value(n, c, y0 + 1, x0), value(n, c, y0 + 1, x0 + 1)
            coeff = float(grad_out[n, o, y, x]) * float(weight[o, cl, i, j])
            if mask is not None:
                read = (1 - ly) * ((1 - lx) * v00 + lx * v01) + ly * ((1 - lx) * v10 + lx * v11)
                grad_mask[n, g * kh * kw + k, y, x] += coeff * read  # type: ignore[index]
                coeff *= float(mask[n, g * kh * kw + k, y, x])
            grad_offset[n, oc, y, x] += coeff * ((1 - lx) * (v10 - v00) + lx * (v11 - v01))
            grad_offset[n, oc + 1, y, x] += coeff * ((1 - ly) * (v01 - v00) + ly * (v11 - v10))
    return grad_offset, grad_mask


# ---------------------------------------------------------------- roi_align and roi_pool

# The inputs of mmcv's own RoIAlign and RoIPool tests: (feature map, rois).
MMCV_ROI_CASES = [
    ([[[[1.0, 2.0], [3.0, 4.0]]]], [[0.0, 0.0, 0.0, 1.0, 1.0]]),
    ([[[[1.0, 2.0], [3.0, 4.0]], [[4.0, 3.0], [2.0, 1.0]]]], [[0.0, 0.0, 0.0, 1.0, 1.0]]),
    (
        [[[[1, 2, 5, 6.0], [3, 4, 7, 8], [9, 10, 13, 14], [11, 12, 15, 16]]]],
        [[0.0, 0.0, 0.0, 3.0, 3.0]],
    ),
]

# Rois for gradcheck over a two-image map, one reaching outside it.
GRADCHECK_ROIS = [[0, 0.6, 0.4, 6.2, 5.3], [1, -1.5, 1.2, 3.1, 9.0], [1, 2.2, 0.1, 3.5, 1.9]]


def roi_inputs(
    rois: List[List[float]], device: str, dtype: torch.dtype, seed: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """A random two-image ``(2, 3, 6, 7)`` map and ``rois``, both as ``dtype`` on ``device``.

    The map is drawn in float64 (the same values for every ``dtype``), then cast.
    """
    gen = torch.Generator().manual_seed(seed)
    inp = torch.randn(2, 3, 6, 7, generator=gen, dtype=torch.float64)
    boxes = torch.tensor(rois, dtype=torch.float64)
    return inp.to(device, dtype), boxes.to(device, dtype)


def assert_mmcv_roi_numbers(
    pool: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    expected: Sequence[Tuple[list, list]],
    device: str,
    dtype: torch.dtype,
) -> None:
    """``pool`` on :data:`MMCV_ROI_CASES` gives mmcv's expected numbers.

    Args:
        pool: ``(input, rois) -> output``, the op with its other arguments bound.
        expected: Per case, the output and the input gradient for an all-ones
            upstream gradient.
        device: Where the op runs.
        dtype: Of the input, the rois and the expected numbers.
    """
    for (inp, rois), (out_ref, grad_ref) in zip(MMCV_ROI_CASES, expected):
        x = torch.tensor(inp, dtype=dtype, device=device, requires_grad=True)
        out = pool(x, torch.tensor(rois, dtype=dtype, device=device))
        out.backward(torch.ones_like(out))
        torch.testing.assert_close(out.cpu(), torch.tensor(out_ref, dtype=dtype))
        torch.testing.assert_close(x.grad.cpu(), torch.tensor(grad_ref, dtype=dtype))


# ---------------------------------------------------------------- rotated boxes and polygons

Point = Tuple[float, float]


def box_corners(box: Sequence[float], clockwise: bool = True) -> List[Point]:
    """Corners A, B, C, D of ``(cx, cy, w, h, angle)``: ``c + R (sx * w / 2, sy * h / 2)``.

    ``(sx, sy)`` runs ``(-1, -1), (1, -1), (1, 1), (-1, 1)``; ``R`` is
    ``[[cos, -sin], [sin, cos]]`` (``clockwise``) or ``[[cos, sin], [-sin, cos]]``.
    """
    cx, cy, w, h, angle = (float(v) for v in box)
    cos, sin = math.cos(angle), (math.sin(angle) if clockwise else -math.sin(angle))
    corners = []
    for sx, sy in ((-1, -1), (1, -1), (1, 1), (-1, 1)):
        x, y = sx * w / 2, sy * h / 2
        corners.append((cx + cos * x - sin * y, cy + sin * x + cos * y))
    return corners


def signed_area(poly: Sequence[Point]) -> float:
    """The shoelace signed area."""
    return (
        sum(
            poly[i][0] * poly[(i + 1) % len(poly)][1] - poly[(i + 1) % len(poly)][0] * poly[i][1]
            for i in range(len(poly))
        )
        / 2
    )


def clipped_area(p: Sequence[Point], q: Sequence[Point]) -> float:
    """The area of ``p`` intersected with ``q``, two convex polygons in either orientation.

    Clips ``q`` by each edge of ``p`` in turn (Sutherland-Hodgman), keeping the side
    of each edge where ``p`` lies; repeated vertices of ``p`` are skipped.
    """
    if signed_area(p) == 0:
        return 0.0
    if signed_area(p) < 0:
        p = list(reversed(p))
    out = [(float(x), float(y)) for x, y in q]
    for i in range(len(p)):
        (ax, ay), (bx, by) = p[i], p[(i + 1) % len(p)]
        if (ax, ay) == (bx, by) or not out:
            continue

        def side(v: Point) -> float:
            return (bx - ax) * (v[1] - ay) - (by - ay) * (v[0] - ax)

        polygon, out = out, []
        for j, cur in enumerate(polygon):
            prev = polygon[j - 1]
            d_cur, d_prev = side(cur), side(prev)
            if (d_cur >= 0) != (d_prev >= 0):
                t = d_prev / (d_prev - d_cur)
                out.append((prev[0] + t * (cur[0] - prev[0]), prev[1] + t * (cur[1] - prev[1])))
            if d_cur >= 0:
                out.append(cur)
    return abs(signed_area(out)) if len(out) > 2 else 0.0


def rotated_overlap(
    a: Sequence[float], b: Sequence[float], mode: str = "iou", clockwise: bool = True
) -> float:
    """IoU (or IoF: over ``a``'s area) of two ``(cx, cy, w, h, angle)`` boxes, as mmcv's kernel.

    A box's area is ``w * h``; either below 1e-14 gives 0.
    """
    area_a, area_b = float(a[2]) * float(a[3]), float(b[2]) * float(b[3])
    if area_a < 1e-14 or area_b < 1e-14:
        return 0.0
    inter = clipped_area(box_corners(a, clockwise), box_corners(b, clockwise))
    return inter / (area_a + area_b - inter if mode == "iou" else area_a)
