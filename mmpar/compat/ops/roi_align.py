"""RoI Align: mmcv 1.7.2's ``mmcv.ops.roi_align`` on torchvision's kernel and plain torch.

Each output bin ``(ph, pw)`` of a roi is pooled from a ``gh x gw`` grid of bilinear samples
placed at the centres of the bin's sub-cells: ``gh = sampling_ratio`` when it is positive,
else ``ceil(roi_height / output_height)`` (and likewise ``gw``), per roi. A sample further
than one pixel outside the map (``y < -1``, ``y > H``, and likewise ``x``) reads 0; any other
is clamped into the map. ``aligned=True`` shifts the scaled box by -0.5 pixel; ``False`` is
the legacy mode, where a roi is at least 1 pixel wide and high.

``pool_mode="avg"`` is torchvision's compiled ``roi_align`` kernel, whose arithmetic is
mmcv's (the average over the grid; an empty grid gives 0). ``pool_mode="max"``, which
torchvision lacks, is plain torch: the largest sample of each bin, its gradient going to
that one sample's four pixels, as mmcv's kernel does.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import float_compute_dtype, renamed_kwargs, torchvision_ops

__all__ = ["RoIAlign", "roi_align"]

_POOL_MODES = ("avg", "max")
# Elements of the largest intermediate tensor of a max search; rois are searched in
# chunks that stay under it (the gather of one chunk's samples, all channels).
_CHUNK_ELEMENTS = 1 << 24

Size = Union[int, Sequence[int]]


def size_pair(op: str, value: Size, param: str = "output_size") -> tuple[int, int]:
    """``(h, w)`` from an int or a pair of positive ints (mmcv's ``output_size``; errors name
    ``param``)."""
    if isinstance(value, bool):
        pair: tuple[Any, ...] = ()
    elif isinstance(value, int):
        pair = (value, value)
    else:
        try:
            pair = tuple(value)
        except TypeError:
            pair = ()
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise TypeError(f"mmcv.ops.{op}: {param} must be an int or (h, w) ints, got {value!r}")
    if min(pair) <= 0:
        raise ValueError(f"mmcv.ops.{op}: {param} must be positive, got {value!r}")
    return pair


def check_roi_inputs(
    op: str, input: Any, rois: Any, fields: str = "batch_idx, x1, y1, x2, y2"
) -> None:
    """Raise ``TypeError``/``ValueError`` unless ``input`` is (N, C, H, W) float and ``rois``
    is (K, F) on the same device, finite, with batch indices in ``[0, N)`` (checked on CPU only,
    where it costs no device sync; on CUDA, as with mmcv's kernels, out-of-range indices
    read out of bounds and non-finite boxes give undefined results). ``fields`` names the F
    columns, comma-separated, the batch index first."""
    if not isinstance(input, Tensor) or not input.is_floating_point():
        found = input.dtype if isinstance(input, Tensor) else type(input).__name__
        raise TypeError(f"mmcv.ops.{op}: input must be a floating-point tensor, got {found}")
    if input.dim() != 4:
        raise ValueError(
            f"mmcv.ops.{op}: input must have shape (N, C, H, W), got {tuple(input.shape)}"
        )
    if not isinstance(rois, Tensor) or rois.is_complex() or rois.dtype == torch.bool:
        found = rois.dtype if isinstance(rois, Tensor) else type(rois).__name__
        raise TypeError(f"mmcv.ops.{op}: rois must be a real-valued tensor, got {found}")
    columns = len(fields.split(","))
    if rois.dim() != 2 or rois.shape[1] != columns:
        raise ValueError(
            f"mmcv.ops.{op}: rois must have shape (K, {columns}) ({fields}), "
            f"got {tuple(rois.shape)}"
        )
    if rois.device != input.device:
        raise ValueError(
            f"mmcv.ops.{op}: rois must be on input's device {input.device}, got {rois.device}"
        )
    if rois.shape[0] and (input.shape[2] == 0 or input.shape[3] == 0):
        raise ValueError(f"mmcv.ops.{op}: input has an empty map {tuple(input.shape)}")
    if rois.shape[0] and rois.device.type == "cpu":
        # The kernels index memory with these numbers: NaN or inf crashes torchvision's.
        if not bool(torch.isfinite(rois).all()):
            raise ValueError(f"mmcv.ops.{op}: rois must be finite, got NaN or inf")
        batch = rois[:, 0].long()
        if int(batch.min()) < 0 or int(batch.max()) >= input.shape[0]:
            raise ValueError(
                f"mmcv.ops.{op}: rois[:, 0] must be batch indices in [0, {input.shape[0]}), "
                f"got {rois[:, 0].min().item()}..{rois[:, 0].max().item()}"
            )


def roi_chunks(cells_h: Tensor, cells_w: Tensor, per_cell: int) -> list[tuple[Tensor, int, int]]:
    """Rois grouped so that each group's padded ``(k, gh_max * gw_max * per_cell)`` stays
    under the budget: ``[(indices, gh_max, gw_max)]``, smallest rois first.

    Args:
        cells_h: ``(K,)`` long, per roi, the sample rows (or pixel rows) of one bin.
        cells_w: ``(K,)`` long, the same for columns.
        per_cell: Elements one cell costs (channels times bins).
    """
    order = torch.argsort(cells_h * cells_w, stable=True)
    heights, widths = torch.stack([cells_h[order], cells_w[order]]).tolist()
    chunks = []
    start, count = 0, len(heights)
    while start < count:
        end, top_h, top_w = start, 0, 0
        while end < count:
            grow_h, grow_w = max(top_h, heights[end]), max(top_w, widths[end])
            if end > start and (end + 1 - start) * grow_h * grow_w * per_cell > _CHUNK_ELEMENTS:
                break
            top_h, top_w, end = grow_h, grow_w, end + 1
        chunks.append((order[start:end], top_h, top_w))
        start = end
    return chunks


def bilinear_taps(coord: Tensor, size: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """mmcv's bilinear taps along one axis of length ``size``.

    Returns:
        ``(low, high, w_low, w_high)``, each shaped as ``coord``: the two pixel indices
        (long) and their weights; a coordinate below -1 or above ``size`` has zero weights.
    """
    inside = (coord >= -1.0) & (coord <= size)
    coord = coord.clamp(min=0)
    low = coord.floor().long().clamp(0, size - 1)  # clamped below too: NaN boxes never index
    edge = low >= size - 1
    high = torch.where(edge, low, low + 1)
    frac = torch.where(edge, torch.zeros_like(coord), coord - low.to(coord.dtype))
    return low, high, (1.0 - frac) * inside, frac * inside


def _sample_grid(
    rois: Tensor, out_size: tuple[int, int], scale: float, sampling_ratio: int, aligned: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Per roi, where its bins' samples lie.

    Returns:
        ``(start_y, start_x, bin_h, bin_w, grid_h, grid_w, batch)``, each ``(K,)``:
        the scaled (and, if ``aligned``, shifted) top-left corner, the bin size, the sample
        count per bin along each axis (long, >= 0) and the batch index (long).
    """
    offset = 0.5 if aligned else 0.0
    boxes = rois[:, 1:] * scale - offset
    start_x, start_y, end_x, end_y = boxes.unbind(1)
    roi_w, roi_h = end_x - start_x, end_y - start_y
    if not aligned:
        roi_w, roi_h = roi_w.clamp(min=1.0), roi_h.clamp(min=1.0)
    bin_h, bin_w = roi_h / out_size[0], roi_w / out_size[1]
    if sampling_ratio > 0:
        grid_h = torch.full_like(start_y, sampling_ratio, dtype=torch.long)
        grid_w = grid_h
    else:
        # A non-finite bin gets no samples rather than a grid of 2**63.
        grid_h = torch.ceil(bin_h).nan_to_num(0.0, 0.0, 0.0).long().clamp(min=0)
        grid_w = torch.ceil(bin_w).nan_to_num(0.0, 0.0, 0.0).long().clamp(min=0)
    return start_y, start_x, bin_h, bin_w, grid_h, grid_w, rois[:, 0].long()


