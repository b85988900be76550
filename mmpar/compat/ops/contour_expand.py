"""PSENet's scale expansion, as mmcv 1.7.2's ``mmcv.ops.contour_expand``, in plain torch.

The seeds are the pixels of ``internal_kernel_label`` whose label (> 0) covers at least
``min_kernel_area`` pixels; smaller labels are dropped (0 in the result). mmcv's kernel
then runs one FIFO-queue expansion per level, from ``kernel_mask.shape[0] - 2`` down to 0.
Each level is meant to read its own kernel ``kernel_mask[level]``, but mmcv's compiled
kernel computes every level's offset as 0 (its ``kernel_step`` stays zero), so every level
reads ``kernel_mask[0]``, the largest kernel (the text mask, in mmocr). The first level
then fills all of ``kernel_mask[0]`` that the seeds reach and the later ones add nothing.
mmpar reproduces that result exactly: with two or more kernels, one breadth-first
expansion inside ``kernel_mask[0]``, from the seeds in row-major order, each popped pixel
``(y, x)`` visiting ``(y - 1, x)``, ``(y + 1, x)``, ``(y, x - 1)``, ``(y, x + 1)`` in that
order; a pixel that several pixels of one level reach takes the first one's label (see
:mod:`~mmpar.compat.ops.regions.region_growing`). With fewer than two kernels the seeds are the
result.

Differences from mmcv-full: inputs may be on any device and of any bool or integer
dtype (mmcv-full takes CPU uint8 masks and int32 labels), and a label outside
``[0, kernel_num]``, which mmcv-full's kernel counts out of bounds, is a ``ValueError``.
"""

from __future__ import annotations

import numbers
from typing import List, Union

import numpy as np
import torch
from torch import Tensor

from mmpar.compat.ops.regions.region_growing import as_tensor, grow_regions

__all__ = ["contour_expand"]

ArrayLike = Union[np.ndarray, Tensor]

# (dy, dx): mmcv's kernel visits up, down, left, right.
_DIRECTIONS = ((-1, 0), (1, 0), (0, -1), (0, 1))


def _check(kernel_mask: Tensor, label: Tensor, min_kernel_area: object, kernel_num: object) -> None:
    for name, value in (("min_kernel_area", min_kernel_area), ("kernel_num", kernel_num)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(
                f"mmcv.ops.contour_expand: {name} must be an int, got {type(value).__name__}"
            )
    for name, tensor in (("kernel_mask", kernel_mask), ("internal_kernel_label", label)):
        if tensor.is_floating_point() or tensor.is_complex():
            raise TypeError(
                f"mmcv.ops.contour_expand: {name} must be a bool or integer tensor, "
                f"got {tensor.dtype}"
            )
    if kernel_mask.dim() != 3:
        raise ValueError(
            "mmcv.ops.contour_expand: kernel_mask must have shape (K, H, W), "
            f"got {tuple(kernel_mask.shape)}"
        )
    if label.dim() != 2 or label.shape != kernel_mask.shape[1:]:
        raise ValueError(
            "mmcv.ops.contour_expand: internal_kernel_label must have shape (H, W) = "
            f"{tuple(kernel_mask.shape[1:])} as kernel_mask, got {tuple(label.shape)}"
        )
    if label.device != kernel_mask.device:
        raise ValueError(
            "mmcv.ops.contour_expand: internal_kernel_label must be on kernel_mask's device "
            f"{kernel_mask.device}, got {label.device}"
        )


def contour_expand(
    kernel_mask: ArrayLike,
    internal_kernel_label: ArrayLike,
    min_kernel_area: int,
    kernel_num: int,
) -> List[List[int]]:
    """Expand the kernel labels over the text pixels (PSENet's post-processing).

    Args:
        kernel_mask: ``(K, H, W)`` bool or integer (nonzero: inside), the kernels from
            largest to smallest; mmcv's expansion reads only ``kernel_mask[0]``.
        internal_kernel_label: ``(H, W)`` integer, the labels of the smallest kernel's
            connected components, 0 for background, at most ``kernel_num``.
        min_kernel_area: Labels covering fewer pixels are dropped.
        kernel_num: The number of labels, background included (as
            ``cv2.connectedComponents`` counts them).

    Returns:
        The ``H`` rows of ``W`` Python ints: each pixel's label, 0 for none.

    Raises:
        TypeError: An argument of a wrong type or dtype.
        ValueError: Shapes that disagree, tensors on two devices, or a label outside
            ``[0, kernel_num]``.
    """
    masks = as_tensor("contour_expand", "kernel_mask", kernel_mask)
    label = as_tensor("contour_expand", "internal_kernel_label", internal_kernel_label)
    _check(masks, label, min_kernel_area, kernel_num)
    label = label.long()
    if label.numel() and (int(label.min()) < 0 or int(label.max()) > int(kernel_num)):
        raise ValueError(
            "mmcv.ops.contour_expand: internal_kernel_label must lie in [0, kernel_num = "
            f"{int(kernel_num)}], got {int(label.min())}..{int(label.max())}"
        )
    # Labels are checked to be <= kernel_num: no minlength, which a huge kernel_num would allocate.
    area = torch.bincount(label.flatten())
    seeded = torch.where((label > 0) & (area[label] >= int(min_kernel_area)), label, 0)
    if masks.shape[0] >= 2:
        seeds = torch.nonzero(seeded.flatten()).squeeze(1)
        seeded = grow_regions(seeded, seeds, masks[0] != 0, _DIRECTIONS)
    return seeded.tolist()
