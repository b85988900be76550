"""RoI Pool: mmcv 1.7.2's ``mmcv.ops.roi_pool`` on torchvision's ``roi_pool`` kernel.

mmcv's kernel (CUDA only in mmcv) does not round the roi: the box spans
``[x1 * s, (x2 + 1) * s)`` (``s = spatial_scale``) in continuous feature coordinates,
bin ``pw`` spans pixels ``floor(x1 * s + pw * bin_w)`` up to ``ceil(x1 * s + (pw + 1) *
bin_w)`` (exclusive, clipped to the map) and likewise for rows, and each bin is the max
of its pixels; an empty bin, or a roi with no width or height, gives 0. torchvision's
``roi_pool`` rounds the box to whole pixels first, which changes the bins whenever
``x * s`` is not an integer. So mmcv's bin edges are worked out here, and each bin goes to
torchvision's kernel as a box of its own with a 1 x 1 output: a box of whole pixels
``[x0, x1 - 1]`` at scale 1 is exactly the pixels ``x0 .. x1 - 1`` there, rounding nothing.
The kernel's max and its gradient are mmcv's: the first largest pixel in row-major order
(a NaN never wins), the gradient to that pixel only.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import float_compute_dtype, torchvision_ops
from mmpar.compat.ops.roi.roi_inputs import (
    Size,
    check_roi_inputs,
    kernel_rois,
    size_pair,
    spatial_scale_value,
)

__all__ = ["RoIPool", "roi_pool"]


def _bin_boxes(
    rois: Tensor, out_size: tuple[int, int], scale: float, height: int, width: int
) -> Tensor:
    """``(K * PH * PW, 5)`` one box per bin, mmcv's bin edges as whole-pixel boxes; an
    empty bin becomes a box at the map's far corner, which torchvision pools to 0."""
    x1, y1 = rois[:, 1] * scale, rois[:, 2] * scale
    x2, y2 = (rois[:, 3] + 1) * scale, (rois[:, 4] + 1) * scale
    roi_w, roi_h = x2 - x1, y2 - y1
    bin_w, bin_h = roi_w / out_size[1], roi_h / out_size[0]
    ph = torch.arange(out_size[0], device=rois.device, dtype=rois.dtype)[None, :]
    pw = torch.arange(out_size[1], device=rois.device, dtype=rois.dtype)[None, :]

    def span(index: Tensor, size: Tensor, start: Tensor, limit: int) -> tuple[Tensor, Tensor]:
        low = torch.floor(index * size[:, None] + start[:, None])
        high = torch.ceil((index + 1) * size[:, None] + start[:, None])
        return low.clamp(0, limit), high.clamp(0, limit)  # clamped before any cast

    top, bottom = span(ph, bin_h, y1, height)  # (K, PH)
    left, right = span(pw, bin_w, x1, width)  # (K, PW)
    shape = (rois.shape[0], out_size[0], out_size[1])
    top, bottom = top[:, :, None].expand(shape), bottom[:, :, None].expand(shape)
    left, right = left[:, None, :].expand(shape), right[:, None, :].expand(shape)
    valid = ((roi_w > 0) & (roi_h > 0))[:, None, None] & (bottom > top) & (right > left)
    boxes = torch.stack(
        [
            rois[:, 0, None, None].expand(shape),
            torch.where(valid, left, width),
            torch.where(valid, top, height),
            torch.where(valid, right - 1, width),
            torch.where(valid, bottom - 1, height),
        ],
        dim=-1,
    )
    return boxes.reshape(-1, 5)


def roi_pool(input: Tensor, rois: Tensor, output_size: Size, spatial_scale: float = 1.0) -> Tensor:
    """Max RoI pooling of boxes on a batch of feature maps (Fast R-CNN).

    Args:
        input: ``(N, C, H, W)`` float feature maps.
        rois: ``(K, 5)`` float, ``batch_idx, x1, y1, x2, y2`` in image coordinates (``x2``,
            ``y2`` inclusive); ``K`` may be 0.
        output_size: ``(PH, PW)``, or one int for both.
        spatial_scale: Factor from box to ``input`` coordinates (e.g. 1/16), positive.

    Returns:
        ``(K, C, PH, PW)`` in ``input``'s dtype, differentiable in ``input``; ``rois`` get
        no gradient.

    Raises:
        TypeError: ``input``, ``rois``, ``output_size`` or ``spatial_scale`` of a wrong type.
        ValueError: A wrong shape, device, scale, or batch index (on CPU; elsewhere such a
            roi pools zeros).
    """
    out_size = size_pair("roi_pool", output_size)
    scale = spatial_scale_value("roi_pool", spatial_scale)
    check_roi_inputs("roi_pool", input, rois)
    n, c, h, w = input.shape
    if rois.shape[0] == 0:
        return input[:0].reshape(0, c, 1, 1).expand(0, c, *out_size)
    ops = torchvision_ops()
    # Bin edges in float32 (float64 for float64 input): half rois would round them.
    dtype = float_compute_dtype(input.dtype)
    boxes, _ = kernel_rois(rois.detach().to(dtype), n, scale)
    bins = _bin_boxes(boxes, out_size, scale, h, w)
    # The kernel only selects values: computing half inputs in float32 changes nothing.
    out = ops.roi_pool(input.to(dtype), bins, (1, 1), 1.0)  # (K * PH * PW, C, 1, 1)
    out = out.reshape(rois.shape[0], out_size[0], out_size[1], c).permute(0, 3, 1, 2)
    return out.contiguous().to(input.dtype)


class RoIPool(nn.Module):
    """:func:`roi_pool` as a module (mmcv's ``RoIPool``).

    Args:
        output_size: ``(PH, PW)``, or one int.
        spatial_scale: Factor from box to feature coordinates, positive.
    """

    def __init__(self, output_size: Size, spatial_scale: float = 1.0) -> None:
        super().__init__()
        self.output_size = size_pair("RoIPool", output_size)
        self.spatial_scale = spatial_scale_value("RoIPool", spatial_scale)

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        """``(N, C, H, W)`` maps, ``(K, 5)`` rois -> ``(K, C, PH, PW)``."""
        return roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, "
            f"spatial_scale={self.spatial_scale})"
        )
