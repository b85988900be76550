"""PANet's pixel aggregation, as mmcv 1.7.2's ``mmcv.ops.pixel_group``, in plain torch.

Each kernel (the pixels of one positive ``kernel_label``) has a mean embedding. Starting
from the kernels' contour pixels (``kernel_contour`` nonzero, row-major order), labels
grow breadth-first, as mmcv's FIFO queue grows them: a popped pixel ``(y, x)`` visits
``(y, x - 1)``, ``(y, x + 1)``, ``(y - 1, x)``, ``(y + 1, x)`` in that order and labels each
that is in ``mask``, still unlabelled, and whose embedding lies closer than
``distance_threshold`` to the popped pixel's kernel's mean; a pixel that several pixels
of one level reach takes the first one's label (see
:mod:`~mmpar.compat.ops.regions.region_growing`). Kernel pixels keep their labels, in ``mask``
or not.

The arithmetic is the kernel's, in float32: the kernel means are sums in row-major order
divided by the pixel count, and the squared distance is summed dimension by dimension,
each square taken in float64 and each partial sum rounded to float32; a NaN distance
counts as close, as in mmcv. The sums run on the CPU on every device, so that CUDA
input (mmcv-full runs on the CPU only) gets the same bits. Differences from mmcv-full:
inputs of other dtypes are converted (mmcv-full
takes only float32 scores and embeddings, bool masks, int32 labels and uint8 contours);
and bad inputs raise one-line errors where mmcv-full's kernel reads out of bounds.
"""

from __future__ import annotations

import numbers
from typing import List, Union

import numpy as np
import torch
from torch import Tensor

from mmpar.compat.ops.regions.region_growing import Accept, as_tensor, grow_regions

__all__ = ["pixel_group"]

ArrayLike = Union[np.ndarray, Tensor]

# (dy, dx): mmcv's kernel visits left, right, up, down.
_DIRECTIONS = ((0, -1), (0, 1), (-1, 0), (1, 0))


def _check(
    tensors: dict[str, Tensor], kernel_region_num: object, distance_threshold: object
) -> None:
    if not isinstance(kernel_region_num, numbers.Integral) or isinstance(kernel_region_num, bool):
        raise TypeError(
            "mmcv.ops.pixel_group: kernel_region_num must be an int, "
            f"got {type(kernel_region_num).__name__}"
        )
    if kernel_region_num < 0:
        raise ValueError(
            f"mmcv.ops.pixel_group: kernel_region_num must be >= 0, got {kernel_region_num}"
        )
    if not isinstance(distance_threshold, numbers.Real) or isinstance(distance_threshold, bool):
        raise TypeError(
            "mmcv.ops.pixel_group: distance_threshold must be a float, "
            f"got {type(distance_threshold).__name__}"
        )
    if not distance_threshold >= 0:  # NaN too
        raise ValueError(
            "mmcv.ops.pixel_group: distance_threshold must be a number >= 0, "
            f"got {distance_threshold!r}"
        )
    score = tensors["score"]
    if score.dim() != 2:
        raise ValueError(
            f"mmcv.ops.pixel_group: score must have shape (H, W), got {tuple(score.shape)}"
        )
    size = tuple(score.shape)
    for name, tensor in tensors.items():
        want = size + tensor.shape[2:] if name == "embedding" else size
        if tensor.dim() != (3 if name == "embedding" else 2) or tuple(tensor.shape) != want:
            shape = "(H, W, C)" if name == "embedding" else "(H, W)"
            raise ValueError(
                f"mmcv.ops.pixel_group: {name} must have shape {shape} with score's "
                f"(H, W) = {size}, got {tuple(tensor.shape)}"
            )
        if tensor.device != score.device:
            raise ValueError(
                f"mmcv.ops.pixel_group: {name} must be on score's device {score.device}, "
                f"got {tensor.device}"
            )
        floating = name in ("score", "embedding")
        if tensor.is_complex() or (not floating and tensor.is_floating_point()):
            kind = "a real" if floating else "a bool or integer"
            raise TypeError(
                f"mmcv.ops.pixel_group: {name} must be {kind} tensor, got {tensor.dtype}"
            )


def _squared_distance_below(threshold: float, means: Tensor, embedding: Tensor) -> Accept:
    """The kernel's test ``distance**2 < threshold**2``, in its float32 arithmetic."""
    limit = torch.tensor(threshold, dtype=torch.float32)
    limit = (limit * limit).to(means.device)

    def accept(pixels: Tensor, labels: Tensor) -> Tensor:
        diff = (means[labels] - embedding[pixels]).double().square()
        total = diff.new_zeros(diff.shape[0], dtype=torch.float32)
        for dim in range(diff.shape[1]):
            total = (total.double() + diff[:, dim]).float()
        return ~(total >= limit)  # NaN passes, as in the kernel

    return accept


