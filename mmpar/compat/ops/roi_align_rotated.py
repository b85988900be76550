"""Rotated RoI Align: mmcv 1.7.2's ``mmcv.ops.roi_align_rotated`` in plain torch.

A roi ``(batch_idx, cx, cy, w, h, angle)`` is scaled by ``spatial_scale`` (its centre also
shifted by -0.5 pixel when ``aligned``; ``aligned=False`` is the legacy mode, where a roi is
at least 1 pixel wide and high) and cut into ``PH x PW`` bins. Each bin is the average of a
``gh x gw`` grid of samples at the centres of its sub-cells, ``gh = sampling_ratio`` when it
is positive, else ``ceil(h / PH)`` per roi (likewise ``gw``); a roi with an empty grid gives 0.
A sample at ``(yy, xx)`` from the roi's centre is read at ``y = yy cos t - xx sin t + cy``,
``x = yy sin t + xx cos t + cx``, ``t = angle`` (``-angle`` when ``clockwise``), with
RoIAlign's bilinear rule: a sample more than one pixel off the map reads 0, any other is
clamped onto it. Off the CPU, where checking the rois' values would sync the device, a
roi whose batch index is outside ``[0, N)`` or that holds NaN or inf pools zeros (on the
CPU it is refused), as the other RoI ops do (:mod:`mmpar.compat.ops.roi.roi_inputs`).

The reads are weighted sums of rows of a ``(N * H * W, C)`` pixel table, done by
``embedding_bag`` without materialising a value per sample and channel; its gradient is
mmcv's (each sample's weight times the bin's gradient, to the sample's four pixels). rois
are read in chunks of bounded size, a large roi in blocks of its samples. An adaptive grid
of more than ``2**20`` samples (a roi of some 10^6 pixels) is read only where its samples
can land within a pixel of the map (:func:`~mmpar.compat.ops.roi.rotated_grid.window_average`):
the others read 0, so the average is the same, and time and memory are bounded by the
map's size, not the roi's (mmcv's kernels loop over the whole grid). Such a roi whose
centre or size exceeds ``2**24`` pixels, where float32 cannot place a sample to the pixel,
has its samples placed in float64.
"""

from __future__ import annotations

from typing import Any, Union

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import float_compute_dtype, renamed_kwargs
from mmpar.compat.ops.roi.roi_inputs import (
    check_sample_count,
    sampling_ratio_value,
    spatial_scale_value,
)
from mmpar.compat.ops.roi.rotated_grid import (
    bilinear_entries,
    pixel_table,
    read_rows,
    sample_offsets,
    window_average,
)
from mmpar.compat.ops.roi_align import Size, check_roi_inputs, roi_chunks, size_pair

__all__ = ["RoIAlignRotated", "roi_align_rotated"]

ROTATED_ROI_FIELDS = "batch_idx, cx, cy, w, h, angle"
# Table entries (four taps per sample) read at once; rois are read in chunks under it.
_CHUNK_ENTRIES = 1 << 22
_INT_MAX = 2**31 - 1  # mmcv's sample counts are C ints
# Samples of one roi above which an adaptive grid is read by windows near the map.
_DENSE_SAMPLES = 1 << 20
# Coordinates above which float32's spacing exceeds a pixel.
_FLOAT32_PIXELS = 2.0**24


def _zero_bins(table: Tensor, rois: int, bins: int) -> Tensor:
    """``(rois, bins, C)`` zeros read from the table's zero row, so that the output of rois
    without samples is in the autograd graph (0 gradient, as mmcv's)."""
    nothing = torch.full((rois * bins, 1), -1, dtype=torch.long, device=table.device)
    weights = table.new_zeros(rois * bins, 1)
    return read_rows(table, nothing, weights).view(rois, bins, table.shape[1])


def _blocks(top: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, top)) for start in range(0, top, size)]


def _offsets(size: Tensor, bins: int, cells: Tensor, start: int, end: int) -> Tensor:
    """``(k, bins, end - start)``: along one axis of each roi (``size``, ``(k,)``), how far
    samples ``start..end`` of each bin lie from the centre, with ``cells`` samples a bin."""
    bin_idx = torch.arange(bins, device=size.device, dtype=size.dtype)[None, :, None]
    sub = torch.arange(start, end, device=size.device, dtype=size.dtype)[None, None] + 0.5
    cells = cells.clamp(min=1).to(size.dtype)[:, None, None]
    return sample_offsets(size[:, None, None], bins, bin_idx, sub, cells)


