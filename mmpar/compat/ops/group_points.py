"""Point grouping: mmcv 1.7.2's ``mmcv.ops.group_points`` in plain torch.

``grouping_operation(features, indices)`` gathers ``out[b, c, p, s] = features[b, c,
indices[b, p, s]]``; its gradient adds each output's gradient into the feature it read
(mmcv's scatter-add). The stacked form (mmcv 1.7.0's ``features_batch_cnt`` and
``indices_batch_cnt``: ``(N1 + N2 + ..., C)`` features, ``(M1 + M2 + ..., nsample)`` indices
into each row's own cloud) gives ``(M1 + M2 + ..., C, nsample)``, 0 where an index is
outside its cloud (stacked ``ball_query`` writes -1 for an empty ball), with no gradient.

``QueryAndGroup`` groups each centre's ball (``ball_query``) or ``k`` nearest points
(``knn``, when ``max_radius`` is None) into ``(B, 3 + C, npoint, sample_num)``: the points'
offsets from the centre (divided by ``max_radius`` with ``normalize_xyz``) and their
features, with mmcv's optional extra outputs. ``GroupAll`` takes the whole cloud as one
group.

NaN/inf: copied like any value. Differences from mmcv-full: inputs need not be contiguous;
int64 indices are taken as well as int32; in the batched form an index outside ``[0, N)``
is a ``ValueError`` (mmcv's kernel reads out of bounds); in the stacked form an index
outside its own cloud gives 0 and no gradient (mmcv's kernel compares it with the end of
the whole stack, so one past its cloud reads a later cloud's point, and -1 reads the point
before its cloud or out of bounds, gradients likewise); ``uniform_sample`` draws its
repeats from the indices' device's generator, all groups at once (see
:func:`mmpar.compat.ops.points.resample.uniform_resample`).
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.ball_query import ball_query
from mmpar.compat.ops.knn import knn
from mmpar.compat.ops.points.checks import (
    check_batch_cnt,
    check_index,
    check_index_range,
    check_points,
)
from mmpar.compat.ops.points.resample import uniform_resample

__all__ = ["GroupAll", "QueryAndGroup", "grouping_operation"]

_OP = "mmcv.ops.grouping_operation"


def _group(features: Tensor, indices: Tensor) -> Tensor:
    check_points(_OP, "features", features, "(B, C, N)")
    check_index(_OP, "indices", indices, "(B, npoint, nsample)", features.device)
    if indices.shape[0] != features.shape[0]:
        raise ValueError(
            f"{_OP}: features and indices must have the same batch size, "
            f"found {features.shape[0]} and {indices.shape[0]}"
        )
    check_index_range(_OP, "indices", indices, features.shape[2])
    b, c = features.shape[0], features.shape[1]
    npoint, nsample = indices.shape[1], indices.shape[2]
    flat = indices.reshape(b, 1, npoint * nsample).expand(b, c, npoint * nsample).long()
    return features.gather(2, flat).view(b, c, npoint, nsample)


def _group_stacked(
    features: Tensor, indices: Tensor, features_batch_cnt: Tensor, indices_batch_cnt: Tensor
) -> Tensor:
    check_points(_OP, "features", features, "(N, C)")
    check_index(_OP, "indices", indices, "(M, nsample)", features.device)
    n, m = features.shape[0], indices.shape[0]
    point_counts = check_batch_cnt(_OP, "features_batch_cnt", features_batch_cnt, n, "features")
    row_counts = check_batch_cnt(_OP, "indices_batch_cnt", indices_batch_cnt, m, "indices")
    if len(point_counts) != len(row_counts):
        raise ValueError(
            f"{_OP}: features_batch_cnt and indices_batch_cnt must count the same clouds, "
            f"found {len(point_counts)} and {len(row_counts)}"
        )
    device = features.device
    sizes = torch.tensor(point_counts, dtype=torch.long, device=device)
    starts = torch.cumsum(sizes, 0) - sizes
    cloud = torch.repeat_interleave(
        torch.arange(len(row_counts), device=device),
        torch.tensor(row_counts, dtype=torch.long, device=device),
        output_size=m,
    )
    local = indices.long()
    inside = (local >= 0) & (local < sizes[cloud, None])
    # Indices outside their cloud read an extra row of zeros, which has no gradient path.
    padded = torch.cat([features, features.new_zeros((1, features.shape[1]))])
    rows = torch.where(inside, local + starts[cloud, None], n)
    return padded[rows].permute(0, 2, 1).contiguous()


def grouping_operation(
    features: Tensor,
    indices: Tensor,
    features_batch_cnt: Optional[Tensor] = None,
    indices_batch_cnt: Optional[Tensor] = None,
) -> Tensor:
    """The features of the points each group indexes.

    Args:
        features: ``(B, C, N)`` float; or ``(N1 + N2 + ..., C)`` stacked.
        indices: ``(B, npoint, nsample)`` int32 (or int64) into ``[0, N)``; or
            ``(M1 + M2 + ..., nsample)`` stacked, each into its own cloud.
        features_batch_cnt: For stacked inputs, ``(B,)`` int32: ``N1, N2, ...``.
        indices_batch_cnt: For stacked inputs, ``(B,)`` int32: ``M1, M2, ...``.

    Returns:
        ``(B, C, npoint, nsample)`` (stacked: ``(M1 + M2 + ..., C, nsample)``) in
        ``features``' dtype, differentiable in ``features``.

    Raises:
        TypeError: Non-float features, non-integer indices, or counts that are not int32.
        ValueError: Wrong shapes, another device, different batch sizes, counts that do
            not add up, only one of the counts, or (batched) an index outside ``[0, N)``.
    """
    if features_batch_cnt is None and indices_batch_cnt is None:
        return _group(features, indices)
    if features_batch_cnt is None or indices_batch_cnt is None:
        raise ValueError(f"{_OP}: features_batch_cnt and indices_batch_cnt must be given together")
    return _group_stacked(features, indices, features_batch_cnt, indices_batch_cnt)


class QueryAndGroup(nn.Module):
    """Groups each centre's ball (or ``k`` nearest points) with its offsets and features.

    Args:
        max_radius: The balls' radius; None: the ``sample_num`` nearest points (``knn``).
        sample_num: The points per group.
        min_radius: The balls' inner radius. Default: 0.
        use_xyz: Whether the offsets come before the features. Default: True.
        return_grouped_xyz: Also return the grouped coordinates. Default: False.
        normalize_xyz: Divide the offsets by ``max_radius`` (not with ``max_radius`` None).
            Default: False.
        uniform_sample: Replace each group by its distinct points and uniform draws among
            them. Default: False.
        return_unique_cnt: Also return the distinct points per group (needs
            ``uniform_sample``). Default: False.
        return_grouped_idx: Also return the indices. Default: False.

    Raises:
        ValueError: ``return_unique_cnt`` without ``uniform_sample``, or ``normalize_xyz``
            with ``max_radius`` None (mmcv's assertions; ``AssertionError`` too).
    """

    def __init__(
        self,
        max_radius: Optional[float],
        sample_num: int,
        min_radius: float = 0.0,
        use_xyz: bool = True,
        return_grouped_xyz: bool = False,
        normalize_xyz: bool = False,
        uniform_sample: bool = False,
        return_unique_cnt: bool = False,
        return_grouped_idx: bool = False,
    ) -> None:
        super().__init__()
        self.max_radius = max_radius
        self.min_radius = min_radius
        self.sample_num = sample_num
        self.use_xyz = use_xyz
        self.return_grouped_xyz = return_grouped_xyz
        self.normalize_xyz = normalize_xyz
        self.uniform_sample = uniform_sample
        self.return_unique_cnt = return_unique_cnt
        self.return_grouped_idx = return_grouped_idx
        if return_unique_cnt and not uniform_sample:
            raise ArgumentError(
                "mmcv.ops.QueryAndGroup: return_unique_cnt needs uniform_sample=True"
            )
        if max_radius is None and normalize_xyz:
            raise ArgumentError(
                "mmcv.ops.QueryAndGroup: normalize_xyz needs a max_radius, found None"
            )

    def _indices(self, points_xyz: Tensor, center_xyz: Tensor) -> Tensor:
        """``(B, npoint, sample_num)`` int32: each centre's group."""
        if self.max_radius is None:
            return knn(self.sample_num, points_xyz, center_xyz, False).transpose(1, 2)
        return ball_query(self.min_radius, self.max_radius, self.sample_num, points_xyz, center_xyz)

    def forward(
        self, points_xyz: Tensor, center_xyz: Tensor, features: Optional[Tensor] = None
    ) -> Union[Tensor, Tuple[Tensor, ...]]:
        """Group the points around each centre.

        Args:
            points_xyz: ``(B, N, 3)`` float, the clouds.
            center_xyz: ``(B, npoint, 3)`` float, the centres.
            features: ``(B, C, N)`` float, the points' features, or None.

        Returns:
            ``new_features``: ``(B, 3 + C, npoint, sample_num)`` (the offsets, then the
            features; ``(B, C, ...)`` without ``use_xyz``, ``(B, 3, ...)`` without
            features), followed, when asked for, by the grouped coordinates ``(B, 3,
            npoint, sample_num)``, the distinct points per group ``(B, npoint)`` (float, on
            the CPU, as mmcv's) and the indices ``(B, npoint, sample_num)`` int32: a tuple
            if more than one.

        Raises:
            ValueError: No features and ``use_xyz`` False (mmcv's assertion), or what
                ``ball_query``, ``knn`` and ``grouping_operation`` raise.
        """
        if features is None and not self.use_xyz:
            raise ArgumentError("mmcv.ops.QueryAndGroup: use_xyz=False needs features, found None")
        idx = self._indices(points_xyz, center_xyz).contiguous()
        unique_cnt = None
        if self.uniform_sample:
            idx, counts = uniform_resample(idx)
            unique_cnt = torch.zeros(counts.shape)  # mmcv's: default dtype and device
            unique_cnt.copy_(counts)
        grouped_xyz = grouping_operation(points_xyz.transpose(1, 2), idx)
        offsets = grouped_xyz - center_xyz.transpose(1, 2).unsqueeze(-1)
        if self.normalize_xyz:
            offsets = offsets / self.max_radius
        new_features = offsets
        if features is not None:
            grouped = grouping_operation(features, idx)
            new_features = torch.cat([offsets, grouped], dim=1) if self.use_xyz else grouped
        extras = (
            (self.return_grouped_xyz, grouped_xyz),
            (self.return_unique_cnt, unique_cnt),
            (self.return_grouped_idx, idx),
        )
        outputs = (new_features,) + tuple(value for wanted, value in extras if wanted)
        return outputs[0] if len(outputs) == 1 else outputs


class GroupAll(nn.Module):
    """Groups a whole cloud as one group: ``(B, 3 + C, 1, N)``.

    Args:
        use_xyz: Whether the coordinates come before the features. Default: True.
    """

    def __init__(self, use_xyz: bool = True) -> None:
        super().__init__()
        self.use_xyz = use_xyz

    def forward(
        self, xyz: Tensor, new_xyz: Optional[Tensor], features: Optional[Tensor] = None
    ) -> Tensor:
        """The cloud as one group.

        Args:
            xyz: ``(B, N, 3)`` float, the cloud.
            new_xyz: Unused (mmcv's signature).
            features: ``(B, C, N)`` float, or None.

        Returns:
            ``(B, 3 + C, 1, N)``: the coordinates (not offsets), then the features;
            ``(B, C, 1, N)`` without ``use_xyz``; ``(B, 3, 1, N)`` without features.
        """
        grouped_xyz = xyz.transpose(1, 2).unsqueeze(2)
        if features is None:
            return grouped_xyz
        grouped = features.unsqueeze(2)
        return torch.cat([grouped_xyz, grouped], dim=1) if self.use_xyz else grouped