def _sample_coords(start: Tensor, bin_size: Tensor, grid: Tensor, bins: int, top: int) -> Tensor:
    """``(k, bins, top)`` sample coordinates along one axis (samples past ``grid`` are
    padding: the caller masks them)."""
    bin_idx = torch.arange(bins, device=start.device, dtype=start.dtype)[None, :, None]
    sub = torch.arange(top, device=start.device, dtype=start.dtype)[None, None, :] + 0.5
    step = bin_size[:, None, None]
    return start[:, None, None] + bin_idx * step + sub * step / grid.clamp(min=1)[:, None, None]


@torch.no_grad()
def _max_sample_coords(
    feat: Tensor,
    rois: Tensor,
    out_size: tuple[int, int],
    scale: float,
    sampling_ratio: int,
    aligned: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Where each bin's largest sample lies: ``(y, x)``, each ``(K, PH, PW, C)``, and
    ``(K,)`` bool, whether the roi's grid has samples at all. The first of equal samples
    (rows first, then columns) wins, as in mmcv's kernel."""
    n, c, h, w = feat.shape
    ph, pw = out_size
    start_y, start_x, bin_h, bin_w, grid_h, grid_w, batch = _sample_grid(
        rois, out_size, scale, sampling_ratio, aligned
    )
    table = feat.permute(0, 2, 3, 1).reshape(n * h * w, c)
    best_y = feat.new_zeros((rois.shape[0], ph, pw, c))  # rois without samples stay at 0
    best_x = torch.zeros_like(best_y)
    for idx, top_h, top_w in roi_chunks(grid_h, grid_w, 4 * c * ph * pw):
        if top_h == 0 or top_w == 0:
            continue
        ys = _sample_coords(start_y[idx], bin_h[idx], grid_h[idx], ph, top_h)  # (k, PH, Gh)
        xs = _sample_coords(start_x[idx], bin_w[idx], grid_w[idx], pw, top_w)  # (k, PW, Gw)
        y_lo, y_hi, wy_lo, wy_hi = (t[:, :, None, :, None] for t in bilinear_taps(ys, h))
        x_lo, x_hi, wx_lo, wx_hi = (t[:, None, :, None, :] for t in bilinear_taps(xs, w))
        rows = batch[idx][:, None, None, None, None] * h
        values = None
        for y_i, wy in ((y_lo, wy_lo), (y_hi, wy_hi)):
            for x_i, wx in ((x_lo, wx_lo), (x_hi, wx_hi)):
                term = table[(rows + y_i) * w + x_i] * (wy * wx)[..., None]
                values = term if values is None else values.add_(term)
        # values: (k, PH, PW, Gh, Gw, C); padding samples must never win.
        pad = (torch.arange(top_h, device=feat.device) >= grid_h[idx][:, None])[:, :, None] | (
            torch.arange(top_w, device=feat.device) >= grid_w[idx][:, None]
        )[:, None, :]
        values.masked_fill_(pad[:, None, None, :, :, None], float("-inf"))
        arg = values.flatten(3, 4).argmax(dim=3)  # (k, PH, PW, C)
        best_y[idx] = ys[:, :, None, :].expand(-1, -1, pw, -1).gather(3, arg // top_w)
        best_x[idx] = xs[:, None, :, :].expand(-1, ph, -1, -1).gather(3, arg % top_w)
    return best_y, best_x, (grid_h > 0) & (grid_w > 0)


def _read_at(
    feat: Tensor, batch: Tensor, best_y: Tensor, best_x: Tensor, has_samples: Tensor
) -> Tensor:
    """The bilinear read of ``feat`` at each bin's largest sample: ``(K, C, PH, PW)``.

    Args:
        feat: ``(N, C, H, W)``.
        batch: ``(K,)`` long, each roi's batch index.
        best_y: ``(K, PH, PW, C)``, the sample's row (from :func:`_max_sample_coords`).
        best_x: ``(K, PH, PW, C)``, its column.
        has_samples: ``(K,)`` bool; a roi whose grid is empty gives 0.
    """
    _, c, h, w = feat.shape
    y_lo, y_hi, wy_lo, wy_hi = bilinear_taps(best_y, h)
    x_lo, x_hi, wx_lo, wx_hi = bilinear_taps(best_x, w)
    channel = torch.arange(c, device=feat.device)
    planes = (batch[:, None, None, None] * c + channel) * h  # (K, 1, 1, C)
    flat = feat.reshape(-1)
    out = None
    for y_i, wy in ((y_lo, wy_lo), (y_hi, wy_hi)):
        for x_i, wx in ((x_lo, wx_lo), (x_hi, wx_hi)):
            term = flat[(planes + y_i) * w + x_i] * (wy * wx)
            out = term if out is None else out + term
    out = torch.where(has_samples[:, None, None, None], out, torch.zeros_like(out))
    return out.permute(0, 3, 1, 2)


def roi_align(
    input: Tensor,
    rois: Tensor,
    output_size: Size,
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    pool_mode: str = "avg",
    aligned: bool = True,
) -> Tensor:
    """RoI Align of boxes on a batch of feature maps.

    Args:
        input: ``(N, C, H, W)`` float feature maps.
        rois: ``(K, 5)`` float, ``batch_idx, x1, y1, x2, y2`` in image coordinates;
            ``K`` may be 0.
        output_size: ``(PH, PW)``, or one int for both.
        spatial_scale: Factor from box to ``input`` coordinates (e.g. 1/16).
        sampling_ratio: Samples per bin along each axis; ``<= 0``: ``ceil`` of the bin
            size, per roi.
        pool_mode: ``"avg"`` or ``"max"`` over a bin's samples.
        aligned: Shift boxes by -0.5 pixel (``True``), or mmdet's legacy mode, where rois
            are at least 1x1 (``False``).

    Returns:
        ``(K, C, PH, PW)`` in ``input``'s dtype (float16/bfloat16 are computed in float32).
        Differentiable in ``input``; ``rois`` get no gradient.

    Raises:
        TypeError: ``input``, ``rois`` or ``output_size`` of a wrong type.
        ValueError: A wrong shape, ``pool_mode``, device, or batch index (on CPU).
    """
    out_size = size_pair("roi_align", output_size)
    if pool_mode not in _POOL_MODES:
        raise ValueError(f"mmcv.ops.roi_align: pool_mode must be 'avg' or 'max', got {pool_mode!r}")
    check_roi_inputs("roi_align", input, rois)
    dtype = float_compute_dtype(input.dtype)
    feat, boxes = input.to(dtype), rois.detach().to(dtype)
    if pool_mode == "max":
        # The search runs without autograd; the output is the bilinear read at the winning
        # sample, so the gradient reaches that sample's four pixels only.
        best = _max_sample_coords(
            feat, boxes, out_size, float(spatial_scale), int(sampling_ratio), bool(aligned)
        )
        return _read_at(feat, boxes[:, 0].long(), *best).to(input.dtype)
    torchvision_ops()  # loads torchvision's kernels, or says how to install them
    # The kernel itself: torchvision.ops.roi_align swaps in a Python version under
    # deterministic algorithms on CUDA, which clamps far-outside samples instead of zeroing.
    out = torch.ops.torchvision.roi_align(
        feat,
        boxes,
        float(spatial_scale),
        out_size[0],
        out_size[1],
        int(sampling_ratio),
        bool(aligned),
    )
    return out.to(input.dtype)


class RoIAlign(nn.Module):
    """:func:`roi_align` as a module (mmcv's ``RoIAlign``).

    Args:
        output_size: ``(PH, PW)``, or one int. Deprecated name: ``out_size``.
        spatial_scale: Factor from box to feature coordinates.
        sampling_ratio: Samples per bin along each axis; 0: adaptive. Deprecated name:
            ``sample_num``.
        pool_mode: ``"avg"`` or ``"max"``.
        aligned: Shift boxes by -0.5 pixel; ``False``: mmdet's legacy mode.
        use_torchvision: As in mmcv, call torchvision's ``roi_align`` (average pooling,
            whatever ``pool_mode`` says). Its numbers equal the default path's.
    """

    @renamed_kwargs(
        {"out_size": "output_size", "sample_num": "sampling_ratio"},
        "{owner}: got both {old!r} (deprecated) and {new!r}; pass {new!r}",
        "RoIAlign.__init__",
    )
    def __init__(
        self,
        output_size: Size,
        spatial_scale: float = 1.0,
        sampling_ratio: int = 0,
        pool_mode: str = "avg",
        aligned: bool = True,
        use_torchvision: bool = False,
    ) -> None:
        super().__init__()
        if pool_mode not in _POOL_MODES:
            raise ValueError(f"RoIAlign: pool_mode must be 'avg' or 'max', got {pool_mode!r}")
        self.output_size = size_pair("RoIAlign", output_size)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = int(sampling_ratio)
        self.pool_mode = pool_mode
        self.aligned = aligned
        self.use_torchvision = use_torchvision

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        """``(N, C, H, W)`` maps, ``(K, 5)`` rois -> ``(K, C, PH, PW)``."""
        pool_mode = "avg" if self.use_torchvision else self.pool_mode
        return roi_align(
            input,
            rois,
            self.output_size,
            self.spatial_scale,
            self.sampling_ratio,
            pool_mode,
            self.aligned,
        )

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, "
            f"spatial_scale={self.spatial_scale}, sampling_ratio={self.sampling_ratio}, "
            f"pool_mode={self.pool_mode}, aligned={self.aligned}, "
            f"use_torchvision={self.use_torchvision})"
        )
