"""Point samplers: mmcv 1.7.2's ``mmcv.ops.points_sampler`` in plain torch.

``PointsSampler`` (PointNet++ SA-MSG, 3DSSD) samples ``num_point[i]`` points with the
``i``-th mode from consecutive ranges of the points: range ``i`` runs from the previous
range's end (0 first) to ``fps_sample_range_list[i]`` (``-1``: to the last point), and the
indices it samples are offset by its start and concatenated. The modes:

* ``'D-FPS'`` (:class:`DFPSSampler`): furthest point sampling on the coordinates.
* ``'F-FPS'`` (:class:`FFPSSampler`): furthest point sampling on the squared Euclidean
  distances of ``[xyz, features]`` (:func:`calc_square_dist` with ``norm=False``).
* ``'FS'`` (:class:`FSSampler`): both, F-FPS's indices then D-FPS's (``2 * npoint``).

As in mmcv, a ``-1`` that is not the last range makes the next range start at ``-1`` (the
last point). mmcv's ``force_fp32`` casts float16 inputs to float32 when the module's
``fp16_enabled`` is set; here float16 and bfloat16 inputs are always sampled in float32
(mmcv's kernels take float32 only). ``calc_square_dist`` is ``torch.cdist`` as in mmcv, so
its rounding is torch's.

NaN/inf: the sampling functions' rule (see :mod:`.furthest_point_sample`).

Differences from mmcv-full: mismatched list lengths or a range past the points raise
``ArgumentError`` (a ``ValueError`` and the ``AssertionError`` mmcv raises); an unknown mode
raises a ``KeyError`` that is a ``ValueError`` too; everything runs on any device.
"""

from __future__ import annotations

from typing import List, Optional, Type

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.furthest_point_sample import (
    furthest_point_sample,
    furthest_point_sample_with_dist,
)

__all__ = [
    "DFPSSampler",
    "FFPSSampler",
    "FSSampler",
    "PointsSampler",
    "calc_square_dist",
    "get_sampler_cls",
]

_OP = "mmcv.ops.PointsSampler"


class SamplerTypeError(KeyError, ValueError):
    """An unknown sampler mode: mmcv raises ``KeyError``; a ``ValueError`` too."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def calc_square_dist(point_feat_a: Tensor, point_feat_b: Tensor, norm: bool = True) -> Tensor:
    """Pairwise distances of two point sets' feature vectors, as mmcv's.

    Args:
        point_feat_a: ``(B, N, C)`` float.
        point_feat_b: ``(B, M, C)`` float.
        norm: True (mmcv's default): the Euclidean distance divided by ``C`` (not squared,
            as mmcv); False: the squared Euclidean distance.

    Returns:
        ``(B, N, M)`` distances, differentiable.
    """
    dist = torch.cdist(point_feat_a, point_feat_b)
    return dist / point_feat_a.shape[-1] if norm else dist.square()


def get_sampler_cls(sampler_type: str) -> Type[nn.Module]:
    """The sampler class of a mode: ``'D-FPS'``, ``'F-FPS'`` or ``'FS'``.

    Raises:
        SamplerTypeError: an unknown mode (a ``KeyError`` as mmcv's, and a ``ValueError``).
    """
    samplers = {"D-FPS": DFPSSampler, "F-FPS": FFPSSampler, "FS": FSSampler}
    if sampler_type not in samplers:
        raise SamplerTypeError(
            f"{_OP}: sampler_type must be one of {sorted(samplers)}, found {sampler_type!r}"
        )
    return samplers[sampler_type]


def _float32(tensor: Optional[Tensor]) -> Optional[Tensor]:
    if tensor is not None and tensor.dtype in (torch.float16, torch.bfloat16):
        return tensor.float()
    return tensor


class PointsSampler(nn.Module):
    """Samples points by ranges, each with its own mode.

    Args:
        num_point: Points to sample from each range.
        fps_mod_list: Each range's mode: ``'D-FPS'``, ``'F-FPS'`` or ``'FS'``.
        fps_sample_range_list: Each range's end (exclusive); ``-1``: the last point.
    """

    def __init__(
        self,
        num_point: List[int],
        fps_mod_list: List[str] = ["D-FPS"],  # noqa: B006 (mmcv's default)
        fps_sample_range_list: List[int] = [-1],  # noqa: B006 (mmcv's default)
    ) -> None:
        super().__init__()
        if not len(num_point) == len(fps_mod_list) == len(fps_sample_range_list):
            raise ArgumentError(
                f"{_OP}: num_point, fps_mod_list and fps_sample_range_list must have the same "
                f"length, found {len(num_point)}, {len(fps_mod_list)} and "
                f"{len(fps_sample_range_list)}"
            )
        self.num_point = num_point
        self.fps_sample_range_list = fps_sample_range_list
        self.samplers = nn.ModuleList(get_sampler_cls(mod)() for mod in fps_mod_list)
        self.fp16_enabled = False

    def forward(self, points_xyz: Tensor, features: Optional[Tensor]) -> Tensor:
        """Samples every range.

        Args:
            points_xyz: ``(B, N, 3)`` float coordinates.
            features: ``(B, C, N)`` float features, or None (D-FPS only).

        Returns:
            ``(B, total)`` int32 indices into ``N``, ``total`` the sum of ``num_point``
            (twice for ``'FS'``).

        Raises:
            ArgumentError: a range end not below ``N``.
        """
        points_xyz, features = _float32(points_xyz), _float32(features)
        indices, start = [], 0
        for end, sampler, npoint in zip(self.fps_sample_range_list, self.samplers, self.num_point):
            if not end < points_xyz.shape[1]:
                raise ArgumentError(
                    f"{_OP}: fps_sample_range_list entries must be below the number of points "
                    f"{points_xyz.shape[1]}, found {end}"
                )
            stop = None if end == -1 else end
            xyz = points_xyz[:, start:stop]
            feats = None if features is None else features[:, :, start:stop]
            indices.append(sampler(xyz.contiguous(), feats, npoint) + start)
            start = end
        return torch.cat(indices, dim=1)


class DFPSSampler(nn.Module):
    """Furthest point sampling on the coordinates."""

    def forward(self, points: Tensor, features: Optional[Tensor], npoint: int) -> Tensor:
        """``(B, npoint)`` int32 indices of D-FPS on ``points`` ``(B, N, 3)``."""
        return furthest_point_sample(points, npoint)


def _check_features(sampler: str, features: Optional[Tensor]) -> Tensor:
    if features is None:
        raise ArgumentError(f"{_OP}: features must be given to {sampler}, found None")
    return features


class FFPSSampler(nn.Module):
    """Furthest point sampling on the distances of coordinates and features together."""

    def forward(self, points: Tensor, features: Optional[Tensor], npoint: int) -> Tensor:
        """``(B, npoint)`` int32 indices of F-FPS on ``points`` ``(B, N, 3)`` and
        ``features`` ``(B, C, N)``."""
        features = _check_features("FFPSSampler", features)
        joint = torch.cat([points, features.transpose(1, 2)], dim=2)
        return furthest_point_sample_with_dist(calc_square_dist(joint, joint, norm=False), npoint)


class FSSampler(nn.Module):
    """F-FPS and D-FPS, their indices concatenated."""

    def forward(self, points: Tensor, features: Optional[Tensor], npoint: int) -> Tensor:
        """``(B, 2 * npoint)`` int32: F-FPS's indices then D-FPS's."""
        features = _check_features("FSSampler", features)
        ffps = FFPSSampler()(points, features, npoint)
        dfps = DFPSSampler()(points, features, npoint)
        return torch.cat([ffps, dfps], dim=1)
