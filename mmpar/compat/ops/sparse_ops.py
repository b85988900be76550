"""mmcv 1.7.2's ``mmcv.ops.sparse_ops``: rulebooks and the sparse convolution's kernels.

``get_indice_pairs`` pairs input and output sites per kernel offset (the definition
is in :mod:`mmpar.compat.ops.sparse.rulebook`) and returns mmcv's layout:
``outids`` ``(M, D + 1)`` int32, ``indice_pairs`` ``(K, 2, N)`` int32 (offset ``k``'s
input rows in ``[k, 0, :n_k]``, output rows in ``[k, 1, :n_k]``, -1 after) and
``indice_pair_num`` ``(K,)`` int32. ``indice_conv`` / ``indice_conv_backward`` /
``fused_indice_conv`` / ``indice_maxpool`` / ``indice_maxpool_backward`` are the
gather-matmul-scatter arithmetic over such pairs
(:mod:`mmpar.compat.ops.sparse.arithmetic`), without autograd.

Differences from mmcv-full:

* output sites come sorted by (batch, coordinates), as mmcv's CUDA kernel numbers
  them (its CPU kernel: in order of discovery); the pairs of an offset in input order;
* ``grid`` (mmcv's preallocated dense grid) is accepted and unused; any number of
  spatial dimensions works (mmcv: 2-4, and 2-3 with ``grid``);
* ``indices`` outside ``spatial_shape`` or the batch, a kernel size below 1, and pairs
  or counts that do not fit the features are ``ValueError``; mmcv's ``assert`` on
  stride and dilation is an ``ArgumentError`` (a ``ValueError`` and ``AssertionError``);
* float64 and bfloat16 work (mmcv: ``NotImplementedError`` but for float32 and half);
* a dilated SubM convolution (no offset is the identity there) is computed from its
  pairs; mmcv's kernels treat the fullest offset as the identity, which is wrong there;
* duplicate sites (undefined in mmcv): a strided or transposed convolution sums
  their rows; a SubM convolution follows mmcv's grid (the last row of a site
  receives its neighbours, every row its own centre term);
* ``fused_indice_conv`` runs (mmcv's fails on float32 at ``filters.dtypes``) and adds
  ``bias`` for SubM too (mmcv's SubM kernel overwrites it).

Rulebooks made by ``get_indice_pairs`` carry their compact form on the returned
``indice_pairs`` tensor; pairs from elsewhere (or moved to another device) are
read from the layout. NaN/inf features: the convolution propagates them as matmuls
do; max pooling never takes a NaN (mmcv's ``<`` comparison) and starts from 0.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from torch import Tensor

from mmpar.compat.ops.backend import ArgumentError
from mmpar.compat.ops.sparse import arithmetic
from mmpar.compat.ops.sparse.coords import as_int_list, check_indices
from mmpar.compat.ops.sparse.layout import attach, to_layout
from mmpar.compat.ops.sparse.operands import conv_operands, maxpool_operands
from mmpar.compat.ops.sparse.rulebook import build, geometry

#: The attribute marking output sites made here with the grid and batch they lie in.
_CHECKED = "mmpar_sites_in"

__all__ = [
    "check_stride_dilation",
    "fused_indice_conv",
    "get_conv_output_size",
    "get_deconv_output_size",
    "get_indice_pairs",
    "indice_conv",
    "indice_conv_backward",
    "indice_maxpool",
    "indice_maxpool_backward",
]


def get_conv_output_size(
    input_size: Sequence[int],
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> List[int]:
    """A convolution's output shape: ``(in + 2p - d (k - 1) - 1) // s + 1`` per
    dimension, 1 where ``kernel_size`` is -1 (mmcv's convention)."""
    out = []
    for i, size in enumerate(input_size):
        span = dilation[i] * (kernel_size[i] - 1) + 1
        value = (size + 2 * padding[i] - span) // stride[i] + 1
        out.append(1 if kernel_size[i] == -1 else value)
    return out


def get_deconv_output_size(
    input_size: Sequence[int],
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    output_padding: Sequence[int],
) -> List[int]:
    """A transposed convolution's output shape: ``(in - 1) s - 2p + k + output_padding``
    per dimension (mmcv's formula, without dilation).

    Raises:
        ValueError: a ``kernel_size`` of -1.
    """
    out = []
    for i, size in enumerate(input_size):
        if kernel_size[i] == -1:
            raise ValueError("deconv don't support kernel_size < 0")
        out.append((size - 1) * stride[i] - 2 * padding[i] + kernel_size[i] + output_padding[i])
    return out


def check_stride_dilation(op: str, stride: Sequence[int], dilation: Sequence[int]) -> None:
    """mmcv's rule: in each dimension the stride or the dilation is 1.

    Raises:
        ArgumentError: both differ from 1 in a dimension.
    """
    for s, d in zip(stride, dilation):
        if s != 1 and d != 1:
            raise ArgumentError(
                f"{op}: stride and dilation cannot both differ from 1 in one dimension "
                f'(mmcv: "don\'t support this."), found stride={list(stride)}, '
                f"dilation={list(dilation)}"
            )


def get_indice_pairs(
    indices: Tensor,
    batch_size: int,
    spatial_shape: Sequence[int],
    ksize: Any = 3,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    out_padding: Any = 0,
    subm: bool = False,
    transpose: bool = False,
    grid: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """The output sites and the pairs of a sparse convolution over ``indices``.

    Args:
        indices: ``(N, D + 1)`` int, ``(batch, *coords)``.
        batch_size: The number of batch elements.
        spatial_shape: The input grid, ``D`` ints.
        ksize, stride, padding, dilation, out_padding: An int or ``D`` ints each.
        subm: Submanifold: the outputs are the inputs (stride 1, padding ``k // 2``).
        transpose: A transposed convolution.
        grid: Unused (mmcv's dense grid).

    Returns:
        ``(outids, indice_pairs, indice_pair_num)``: ``(M, D + 1)`` int32 output
        sites (``indices`` itself for SubM), ``(K, 2, N)`` int32 pairs (-1 padded),
        ``(K,)`` int32 counts.

    Raises:
        TypeError, ValueError: bad indices or sizes, naming them.
    """
    op = "mmcv.ops.get_indice_pairs"
    ndim = len(spatial_shape)
    spatial = as_int_list(op, "spatial_shape", spatial_shape, ndim)
    sizes = {
        name: as_int_list(op, name, value, ndim)
        for name, value in (
            ("ksize", ksize),
            ("stride", stride),
            ("padding", padding),
            ("dilation", dilation),
            ("out_padding", out_padding),
        )
    }
    for name in ("ksize", "stride", "dilation"):
        if min(sizes[name], default=1) < 1:
            raise ValueError(f"{op}: {name} must be >= 1, found {sizes[name]}")
    check_stride_dilation(op, sizes["stride"], sizes["dilation"])
    if getattr(indices, _CHECKED, None) == (tuple(spatial), batch_size):
        sites = indices.long()  # output sites of a convolution here: inside by construction
    else:
        sites = check_indices(op, indices, spatial, batch_size)
    k, s, p, d = (sizes[n] for n in ("ksize", "stride", "padding", "dilation"))
    if subm:
        out_shape = spatial
    elif transpose:
        out_shape = get_deconv_output_size(spatial, k, s, p, d, sizes["out_padding"])
    else:
        out_shape = get_conv_output_size(spatial, k, s, p, d)
    outids, book = build(sites, geometry(k, s, p, d, out_shape, subm, transpose), batch_size)
    if subm:
        outids = indices
    else:
        setattr(outids, _CHECKED, (tuple(out_shape), batch_size))
    pairs, counts = to_layout(book)
    attach(pairs, counts, book)
    return outids, pairs, counts


def indice_conv(
    features: Tensor,
    filters: Tensor,
    indice_pairs: Tensor,
    indice_pair_num: Tensor,
    num_activate_out: int,
    inverse: bool = False,
    subm: bool = False,
) -> Tensor:
    """``(num_activate_out, C_out)``: the sparse convolution of ``(N, C_in)`` features by
    ``(*kernel_size, C_in, C_out)`` filters over the pairs (read backwards if ``inverse``)."""
    op = "mmcv.ops.indice_conv"
    weight, book = conv_operands(
        op, features, filters, indice_pairs, indice_pair_num, num_activate_out, inverse, subm
    )
    return arithmetic.conv_forward(features, weight, book)


def fused_indice_conv(
    features: Tensor,
    filters: Tensor,
    bias: Tensor,
    indice_pairs: Tensor,
    indice_pair_num: Tensor,
    num_activate_out: int,
    inverse: bool,
    subm: bool,
) -> Tensor:
    """:func:`indice_conv` plus ``bias`` ``(C_out,)`` (a batch norm folded in)."""
    op = "mmcv.ops.fused_indice_conv"
    weight, book = conv_operands(
        op, features, filters, indice_pairs, indice_pair_num, num_activate_out, inverse, subm
    )
    return arithmetic.conv_forward(features, weight, book).add_(bias)


def indice_conv_backward(
    features: Tensor,
    filters: Tensor,
    out_bp: Tensor,
    indice_pairs: Tensor,
    indice_pair_num: Tensor,
    inverse: bool = False,
    subm: bool = False,
) -> Tuple[Tensor, Tensor]:
    """``(input_bp (N, C_in), filters_bp (*kernel_size, C_in, C_out))``: the gradients
    of :func:`indice_conv` for the output gradient ``out_bp`` ``(M, C_out)``."""
    op = "mmcv.ops.indice_conv_backward"
    weight, book = conv_operands(
        op, features, filters, indice_pairs, indice_pair_num, out_bp.shape[0], inverse, subm
    )
    grad_in, grad_w = arithmetic.conv_backward(features, weight, out_bp, book)
    return grad_in, grad_w.view(filters.shape)


def indice_maxpool(
    features: Tensor, indice_pairs: Tensor, indice_pair_num: Tensor, num_activate_out: int
) -> Tensor:
    """``(num_activate_out, C)``: per output site, the max of 0 and its paired inputs."""
    op = "mmcv.ops.indice_maxpool"
    book = maxpool_operands(op, features, indice_pairs, indice_pair_num, num_activate_out)
    return arithmetic.maxpool_forward(features, book)


def indice_maxpool_backward(
    features: Tensor,
    out_features: Tensor,
    out_bp: Tensor,
    indice_pairs: Tensor,
    indice_pair_num: Tensor,
) -> Tensor:
    """``(N, C)``: :func:`indice_maxpool`'s gradient: ``out_bp`` of each output to every
    paired input equal to the output."""
    op = "mmcv.ops.indice_maxpool_backward"
    book = maxpool_operands(op, features, indice_pairs, indice_pair_num, out_features.shape[0])
    return arithmetic.maxpool_backward(features, out_features, out_bp, book)