def _chunk_pool(
    table: Tensor,
    boxes: Tensor,
    grid: tuple[Tensor, Tensor],
    tops: tuple[int, int],
    out_size: tuple[int, int],
    map_size: tuple[int, int],
) -> Tensor:
    """``(k, PH * PW, C)``, the bins of one chunk of rois (``boxes``: ``(k, 6)`` scaled,
    ``cx, cy, w, h`` shifted and clamped, ``angle`` signed; ``grid``: each roi's ``gh, gw``;
    ``tops``: the largest ``gh, gw`` of the chunk)."""
    ph, pw = out_size
    grid_h, grid_w = grid
    top_h, top_w = tops
    k = boxes.shape[0]
    image, cx, cy, roi_w, roi_h, theta = boxes.unbind(1)
    # Every per-roi value broadcast over (k, PH, PW, gh, gw).
    image, cx, cy, cos, sin = (
        t[:, None, None, None, None] for t in (image.long(), cx, cy, theta.cos(), theta.sin())
    )
    count = (grid_h * grid_w).clamp(min=1).to(boxes.dtype)[:, None, None, None, None]
    per_cell = ph * pw * 4
    cols = min(top_w, max(1, _CHUNK_ENTRIES // (k * per_cell)))
    rows_per_block = min(top_h, max(1, _CHUNK_ENTRIES // (k * per_cell * cols)))
    parts = []
    for y0, y1 in _blocks(top_h, rows_per_block):
        yy = _offsets(roi_h, ph, grid_h, y0, y1)[:, :, None, :, None]  # (k, PH, 1, gh, 1)
        for x0, x1 in _blocks(top_w, cols):
            xx = _offsets(roi_w, pw, grid_w, x0, x1)[:, None, :, None, :]  # (k, 1, PW, 1, gw)
            y = yy * cos - xx * sin + cy
            x = yy * sin + xx * cos + cx
            rows, weights = bilinear_entries(y, x, image, *map_size)
            # Samples past a roi's own grid pad the chunk's: they read nothing.
            in_h = torch.arange(y0, y1, device=boxes.device) < grid_h[:, None]
            in_w = torch.arange(x0, x1, device=boxes.device) < grid_w[:, None]
            valid = in_h[:, None, None, :, None] & in_w[:, None, None, None, :]
            weights = weights * (valid / count)[..., None]
            rows = torch.where(valid[..., None], rows, -1)
            bags = (rows.reshape(k * ph * pw, -1), weights.reshape(k * ph * pw, -1))
            parts.append(read_rows(table, *bags).view(k, ph * pw, -1))
    return sum(parts[1:], parts[0])


def rotated_roi_average(
    feat: Tensor,
    rois: Tensor,
    out_size: tuple[int, int],
    spatial_scale: float,
    sampling_ratio: int,
    aligned: bool,
    clockwise: bool,
) -> Tensor:
    """The bins of rotated rois, each the average of its grid of samples (module docstring).

    The values in ``rois`` are not checked (no device sync): a roi whose batch index is
    outside ``[0, N)`` (truncated, as mmcv's kernels read it) or that holds NaN or inf
    pools zeros, on every device (the ops check them on the CPU).

    Args:
        feat: ``(N, C, H, W)``, float32 or float64 (the compute dtype).
        rois: ``(K, 6)``, ``batch_idx, cx, cy, w, h, angle``, of checked shape and device,
            in ``feat``'s dtype; no gradient flows to them.
        out_size: ``(PH, PW)``.
        spatial_scale: Factor from roi to ``feat`` coordinates.
        sampling_ratio: Samples per bin along each axis; ``<= 0``: adaptive.
        aligned: Shift centres by -0.5 pixel; ``False``: rois at least 1 x 1.
        clockwise: Negate the angle.

    Returns:
        ``(K, C, PH, PW)`` in ``feat``'s dtype, differentiable in ``feat``.
    """
    n, c, h, w = feat.shape
    ph, pw = out_size
    scale = [1.0] + [spatial_scale] * 4 + [-1.0 if clockwise else 1.0]
    boxes = rois.detach() * rois.new_tensor(scale)
    if aligned:
        boxes[:, 1:3] -= 0.5
    else:
        boxes[:, 3:5] = boxes[:, 3:5].clamp(min=1.0)
    # A roi no kernel can place (a batch index outside [0, N) as mmcv's int cast reads it,
    # NaN or inf) pools zeros: a point roi 4 pixels off the map, chosen on the device.
    batch = boxes[:, 0]
    bad = ~torch.isfinite(boxes).all(1) | (batch <= -1) | (batch >= n)
    boxes = torch.where(bad[:, None], boxes.new_tensor([0.0, -4.0, -4.0, 0.0, 0.0, 0.0]), boxes)
    if sampling_ratio > 0:
        grid_h = torch.full((rois.shape[0],), sampling_ratio, dtype=torch.long, device=rois.device)
        grid_w = grid_h
    else:
        # ceil of the bin size; a negative, NaN or huge bin as mmcv's int cast allows.
        cells = torch.ceil(boxes[:, 3:5].flip(1) / boxes.new_tensor(out_size))
        cells = cells.nan_to_num(0.0, 0.0, 0.0).clamp(0, _INT_MAX).long()
        grid_h, grid_w = cells.unbind(1)
    if c == 0:  # nothing to read (embedding_bag fails on a table of no columns)
        return feat.reshape(-1)[:0].reshape(rois.shape[0], 0, ph, pw)
    table = pixel_table(feat)
    if rois.shape[0] == 0:
        return _zero_bins(table, 0, ph * pw).view(0, ph, pw, c).permute(0, 3, 1, 2)
    pieces, order = [], []
    dense = torch.arange(rois.shape[0], device=rois.device)
    if sampling_ratio <= 0:  # the adaptive grids are on the host below anyway (roi_chunks)
        large = grid_h.double() * grid_w.double() * (ph * pw) > _DENSE_SAMPLES
        # Beyond 2**24 pixels float32 places no sample to the pixel: a window widened by
        # that rounding grows with the roi (a roi of 1e9 pixels took half a minute, 1e30
        # hung), so those rois' samples are placed in float64, their windows a few wide.
        far = large & (boxes[:, 1:5].abs().amax(1) > _FLOAT32_PIXELS)
        far &= boxes.dtype != torch.float64
        for select, dtype in ((large & ~far, boxes.dtype), (far, torch.float64)):
            huge = torch.nonzero(select).flatten()
            if huge.numel():
                grid = (grid_h[huge], grid_w[huge])
                part = window_average(
                    table.to(dtype), boxes[huge].to(dtype), grid, out_size, (h, w)
                )
                pieces.append(part.to(table.dtype))
                order.append(huge)
        dense = torch.nonzero(~large).flatten()
    # roi_chunks' budget (1 << 24 elements) at 4 a table entry: _CHUNK_ENTRIES entries.
    for idx, top_h, top_w in roi_chunks(grid_h[dense], grid_w[dense], ph * pw * 4 * 4):
        idx = dense[idx]
        if top_h == 0 or top_w == 0:
            pieces.append(_zero_bins(table, idx.numel(), ph * pw))
        else:
            grid = (grid_h[idx], grid_w[idx])
            pieces.append(_chunk_pool(table, boxes[idx], grid, (top_h, top_w), out_size, (h, w)))
        order.append(idx)
    out = torch.cat(pieces).index_select(0, torch.argsort(torch.cat(order)))
    return out.view(rois.shape[0], ph, pw, c).permute(0, 3, 1, 2)


def check_rotated_rois(op: str, input: Any, rois: Any, aligned: bool) -> None:
    """:func:`~mmpar.compat.ops.roi_align.check_roi_inputs` for ``(K, 6)`` rotated rois;
    on CPU also, with ``aligned``, non-negative sizes (mmcv's CPU kernel refuses others)."""
    check_roi_inputs(op, input, rois, ROTATED_ROI_FIELDS)
    if aligned and rois.shape[0] and rois.device.type == "cpu" and bool((rois[:, 3:5] < 0).any()):
        raise ValueError(f"mmcv.ops.{op}: rois must have w, h >= 0 when aligned=True")


def roi_align_rotated(
    input: Tensor,
    rois: Tensor,
    output_size: Size,
    spatial_scale: float,
    sampling_ratio: int = 0,
    aligned: bool = True,
    clockwise: bool = False,
) -> Tensor:
    """RoI Align of rotated boxes on a batch of feature maps (see the module docstring).

    Args:
        input: ``(N, C, H, W)`` float feature maps.
        rois: ``(K, 6)``, ``batch_idx, cx, cy, w, h, angle`` (radians) in image
            coordinates; ``K`` may be 0.
        output_size: ``(PH, PW)``, or one int for both.
        spatial_scale: Factor from roi to ``input`` coordinates (e.g. 1/16), positive.
        sampling_ratio: Samples per bin along each axis, an int; ``<= 0``: ``ceil`` of the
            bin size.
        aligned: Shift centres by -0.5 pixel (``True``), or mmdet's legacy mode, where rois
            are at least 1x1 (``False``).
        clockwise: The angle turns clockwise in the image (it is negated).

    Returns:
        ``(K, C, PH, PW)`` in ``input``'s dtype (float16/bfloat16 are computed in float32).
        Differentiable in ``input``; ``rois`` get no gradient.

    Raises:
        TypeError: ``input``, ``rois``, ``output_size``, ``spatial_scale`` or
            ``sampling_ratio`` of a wrong type (2.5 samples too).
        ValueError: A wrong shape or device, a ``spatial_scale`` not positive and finite;
            on CPU, a batch index out of range, a
            non-finite roi, or a negative size with ``aligned`` (on other devices, where
            a check would sync, a roi of a batch index out of range or NaN or inf pools
            zeros: :func:`rotated_roi_average`).
    """
    out_size = size_pair("roi_align_rotated", output_size)
    scale = spatial_scale_value("roi_align_rotated", spatial_scale)
    ratio = sampling_ratio_value("roi_align_rotated", sampling_ratio, negative_is_adaptive=True)
    check_rotated_rois("roi_align_rotated", input, rois, bool(aligned))
    check_sample_count("roi_align_rotated", ratio, rois.shape[0], out_size)
    dtype = float_compute_dtype(input.dtype)
    out = rotated_roi_average(
        input.to(dtype),
        rois.to(dtype),
        out_size,
        scale,
        ratio,
        bool(aligned),
        bool(clockwise),
    )
    # Contiguous (K, C, ph, pw), as mmcv's kernel returns it: mmocr's DRRG .view()s it.
    return out.to(input.dtype).contiguous()


class RoIAlignRotated(nn.Module):
    """:func:`roi_align_rotated` as a module (mmcv's ``RoIAlignRotated``).

    Args:
        output_size: ``(PH, PW)``, or one int. Deprecated name: ``out_size``.
        spatial_scale: Factor from roi to feature coordinates.
        sampling_ratio: Samples per bin along each axis; 0: adaptive. Deprecated name:
            ``sample_num``.
        aligned: Shift centres by -0.5 pixel; ``False``: mmdet's legacy mode.
        clockwise: The angle turns clockwise in the image.
    """

    @renamed_kwargs(
        {"out_size": "output_size", "sample_num": "sampling_ratio"},
        "{owner}: got both {old!r} (deprecated) and {new!r}; pass {new!r}",
        "RoIAlignRotated.__init__",
    )
    def __init__(
        self,
        output_size: Union[int, tuple],
        spatial_scale: float,
        sampling_ratio: int = 0,
        aligned: bool = True,
        clockwise: bool = False,
    ) -> None:
        super().__init__()
        self.output_size = size_pair("RoIAlignRotated", output_size)
        self.spatial_scale = spatial_scale_value("RoIAlignRotated", spatial_scale)
        self.sampling_ratio = sampling_ratio_value(
            "RoIAlignRotated", sampling_ratio, negative_is_adaptive=True
        )
        self.aligned = aligned
        self.clockwise = clockwise

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        """``(N, C, H, W)`` maps, ``(K, 6)`` rois -> ``(K, C, PH, PW)``."""
        return roi_align_rotated(
            input,
            rois,
            self.output_size,
            self.spatial_scale,
            self.sampling_ratio,
            self.aligned,
            self.clockwise,
        )

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, "
            f"spatial_scale={self.spatial_scale}, sampling_ratio={self.sampling_ratio}, "
            f"aligned={self.aligned}, clockwise={self.clockwise})"
        )
