"""mmcv 1.7.2's ``mmcv.ops.sparse_pool``: ``SparseMaxPool2d`` / ``SparseMaxPool3d``.

Max pooling over a sparse tensor: the output sites and pairs are those of a
strided sparse convolution of the same kernel (``get_indice_pairs``, never cached:
mmcv's pooling has no ``indice_key``), and each output feature is the max of 0 and
its paired inputs (mmcv's kernel starts the output at 0: all-negative windows give
0, with no gradient); the gradient goes to every paired input equal to the output.

Differences from mmcv-full: bad arguments raise one-line errors (mmcv asserts or
fails in its kernel); indices outside the grid or batch are a ``ValueError``.
NaN/inf: a NaN input is never the max (mmcv's ``<`` comparison); ``+inf`` is.
"""

from __future__ import annotations

from typing import Any

from mmpar.compat.ops.sparse.coords import as_int_list
from mmpar.compat.ops.sparse.module import SparseModule
from mmpar.compat.ops.sparse_functional import indice_maxpool
from mmpar.compat.ops.sparse_ops import (
    check_stride_dilation,
    get_conv_output_size,
    get_indice_pairs,
)
from mmpar.compat.ops.sparse_structure import SparseConvTensor

__all__ = ["SparseMaxPool", "SparseMaxPool2d", "SparseMaxPool3d"]


class SparseMaxPool(SparseModule):
    """Sparse max pooling of ``ndim`` spatial dimensions.

    Args:
        ndim: The number of spatial dimensions.
        kernel_size, stride, padding, dilation: An int or ``ndim`` ints.
        subm: Pool onto the input sites (as a SubM convolution's pairs).
    """

    def __init__(
        self,
        ndim: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        subm: bool = False,
    ):
        super().__init__()
        op = f"mmcv.ops.{type(self).__name__}"
        self.ndim = ndim
        self.kernel_size = as_int_list(op, "kernel_size", kernel_size, ndim)
        self.stride = as_int_list(op, "stride", stride, ndim)
        self.padding = as_int_list(op, "padding", padding, ndim)
        self.dilation = as_int_list(op, "dilation", dilation, ndim)
        for name in ("kernel_size", "stride", "dilation"):
            if min(getattr(self, name)) < 1:
                raise ValueError(f"{op}: {name} must be >= 1, found {getattr(self, name)}")
        check_stride_dilation(op, self.stride, self.dilation)
        self.subm = subm

    def forward(self, input: SparseConvTensor) -> SparseConvTensor:
        op = f"mmcv.ops.{type(self).__name__}"
        if not isinstance(input, SparseConvTensor):
            raise TypeError(f"{op}: input must be a SparseConvTensor, found {type(input).__name__}")
        features = input.features
        if self.subm:
            out_shape = input.spatial_shape
        else:
            out_shape = get_conv_output_size(
                input.spatial_shape, self.kernel_size, self.stride, self.padding, self.dilation
            )
        outids, indice_pairs, indice_pair_num = get_indice_pairs(
            input.indices,
            input.batch_size,
            input.spatial_shape,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            0,
            self.subm,
        )
        out_features = indice_maxpool(
            features,
            indice_pairs.to(features.device),
            indice_pair_num.to(features.device),
            outids.shape[0],
        )
        out = SparseConvTensor(out_features, outids, out_shape, input.batch_size)
        out.indice_dict = input.indice_dict
        out.grid = input.grid
        return out


class SparseMaxPool2d(SparseMaxPool):
    """2-D sparse max pooling."""

    def __init__(self, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1):
        super().__init__(2, kernel_size, stride, padding, dilation)


class SparseMaxPool3d(SparseMaxPool):
    """3-D sparse max pooling."""

    def __init__(self, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1):
        super().__init__(3, kernel_size, stride, padding, dilation)
