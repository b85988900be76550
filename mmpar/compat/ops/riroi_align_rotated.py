"""Rotation-invariant RoI Align (ReDet): mmcv 1.7.2's ``mmcv.ops.riroi_align_rotated``.

The ``C * O`` channels of the input are ``C`` groups of ``O = num_orientations`` orientation
channels (channel ``c * O + o``). Every channel is pooled as :mod:`roi_align_rotated` pools
it in its legacy mode (``aligned=False``: no half-pixel shift, rois at least 1 x 1; adaptive
grids when ``num_samples <= 0``). Then the orientation channels of each roi are turned back
by its angle: with ``f = angle * O / (2 pi)`` (the angle before ``clockwise`` negates it),
``i = floor(f)`` and ``l = f - i``, output channel ``c * O + o`` is
``(1 - l) * pooled[c * O + (o - i) % O] + l * pooled[c * O + (o - i + 1) % O]``. (So, as
in mmcv's kernel, the mix jumps by two orientations where the angle crosses a step of
``2 pi / O``: just below step ``i`` it is nearly ``o - i + 2``, at it ``o - i``.)

mmcv-full has this op on CUDA only; here it also runs on CPU. Its gradient is mmcv's. Off
the CPU, a roi whose batch index is outside ``[0, N)`` or that holds NaN or inf gives
zeros (on the CPU it is refused), as in :mod:`roi_align_rotated`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import check_int, float_compute_dtype
from mmpar.compat.ops.roi.roi_inputs import (
    check_sample_count,
    sampling_ratio_value,
    spatial_scale_value,
)
from mmpar.compat.ops.roi_align import Size, size_pair
from mmpar.compat.ops.roi_align_rotated import check_rotated_rois, rotated_roi_average

__all__ = ["RiRoIAlignRotated", "riroi_align_rotated", "rotation_invariant_pool"]


def _check_orientations(op: str, num_orientations: Any, channels: int) -> int:
    if isinstance(num_orientations, bool) or not isinstance(num_orientations, int):
        raise TypeError(f"mmcv.ops.{op}: num_orientations must be an int, got {num_orientations!r}")
    if num_orientations <= 0 or channels % num_orientations:
        raise ValueError(
            f"mmcv.ops.{op}: num_orientations must be positive and divide the {channels} "
            f"input channels, got {num_orientations}"
        )
    return num_orientations


def riroi_align_rotated(
    features: Tensor,
    rois: Tensor,
    out_size: Size,
    spatial_scale: float,
    num_samples: int = 0,
    num_orientations: int = 8,
    clockwise: bool = False,
) -> Tensor:
    """Rotation-invariant RoI Align of rotated boxes (see the module docstring).

    Args:
        features: ``(N, C * O, H, W)`` float maps, ``O = num_orientations`` channels per group.
        rois: ``(K, 6)``, ``batch_idx, cx, cy, w, h, angle`` (radians) in image
            coordinates; ``K`` may be 0.
        out_size: ``(PH, PW)``, or one int for both.
        spatial_scale: Factor from roi to ``features`` coordinates.
        num_samples: Samples per bin along each axis; ``<= 0``: ``ceil`` of the bin size.
        num_orientations: ``O``.
        clockwise: The angle turns clockwise in the image (the sampling grid turns the other
            way; the orientation channels turn as without it, as in mmcv).

    Returns:
        ``(K, C * O, PH, PW)`` in ``features``' dtype (float16/bfloat16 are computed in
        float32). Differentiable in ``features``; ``rois`` get no gradient.

    Raises:
        TypeError: ``features``, ``rois``, ``out_size``, ``spatial_scale``,
            ``num_samples`` or ``num_orientations`` of a wrong type.
        ValueError: A wrong shape or device, a ``spatial_scale`` not positive and finite,
            ``num_orientations`` not dividing the channels;
            on CPU, a batch index out of range or a non-finite roi (elsewhere such a roi
            gives zeros: :func:`rotation_invariant_pool`).
    """
    size = size_pair("riroi_align_rotated", out_size, "out_size")
    scale = spatial_scale_value("riroi_align_rotated", spatial_scale)
    samples = sampling_ratio_value(
        "riroi_align_rotated", num_samples, "num_samples", negative_is_adaptive=True
    )
    check_rotated_rois("riroi_align_rotated", features, rois, aligned=False)
    check_sample_count("riroi_align_rotated", samples, rois.shape[0], size, "num_samples")
    orients = _check_orientations("riroi_align_rotated", num_orientations, features.shape[1])
    return rotation_invariant_pool(features, rois, size, scale, samples, orients, bool(clockwise))


def rotation_invariant_pool(
    features: Tensor,
    rois: Tensor,
    size: tuple[int, int],
    spatial_scale: float,
    num_samples: int,
    orients: int,
    clockwise: bool,
) -> Tensor:
    """:func:`riroi_align_rotated` on checked arguments, the rois' values unchecked: a roi
    whose batch index is outside ``[0, N)`` or that holds NaN or inf gives zeros (as
    :func:`~mmpar.compat.ops.roi_align_rotated.rotated_roi_average`), on every device.

    Returns:
        ``(K, C * O, PH, PW)`` in ``features``' dtype.
    """
    dtype = float_compute_dtype(features.dtype)
    boxes = rois.detach().to(dtype)
    pooled = rotated_roi_average(
        features.to(dtype), boxes, size, spatial_scale, num_samples, False, clockwise
    )
    k, channels, ph, pw = pooled.shape
    pooled = pooled.view(k, channels // orients, orients, ph, pw)
    turn = boxes[:, 5] * orients / (2 * math.pi)
    first = torch.floor(turn)
    # An infinite or NaN angle (a roi pooled to zeros) mixes with weight 0, not NaN.
    frac = (turn - first).nan_to_num(0.0, 0.0, 0.0)[:, None, None, None, None]
    shift = first.nan_to_num(0.0, 0.0, 0.0).long()  # NaN angles (CUDA) never index
    source = (torch.arange(orients, device=boxes.device) - shift[:, None]).remainder(orients)
    index = source[:, None, :, None, None].expand_as(pooled)
    out = (1 - frac) * pooled.gather(2, index) + frac * pooled.gather(
        2, (index + 1).remainder(orients)
    )
    return out.reshape(k, channels, ph, pw).to(features.dtype)


class RiRoIAlignRotated(nn.Module):
    """:func:`riroi_align_rotated` as a module (mmcv's ``RiRoIAlignRotated``).

    Args:
        out_size: ``(PH, PW)``, or one int; kept as given (mmrotate pairs it itself).
        spatial_scale: Factor from roi to feature coordinates.
        num_samples: Samples per bin along each axis; 0: adaptive.
        num_orientations: Orientation channels per group.
        clockwise: The angle turns clockwise in the image.
    """

    def __init__(
        self,
        out_size: Size,
        spatial_scale: float,
        num_samples: int = 0,
        num_orientations: int = 8,
        clockwise: bool = False,
    ) -> None:
        super().__init__()
        op = "RiRoIAlignRotated"
        size_pair(op, out_size, "out_size")
        self.out_size = out_size
        self.spatial_scale = spatial_scale_value(op, spatial_scale)
        self.num_samples = sampling_ratio_value(
            op, num_samples, "num_samples", negative_is_adaptive=True
        )
        self.num_orientations = check_int(f"mmcv.ops.{op}", "num_orientations", num_orientations, 1)
        self.clockwise = clockwise

    def forward(self, features: Tensor, rois: Tensor) -> Tensor:
        """``(N, C * O, H, W)`` maps, ``(K, 6)`` rois -> ``(K, C * O, PH, PW)``."""
        return riroi_align_rotated(
            features,
            rois,
            self.out_size,
            self.spatial_scale,
            self.num_samples,
            self.num_orientations,
            self.clockwise,
        )
