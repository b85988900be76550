"""What the RoI ops (roi_align, roi_pool, deform_roi_pool, ...) check at their boundary.

Each check raises a one-line ``TypeError`` or ``ValueError`` naming the op (as
``mmcv.ops.<name>``), the parameter, what was expected and what was found. Where mmcv
asserts (the rois' shape, for one), the error is an :class:`ArgumentError`, also an
``AssertionError``. Values inside tensors (batch indices, NaN) are checked on the CPU
only, where it costs no device sync; on other devices :func:`kernel_rois` gives such rois
a defined result instead (zeros) rather than letting a kernel read out of bounds.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence, Union

import torch
from torch import Tensor

from mmpar.compat.ops.backend import ArgumentError

__all__ = [
    "Size",
    "check_roi_inputs",
    "empty_bad_rois",
    "finite_number",
    "kernel_rois",
    "MOST_SAMPLES",
    "check_sample_count",
    "sampling_ratio_value",
    "size_pair",
    "spatial_scale_value",
]

Size = Union[int, Sequence[int]]


def size_pair(op: str, value: Size, param: str = "output_size") -> tuple[int, int]:
    """``(h, w)`` from an int or a pair of positive ints (mmcv's ``output_size``; errors name
    ``param``)."""
    if isinstance(value, bool):
        pair: tuple[Any, ...] = ()
    elif isinstance(value, numbers.Integral):
        pair = (int(value), int(value))
    else:
        try:
            pair = tuple(value)
        except TypeError:
            pair = ()
    if len(pair) != 2 or not all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in pair
    ):
        raise TypeError(f"mmcv.ops.{op}: {param} must be an int or (h, w) ints, got {value!r}")
    if min(pair) <= 0:
        raise ValueError(f"mmcv.ops.{op}: {param} must be positive, got {value!r}")
    return int(pair[0]), int(pair[1])


def finite_number(op: str, param: str, value: Any) -> float:
    """``value`` as a float; ``TypeError`` unless a real number, ``ValueError`` if NaN or
    infinite."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, Tensor)):
        raise TypeError(f"mmcv.ops.{op}: {param} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"mmcv.ops.{op}: {param} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"mmcv.ops.{op}: {param} must be finite, got {number}")
    return number


def spatial_scale_value(op: str, value: Any) -> float:
    """``spatial_scale`` as a float: a positive finite number (a scale of 0 or below maps
    every box onto or past the origin, and pooled zeros)."""
    scale = finite_number(op, "spatial_scale", value)
    if scale <= 0:
        raise ValueError(f"mmcv.ops.{op}: spatial_scale must be positive, got {value!r}")
    return scale


#: The most samples a fixed ``sampling_ratio`` may ask of one call (rois x bins x ratio**2).
MOST_SAMPLES = 1 << 30


def check_sample_count(
    op: str, ratio: int, rois: int, output_size: tuple[int, int], param: str = "sampling_ratio"
) -> None:
    """Raises where a fixed ``ratio`` asks for more than :data:`MOST_SAMPLES` samples.

    An adaptive grid (``ratio`` 0) is bounded by the rois' sizes and the map; a fixed
    one costs ``ratio ** 2`` samples a bin, whatever the roi: mmcv's kernels would loop
    for hours or days on a typo such as ``sampling_ratio=10**6``.

    Raises:
        ValueError: ``rois * PH * PW * ratio ** 2`` is above :data:`MOST_SAMPLES`.
    """
    count = rois * output_size[0] * output_size[1] * ratio * ratio
    if count > MOST_SAMPLES:
        raise ValueError(
            f"mmcv.ops.{op}: {param}={ratio} asks for {count:.3g} samples ({rois} rois x "
            f"{output_size[0]} x {output_size[1]} bins x {ratio}**2), more than {MOST_SAMPLES} "
            "(2**30); use a small ratio, or 0 for the adaptive grid"
        )


def sampling_ratio_value(
    op: str, value: Any, param: str = "sampling_ratio", negative_is_adaptive: bool = False
) -> int:
    """``sampling_ratio`` (errors name ``param``) as an int ``>= 0`` (0: adaptive). A float
    with an integral value passes, as mmcv's ``int()`` takes it; 2.5 does not (mmcv would
    drop the half). With ``negative_is_adaptive`` a negative int is 0 (the rotated ops'
    kernels read any ratio ``<= 0`` as adaptive)."""
    expected = "an int (<= 0: adaptive)" if negative_is_adaptive else "an int >= 0"
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, Tensor)):
        raise TypeError(f"mmcv.ops.{op}: {param} must be {expected}, got {value!r}")
    try:
        ratio = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"mmcv.ops.{op}: {param} must be {expected}, got {value!r}") from None
    if not math.isfinite(ratio) or ratio != int(ratio):
        raise TypeError(f"mmcv.ops.{op}: {param} must be {expected}, got {value!r}")
    if ratio < 0 and negative_is_adaptive:
        return 0
    if ratio < 0:
        raise ValueError(f"mmcv.ops.{op}: {param} must be >= 0 (0: adaptive), got {value!r}")
    return int(ratio)


def check_roi_inputs(
    op: str, input: Any, rois: Any, fields: str = "batch_idx, x1, y1, x2, y2"
) -> None:
    """Raise ``TypeError``/``ValueError`` unless ``input`` is (N, C, H, W) float and ``rois``
    is (K, F) on the same device, finite, with batch indices in ``[0, N)`` (values checked
    on the CPU only: see :func:`kernel_rois`). ``fields`` names the F columns,
    comma-separated, the batch index first."""
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
        raise ArgumentError(
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


def kernel_rois(rois: Tensor, batch_size: int, scale: float) -> tuple[Tensor, Tensor | None]:
    """``(K, 5)`` rois as a kernel may read them, and which were replaced.

    On the CPU :func:`check_roi_inputs` has refused bad rois: they come back as they are,
    with None. Elsewhere, without a device sync, :func:`empty_bad_rois`.

    Returns:
        ``(rois, replaced)``: the rois, and ``(K,)`` bool (None on the CPU).
    """
    if rois.device.type == "cpu" or rois.shape[0] == 0:
        return rois, None
    return empty_bad_rois(rois, batch_size, scale)


def empty_bad_rois(rois: Tensor, batch_size: int, scale: float) -> tuple[Tensor, Tensor]:
    """Each roi whose batch index is outside ``[0, N)`` (after truncation, as mmcv's
    kernels read it) or that holds NaN or inf, replaced by an inverted box on image 0,
    four pixels outside the map, which every roi op pools to zeros (mmcv's kernels read
    out of bounds). Computed on the rois' device, with no sync.

    Returns:
        ``(rois, replaced)``: ``(K, 5)`` and ``(K,)`` bool.
    """
    batch = rois[:, 0]
    bad = ~torch.isfinite(rois).all(1) | (batch <= -1) | (batch >= batch_size)
    far = -4.0 / scale
    empty = rois.new_tensor([0.0, far, far, far - 1.0 / scale - 1.0, far - 1.0 / scale - 1.0])
    return torch.where(bad[:, None], empty, rois), bad
