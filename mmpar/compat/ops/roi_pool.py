"""RoI Pool: mmcv 1.7.2's ``mmcv.ops.roi_pool`` in plain torch.

mmcv's kernel (CUDA only in mmcv) does not round the roi: the box spans
``[x1 * s, (x2 + 1) * s)`` (``s = spatial_scale``) in continuous feature coordinates,
bin ``pw`` spans pixels ``floor(x1 * s + pw * bin_w)`` up to ``ceil(x1 * s + (pw + 1) *
bin_w)`` (exclusive, clipped to the map) and likewise for rows, and each bin is the max
of its pixels; an empty bin, or a roi with no width or height, gives 0. torchvision's
``roi_pool`` rounds the box to whole pixels first, which changes the bins whenever
``x * s`` is not an integer, so it is not used. The gradient goes to each bin's max
pixel (the first in row-major order among equals), as in mmcv.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.roi_align import Size, check_roi_inputs, roi_chunks, size_pair

__all__ = ["RoIPool", "roi_pool"]


def _bin_edges(
    rois: Tensor, out_size: tuple[int, int], scale: float, height: int, width: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Each bin's pixel span, mmcv's rule.

    Returns:
        ``(row_start, row_end, col_start, col_end, valid)``: ``(K, PH)`` and ``(K, PW)``
        long spans, end exclusive, clipped to the map; ``(K,)`` bool, whether the roi has
        positive width and height.
    """
    x1, y1 = rois[:, 1] * scale, rois[:, 2] * scale
    x2, y2 = (rois[:, 3] + 1) * scale, (rois[:, 4] + 1) * scale
    roi_w, roi_h = x2 - x1, y2 - y1
    bin_w, bin_h = roi_w / out_size[1], roi_h / out_size[0]
    ph = torch.arange(out_size[0], device=rois.device, dtype=rois.dtype)[None, :]
    pw = torch.arange(out_size[1], device=rois.device, dtype=rois.dtype)[None, :]

    def span(index: Tensor, size: Tensor, start: Tensor, limit: int) -> tuple[Tensor, Tensor]:
        low = torch.floor(index * size[:, None] + start[:, None])
        high = torch.ceil((index + 1) * size[:, None] + start[:, None])
        return low.long().clamp(0, limit), high.long().clamp(0, limit)

    row_start, row_end = span(ph, bin_h, y1, height)
    col_start, col_end = span(pw, bin_w, x1, width)
    return row_start, row_end, col_start, col_end, (roi_w > 0) & (roi_h > 0)


@torch.no_grad()
def _argmax_pixels(feat: Tensor, rois: Tensor, out_size: tuple[int, int], scale: float) -> Tensor:
    """``(K, PH, PW, C)`` long: each bin's max pixel as ``y * W + x``; -1 for an empty bin."""
    n, c, h, w = feat.shape
    ph, pw = out_size
    row_start, row_end, col_start, col_end, valid = _bin_edges(rois, out_size, scale, h, w)
    rows = (row_end - row_start).clamp(min=0) * valid[:, None]
    cols = (col_end - col_start).clamp(min=0) * valid[:, None]
    best = torch.full((rois.shape[0], ph, pw, c), -1, dtype=torch.long, device=feat.device)
    table = feat.permute(0, 2, 3, 1).reshape(n * h * w, c)
    batch = rois[:, 0].long()
    for idx, top_h, top_w in roi_chunks(rows.amax(1), cols.amax(1), 2 * c * ph * pw):
        if top_h == 0 or top_w == 0:
            continue
        dy = torch.arange(top_h, device=feat.device)
        dx = torch.arange(top_w, device=feat.device)
        y = row_start[idx][:, :, None] + dy  # (k, PH, Bh)
        x = col_start[idx][:, :, None] + dx  # (k, PW, Bw)
        inside_y = dy < rows[idx][:, :, None]
        inside_x = dx < cols[idx][:, :, None]
        pixel = (
            y.clamp(max=h - 1)[:, :, None, :, None] * w + x.clamp(max=w - 1)[:, None, :, None, :]
        )
        values = table[batch[idx][:, None, None, None, None] * (h * w) + pixel]
        inside = inside_y[:, :, None, :, None] & inside_x[:, None, :, None, :]
        # values: (k, PH, PW, Bh, Bw, C); pixels outside the bin never win.
        values.masked_fill_(~inside[..., None], float("-inf"))
        arg = values.flatten(3, 4).argmax(dim=3)  # (k, PH, PW, C)
        found = pixel.flatten(3, 4).gather(3, arg)
        empty = ~inside.flatten(3, 4).any(dim=3)  # (k, PH, PW)
        best[idx] = found.masked_fill(empty[..., None], -1)
    return best


def roi_pool(input: Tensor, rois: Tensor, output_size: Size, spatial_scale: float = 1.0) -> Tensor:
    """Max RoI pooling of boxes on a batch of feature maps (Fast R-CNN).

    Args:
        input: ``(N, C, H, W)`` float feature maps.
        rois: ``(K, 5)`` float, ``batch_idx, x1, y1, x2, y2`` in image coordinates (``x2``,
            ``y2`` inclusive); ``K`` may be 0.
        output_size: ``(PH, PW)``, or one int for both.
        spatial_scale: Factor from box to ``input`` coordinates (e.g. 1/16).

    Returns:
        ``(K, C, PH, PW)`` in ``input``'s dtype, differentiable in ``input``; ``rois`` get
        no gradient.

    Raises:
        TypeError: ``input``, ``rois`` or ``output_size`` of a wrong type.
        ValueError: A wrong shape, device, or batch index (on CPU).
    """
    out_size = size_pair("roi_pool", output_size)
    check_roi_inputs("roi_pool", input, rois)
    n, c, h, w = input.shape
    # Bin edges in float32 (float64 for float64 input): half rois would round them.
    boxes = rois.detach().to(float_compute_dtype(input.dtype))
    best = _argmax_pixels(input.detach(), boxes, out_size, float(spatial_scale))
    channel = torch.arange(c, device=input.device)
    planes = (boxes[:, 0].long()[:, None, None, None] * c + channel) * (h * w)
    out = input.reshape(-1)[planes + best.clamp(min=0)]
    out = torch.where(best >= 0, out, torch.zeros_like(out))
    return out.permute(0, 3, 1, 2)


class RoIPool(nn.Module):
    """:func:`roi_pool` as a module (mmcv's ``RoIPool``).

    Args:
        output_size: ``(PH, PW)``, or one int.
        spatial_scale: Factor from box to feature coordinates.
    """

    def __init__(self, output_size: Size, spatial_scale: float = 1.0) -> None:
        super().__init__()
        self.output_size = size_pair("RoIPool", output_size)
        self.spatial_scale = float(spatial_scale)

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        """``(N, C, H, W)`` maps, ``(K, 5)`` rois -> ``(K, C, PH, PW)``."""
        return roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, "
            f"spatial_scale={self.spatial_scale})"
        )