def pixel_group(
    score: ArrayLike,
    mask: ArrayLike,
    embedding: ArrayLike,
    kernel_label: ArrayLike,
    kernel_contour: ArrayLike,
    kernel_region_num: int,
    distance_threshold: float,
) -> List[List[float]]:
    """Group text pixels into instances around their kernels (PANet's post-processing).

    Args:
        score: ``(H, W)`` float, the text score of each pixel.
        mask: ``(H, W)`` bool (or integer, nonzero), the text pixels that may join a kernel.
        embedding: ``(H, W, C)`` float, each pixel's embedding.
        kernel_label: ``(H, W)`` integer, each pixel's kernel in ``[1, kernel_region_num)``,
            0 outside every kernel.
        kernel_contour: ``(H, W)`` bool or integer, nonzero on the kernels' contours,
            where the growth starts.
        kernel_region_num: The number of labels, background included.
        distance_threshold: Largest embedding distance (exclusive) of a pixel from its
            kernel's mean embedding.

    Returns:
        ``kernel_region_num`` lists, one per label: ``[mean score, pixel count, x0, y0,
        x1, y1, ...]`` over the instance's pixels in row-major order, as Python floats
        (float32 values); ``[0.0, 0.0]`` for label 0 and for an empty label.

    Raises:
        TypeError: An argument of a wrong type or dtype.
        ValueError: Shapes that disagree, tensors on several devices, a label outside
            ``[0, kernel_region_num)``, or a ``distance_threshold`` below 0 or NaN.
    """
    names = ("score", "mask", "embedding", "kernel_label", "kernel_contour")
    values = (score, mask, embedding, kernel_label, kernel_contour)
    tensors = {name: as_tensor("pixel_group", name, v) for name, v in zip(names, values)}
    _check(tensors, kernel_region_num, distance_threshold)
    num = int(kernel_region_num)
    height, width = tensors["score"].shape
    labels = tensors["kernel_label"].long()
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= max(num, 1)):
        raise ValueError(
            f"mmcv.ops.pixel_group: kernel_label must lie in [0, kernel_region_num = {num}), "
            f"got {int(labels.min())}..{int(labels.max())}"
        )
    scores = tensors["score"].float().flatten()
    embed = tensors["embedding"].float().reshape(height * width, tensors["embedding"].shape[2])
    flat = labels.flatten()
    kernel = torch.nonzero(flat > 0).squeeze(1)
    # index_add_ on the CPU adds in index order: the kernel's row-major float32 sums. On a
    # GPU, atomic adds in any order would change their last bits.
    owner = flat[kernel].cpu()
    sums = embed.new_zeros(num, embed.shape[1], device="cpu")
    sums.index_add_(0, owner, embed[kernel].cpu())
    means = (sums / torch.bincount(owner, minlength=num)[:, None].float()).to(embed.device)
    seeds = torch.nonzero((flat > 0) & (tensors["kernel_contour"].flatten() != 0)).squeeze(1)
    grown = grow_regions(
        labels,
        seeds,
        tensors["mask"] != 0,
        _DIRECTIONS,
        _squared_distance_below(float(distance_threshold), means, embed),
    ).flatten()
    return _instances(grown, scores, num, width)


def _instances(grown: Tensor, scores: Tensor, num: int, width: int) -> List[List[float]]:
    """mmcv's ``[mean score, count, x0, y0, ...]`` per label of ``grown`` (flat labels)."""
    grown, scores = grown.cpu(), scores.cpu()  # the CPU's sums, in index order; lists out
    pixels = torch.nonzero(grown > 0).squeeze(1)
    owner = grown[pixels]
    counts = torch.bincount(owner, minlength=num)
    sums = scores.new_zeros(num).index_add_(0, owner, scores[pixels])
    means = torch.where(counts > 0, sums / counts.clamp(min=1).float(), torch.zeros_like(sums))
    ordered = pixels[torch.argsort(owner, stable=True)]
    coords = torch.stack([ordered % width, ordered // width], 1).float().flatten().tolist()
    head = torch.stack([means, counts.float()], 1).tolist()
    out, start = [], 0
    for (mean, count), size in zip(head, counts.tolist()):
        out.append([mean, count] + coords[start : start + 2 * size])
        start += 2 * size
    return out
