"""Rotated feature alignment (R3Det, S2ANet): mmcv 1.7.2's ``mmcv.ops.rotated_feature_align``.

Each pixel ``(n, h, w)`` of the features has a refined rotated box ``b`` (row
``(n * H + h) * W + w`` of ``best_rbboxes``). Its output is the pixel's own value plus the
bilinear reads (RoIAlign's rule: 0 more than one pixel off the map, clamped onto it
otherwise) of the same channel of image ``n`` at ``points`` places: the box centre, and with
``points=5`` also its four corners. As mmcv's kernel reads it, the centre lies at row
``b[0] * s`` and column ``b[1] * s`` (``s = spatial_scale``), and with ``a = b[4]``,
``wx, wy = cos a * b[2] * s / 2, sin a * b[2] * s / 2`` and
``hx, hy = -sin a * b[3] * s / 2, cos a * b[3] * s / 2`` the corners are the centre (as
``(x, y)``) plus ``(wx + hx, wy + hy)``, ``(-wx + hx, -wy + hy)``, ``(-wx - hx, -wy - hy)``
and ``(wx - hx, wy - hy)``.

The reads are ``embedding_bag`` sums over the pixel table of :mod:`roi_align_rotated`;
the gradient is mmcv's: the output's gradient to the pixel itself and, weighted, to the
four pixels of every read. The boxes get no gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmpar.compat.ops.backend import check_float, float_compute_dtype
from mmpar.compat.ops.roi.roi_inputs import spatial_scale_value
from mmpar.compat.ops.roi.rotated_grid import bilinear_entries, pixel_table, read_rows

__all__ = ["rotated_feature_align"]

_OP = "mmcv.ops.rotated_feature_align"


def _check(features: Tensor, best_rbboxes: Tensor, points: object) -> None:
    if not isinstance(features, Tensor) or not isinstance(best_rbboxes, Tensor):
        found = type(best_rbboxes if isinstance(features, Tensor) else features).__name__
        raise TypeError(f"{_OP}: features and best_rbboxes must be tensors, got {found}")
    check_float("rotated_feature_align", features=features, best_rbboxes=best_rbboxes)
    if features.dim() != 4:
        raise ValueError(
            f"{_OP}: features must have shape (N, C, H, W), got {tuple(features.shape)}"
        )
    n, _, h, w = features.shape
    if best_rbboxes.shape[-1:] != (5,) or best_rbboxes.numel() != n * h * w * 5:
        raise ValueError(
            f"{_OP}: best_rbboxes must hold one (5,) box per pixel, (N, H, W, 5) or "
            f"(N * H * W, 5) = {(n, h, w, 5)}, got {tuple(best_rbboxes.shape)}"
        )
    if best_rbboxes.device != features.device:
        raise ValueError(
            f"{_OP}: best_rbboxes must be on features' device {features.device}, "
            f"got {best_rbboxes.device}"
        )
    if points not in (1, 5) or isinstance(points, bool):
        raise ValueError(f"{_OP}: points must be 1 or 5, got {points!r}")


def rotated_feature_align(
    features: Tensor,
    best_rbboxes: Tensor,
    spatial_scale: float = 1 / 8,
    points: int = 1,
) -> Tensor:
    """Add to each pixel the features read at its refined rotated box.

    Args:
        features: ``(N, C, H, W)`` float features.
        best_rbboxes: One box per pixel, ``(N, H, W, 5)`` or any shape ``(..., 5)`` of
            ``N * H * W`` boxes in ``(n, h, w)`` order (mmrotate passes ``(N * H * W, 5)``);
            fields as the module docstring reads them.
        spatial_scale: Factor from box to feature coordinates, positive and finite.
        points: 1 (the centre) or 5 (the centre and the four corners).

    Returns:
        ``(N, C, H, W)`` in ``features``' dtype (float16/bfloat16 are computed in float32),
        differentiable in ``features``.

    Raises:
        TypeError: Inputs not floating-point tensors, a ``spatial_scale`` not a number.
        ValueError: Wrong shapes, devices, or ``points``, a ``spatial_scale`` not positive
            and finite.
    """
    _check(features, best_rbboxes, points)
    spatial_scale = spatial_scale_value("rotated_feature_align", spatial_scale)
    if features.numel() == 0:
        # Nothing to read; torch's multithreaded embedding_bag fails on a 0-wide table.
        return features.clone()
    n, c, h, w = features.shape
    dtype = float_compute_dtype(features.dtype)
    feat = features.to(dtype)
    boxes = best_rbboxes.detach().to(dtype).reshape(n * h * w, 5)
    y, x = boxes[:, 0] * spatial_scale, boxes[:, 1] * spatial_scale
    ys, xs = [y], [x]
    if points == 5:
        cos, sin = torch.cos(boxes[:, 4]), torch.sin(boxes[:, 4])
        half_w = boxes[:, 2] * spatial_scale / 2
        half_h = boxes[:, 3] * spatial_scale / 2
        wx, wy, hx, hy = cos * half_w, sin * half_w, -sin * half_h, cos * half_h
        for sign_w, sign_h in ((1, 1), (-1, 1), (-1, -1), (1, -1)):
            xs.append(x + sign_w * wx + sign_h * hx)
            ys.append(y + sign_w * wy + sign_h * hy)
    image = torch.arange(n, device=feat.device).repeat_interleave(h * w)[:, None]
    rows, weights = bilinear_entries(torch.stack(ys, 1), torch.stack(xs, 1), image, h, w)
    table = pixel_table(feat)
    reads = read_rows(table, rows.flatten(1), weights.flatten(1))  # (N * H * W, C)
    out = feat + reads.view(n, h, w, c).permute(0, 3, 1, 2)
    return out.to(features.dtype)
