"""RoI Align: mmcv 1.7.2's ``mmcv.ops.roi_align`` on torchvision's kernel and plain torch.

Each output bin ``(ph, pw)`` of a roi is pooled from a ``gh x gw`` grid of bilinear samples
placed at the centres of the bin's sub-cells: ``gh = sampling_ratio`` when it is positive,
else ``ceil(roi_height / output_height)`` (and likewise ``gw``), per roi. A sample further
than one pixel outside the map (``y < -1``, ``y > H``, and likewise ``x``) reads 0; any other
is clamped into the map. ``aligned=True`` shifts the scaled box by -0.5 pixel; ``False`` is
the legacy mode, where a roi is at least 1 pixel wide and high.

``pool_mode="avg"`` is torchvision's compiled ``roi_align`` kernel, whose arithmetic is
mmcv's (the average over the grid; an empty grid gives 0). On the CPU that kernel keeps a
buffer of every sample of a roi: a roi whose grid exceeds ``2**20`` samples (a box of some
10^7 pixels), or has none (an inverted box, whose negative count the kernel cannot size a
buffer from), is pooled from its samples' list instead
(:func:`~mmpar.compat.ops.roi.roi_sample_pool.average_of_samples`), which lists only the
samples that land near the map, so memory and time stay bounded by the map, whatever the
box. ``pool_mode="max"``, which torchvision lacks, searches the same windows of the grids
for each bin's largest sample (:func:`~mmpar.compat.ops.roi.roi_sample_max.max_of_samples`:
the first of equal ones, each value mmcv's to the bit), the gradient going to that one
sample's four pixels. mmcv's kernels give a bin without samples ``-FLT_MAX`` (CUDA) or
``-10000`` (CPU) in max mode; mmpar gives 0. Off the CPU, boxes are not bounded: the
kernel loops over the whole grid, as mmcv's does.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import (
    ArgumentError,
    float_compute_dtype,
    renamed_kwargs,
    torchvision_ops,
)
from mmpar.compat.ops.roi.roi_inputs import (
    Size,
    check_roi_inputs,
    check_sample_count,
    kernel_rois,
    sampling_ratio_value,
    size_pair,
    spatial_scale_value,
)
from mmpar.compat.ops.roi.roi_sample_max import max_of_samples
from mmpar.compat.ops.roi.roi_sample_pool import average_of_samples
from mmpar.compat.ops.roi.roi_sampling import roi_grids, size_groups

__all__ = ["RoIAlign", "roi_align"]

_POOL_MODES = ("avg", "max")
# Elements of the largest intermediate tensor of roi_align_rotated's chunked search.
_CHUNK_ELEMENTS = 1 << 24
# Samples of one roi above which torchvision's CPU kernel is not used (its buffer holds
# 32 bytes per sample).
_KERNEL_SAMPLES = 1 << 20


def roi_chunks(cells_h: Tensor, cells_w: Tensor, per_cell: int) -> list[tuple[Tensor, int, int]]:
    """:func:`~mmpar.compat.ops.roi.roi_sampling.size_groups` under ``_CHUNK_ELEMENTS`` (the
    chunks of roi_align_rotated, which imports it from here)."""
    return size_groups(cells_h, cells_w, per_cell, _CHUNK_ELEMENTS)


def _pool_mode(op: str, pool_mode: object) -> str:
    if pool_mode not in _POOL_MODES:
        raise ArgumentError(f"mmcv.ops.{op}: pool_mode must be 'avg' or 'max', got {pool_mode!r}")
    return str(pool_mode)


def _average(
    feat: Tensor,
    boxes: Tensor,
    out_size: tuple[int, int],
    scale: float,
    sampling_ratio: int,
    aligned: bool,
) -> Tensor:
    """The average pooling: torchvision's kernel, and on the CPU the sample lists for rois
    whose grid is too large for it."""
    if feat.device.type == "cpu" and boxes.shape[0]:
        *_, grid_h, grid_w = roi_grids(boxes, out_size, scale, sampling_ratio, aligned)
        samples = grid_h * grid_w * (out_size[0] * out_size[1])
        # A grid of no samples (an inverted box, adaptive) has torchvision's CPU kernel
        # size its buffer from a negative count: those rois go to the lists too (zeros).
        large = (samples > _KERNEL_SAMPLES) | (samples == 0)
        if bool(large.any()):
            small = torch.nonzero(~large).flatten()
            large_idx = torch.nonzero(large).flatten()
            parts = [
                _kernel_average(feat, boxes[small], out_size, scale, sampling_ratio, aligned),
                average_of_samples(
                    feat, boxes[large_idx], None, out_size, scale, sampling_ratio, aligned
                ),
            ]
            order = torch.argsort(torch.cat([small, large_idx]))
            return torch.cat(parts)[order]
    return _kernel_average(feat, boxes, out_size, scale, sampling_ratio, aligned)


def _kernel_average(
    feat: Tensor,
    boxes: Tensor,
    out_size: tuple[int, int],
    scale: float,
    sampling_ratio: int,
    aligned: bool,
) -> Tensor:
    torchvision_ops()  # loads torchvision's kernels, or says how to install them
    # The kernel itself: torchvision.ops.roi_align swaps in a Python version under
    # deterministic algorithms on CUDA, which clamps far-outside samples instead of zeroing.
    return torch.ops.torchvision.roi_align(
        feat, boxes, scale, out_size[0], out_size[1], sampling_ratio, aligned
    )


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
        spatial_scale: Factor from box to ``input`` coordinates (e.g. 1/16), positive.
        sampling_ratio: Samples per bin along each axis, ``>= 0``; 0: ``ceil`` of the bin
            size, per roi.
        pool_mode: ``"avg"`` or ``"max"`` over a bin's samples.
        aligned: Shift boxes by -0.5 pixel (``True``), or mmdet's legacy mode, where rois
            are at least 1x1 (``False``).

    Returns:
        ``(K, C, PH, PW)`` in ``input``'s dtype (float16/bfloat16 are computed in float32).
        Differentiable in ``input``; ``rois`` get no gradient.

    Raises:
        TypeError: ``input``, ``rois``, ``output_size``, ``spatial_scale`` or
            ``sampling_ratio`` of a wrong type.
        ValueError: A wrong shape, ``pool_mode`` (also an ``AssertionError``, as mmcv's),
            scale, ratio, device, or batch index or non-finite roi (on the CPU; elsewhere
            such a roi pools zeros).
    """
    out_size = size_pair("roi_align", output_size)
    scale = spatial_scale_value("roi_align", spatial_scale)
    ratio = sampling_ratio_value("roi_align", sampling_ratio)
    _pool_mode("roi_align", pool_mode)
    check_roi_inputs("roi_align", input, rois)
    check_sample_count("roi_align", ratio, rois.shape[0], out_size)
    aligned = bool(aligned)
    dtype = float_compute_dtype(input.dtype)
    feat = input.to(dtype)
    boxes, _ = kernel_rois(rois.detach().to(dtype), input.shape[0], scale)
    if pool_mode == "avg":
        return _average(feat, boxes, out_size, scale, ratio, aligned).to(input.dtype)
    # The search runs without autograd; the output is the bilinear read at the winning
    # sample, so the gradient reaches that sample's four pixels only.
    out = max_of_samples(feat, boxes, out_size, scale, ratio, aligned)
    out = out.reshape(rois.shape[0], *out_size, input.shape[1]).permute(0, 3, 1, 2)
    return out.to(input.dtype).contiguous()


class RoIAlign(nn.Module):
    """:func:`roi_align` as a module (mmcv's ``RoIAlign``).

    Args:
        output_size: ``(PH, PW)``, or one int. Deprecated name: ``out_size``.
        spatial_scale: Factor from box to feature coordinates, positive.
        sampling_ratio: Samples per bin along each axis, ``>= 0``; 0: adaptive. Deprecated name:
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
        self.pool_mode = _pool_mode("RoIAlign", pool_mode)
        self.output_size = size_pair("RoIAlign", output_size)
        self.spatial_scale = spatial_scale_value("RoIAlign", spatial_scale)
        self.sampling_ratio = sampling_ratio_value("RoIAlign", sampling_ratio)
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
