"""mmcv 1.7.2's ``mmcv.ops.sparse_structure``: ``SparseConvTensor`` and ``scatter_nd``.

A sparse tensor is ``features`` ``(N, C)`` at ``indices`` ``(N, D + 1)`` (batch index,
then ``D`` coordinates) of a grid ``spatial_shape`` ``(D,)``, for ``batch_size`` batch
elements. ``indice_dict`` caches the rulebooks of the convolutions that ran on it,
by their ``indice_key``, as mmcv: ``(outids, indices, indice_pairs,
indice_pair_num, spatial_shape)``, shared by every tensor those convolutions make.

Differences from mmcv-full: ``indices`` are checked when a convolution first builds
a rulebook from them and in :meth:`SparseConvTensor.dense`: a batch index outside
``[0, batch_size)`` or a coordinate outside ``[0, spatial_shape[d])`` is a
``ValueError`` naming the column (mmcv's kernels write out of bounds). The
constructor checks only the shapes of ``features`` and ``indices`` (no sync). As
mmcv's (whose ``self.indices.int()`` discards its result), it keeps ``indices`` in
the dtype given. NaN/inf features: carried as any value.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from mmpar.compat.ops.sparse.coords import check_indices

__all__ = ["SparseConvTensor", "scatter_nd"]


def scatter_nd(indices: Tensor, updates: Tensor, shape: Sequence[int]) -> Tensor:
    """TensorFlow's ``scatter_nd`` without summing: ``updates`` written at ``indices``.

    Args:
        indices: ``(..., M)`` integer indices into the first ``M`` dims of ``shape``.
        updates: ``(..., *shape[M:])``, the values.
        shape: The shape of the result (a list of ints).

    Returns:
        A zero tensor of ``shape`` in ``updates``' dtype and device, with ``updates``
        written at ``indices`` (a repeated index keeps one of its rows, as mmcv).
    """
    shape = list(shape)
    out = torch.zeros(*shape, dtype=updates.dtype, device=updates.device)
    m = indices.shape[-1]
    flat = indices.reshape(-1, m)
    out[tuple(flat[:, i] for i in range(m))] = updates.reshape(list(indices.shape[:-1]) + shape[m:])
    return out


def _row_strides(shape: Sequence[int]) -> List[int]:
    strides, step = [], 1
    for size in reversed(list(shape)):
        strides.append(step)
        step *= int(size)
    return strides[::-1]


class SparseConvTensor:
    """Features at sites of a sparse grid.

    Args:
        features: ``(N, C)`` float.
        indices: ``(N, D + 1)`` int (int32 in mmcv): batch index, then coordinates.
        spatial_shape: ``D`` ints, the grid.
        batch_size: The number of batch elements.
        grid: mmcv's preallocated dense grid (kept, unused: no dense grid here).

    Raises:
        TypeError: ``features`` or ``indices`` not a tensor.
        ValueError: not 2-D, or different row counts.
    """

    def __init__(
        self,
        features: Tensor,
        indices: Tensor,
        spatial_shape: Union[List, Tuple],
        batch_size: int,
        grid: Optional[Tensor] = None,
    ):
        op = "mmcv.ops.SparseConvTensor"
        for name, value in (("features", features), ("indices", indices)):
            if not isinstance(value, Tensor):
                raise TypeError(f"{op}: {name} must be a tensor, found {type(value).__name__}")
        if indices.dim() != 2 or features.dim() != 2 or features.shape[0] != indices.shape[0]:
            raise ValueError(
                f"{op}: features (N, C) and indices (N, D + 1) must be 2-D with the same N, "
                f"found {tuple(features.shape)} and {tuple(indices.shape)}"
            )
        self.features = features
        self.indices = indices
        self.spatial_shape = spatial_shape
        self.batch_size = batch_size
        self.indice_dict: dict = {}
        self.grid = grid

    @property
    def spatial_size(self) -> Any:
        """The number of sites of the grid (``np.prod(spatial_shape)``)."""
        return np.prod(self.spatial_shape)

    def find_indice_pair(self, key: Any) -> Optional[tuple]:
        """The cached ``(outids, indices, indice_pairs, indice_pair_num, spatial_shape)``
        of ``key``, or None (always for ``key`` None)."""
        if key is None:
            return None
        return self.indice_dict.get(key)

    def dense(self, channels_first: bool = True) -> Tensor:
        """The dense ``(B, C, *spatial_shape)`` tensor (``(B, *spatial_shape, C)`` when
        not ``channels_first``), zero where no site is.

        Raises:
            ValueError: an index outside the grid or the batch.
        """
        check_indices(
            "mmcv.ops.SparseConvTensor.dense", self.indices, self.spatial_shape, self.batch_size
        )
        channels = self.features.shape[1]
        if not channels_first:
            shape = [self.batch_size] + list(self.spatial_shape) + [channels]
            return scatter_nd(self.indices.long(), self.features, shape)
        # Written straight into (B, C, sites): the same tensor as mmcv's scatter into
        # (B, *spatial, C) and permute, without transposing the whole grid.
        out = self.features.new_zeros(self.batch_size, channels, int(np.prod(self.spatial_shape)))
        sites = self.indices.long()
        strides = torch.tensor(_row_strides(self.spatial_shape), device=sites.device)
        flat = (sites[:, 1:] * strides).sum(1)  # no integer matmul on CUDA
        out[sites[:, 0], :, flat] = self.features
        return out.view(self.batch_size, channels, *self.spatial_shape)

    @property
    def sparity(self) -> float:
        """The fraction of the grid's sites that are present (mmcv's spelling)."""
        return self.indices.shape[0] / np.prod(self.spatial_shape) / self.batch_size
