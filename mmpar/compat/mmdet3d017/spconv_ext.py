"""mmdet3d 0.17's ``mmdet3d.ops.spconv.sparse_conv_ext`` on mmpar's sparse convolution.

The pybind functions of mmdet3d 0.17's ``spconv/src/all.cc`` (spconv 1.x, the code
mmcv 1.4.6 took into ``mmcv.ops``), with their positional signatures, on
:mod:`mmpar.compat.ops.sparse_ops` (mmpar's rulebook engine):

* ``get_indice_pairs_{2d,3d,4d}(indices, batch_size, out_shape, spatial_shape, ksize,
  stride, padding, dilation, out_padding, subm, transpose)`` and
  ``get_indice_pairs_grid_{2d,3d}(indices, grid, batch_size, ...)`` -> ``[outids,
  indice_pairs, indice_pair_num]``, the layout mmcv kept (``(K, 2, N)`` int32 pairs,
  -1 padded; ``(K,)`` counts);
* ``indice_conv_{fp32,half}(features, filters, indice_pairs, indice_pair_num,
  num_activate_out, inverse, subm)`` -> ``(num_activate_out, C_out)``;
* ``indice_conv_backward_{fp32,half}(features, filters, out_bp, indice_pairs,
  indice_pair_num, inverse, subm)`` -> ``[input_bp, filters_bp]``;
* ``fused_indice_conv_{fp32,half}(features, filters, bias, indice_pairs,
  indice_pair_num, num_activate_out, inverse, subm)``;
* ``indice_maxpool_{fp32,half}(features, indice_pairs, indice_pair_num,
  num_activate_out)`` and ``indice_maxpool_backward_{fp32,half}(features,
  out_features, out_bp, indice_pairs, indice_pair_num)``.

All return new tensors (none writes in place). The ``_fp32`` functions take float32
features and filters, the ``_half`` ones float16, as the C++ templates (a
``TypeError`` otherwise); ``get_indice_pairs_<n>d`` takes indices of ``n`` spatial
columns, and ``out_shape`` must be the one the convolution's sizes give (mmdet3d's
wrapper computes it so).

NaN/inf rule and differences from spconv 1.x's kernels: those of
:mod:`mmpar.compat.ops.sparse_ops` (output sites sorted by batch and coordinates on
every device; ``grid`` unused; any device).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from mmpar.compat.ops import sparse_ops

__all__ = ["MODULES"]

_WHERE = "mmdet3d.ops.spconv.sparse_conv_ext"


def _pairs(ndim: int, grid: bool) -> Callable[..., List[Tensor]]:
    name = f"get_indice_pairs{'_grid' if grid else ''}_{ndim}d"

    def get_pairs(indices: Tensor, *args: Any) -> List[Tensor]:
        if grid:
            args = args[1:]  # mmcv's preallocated dense grid: unused
        (
            batch_size,
            out_shape,
            spatial_shape,
            ksize,
            stride,
            padding,
            dilation,
            out_padding,
            subm,
            transpose,
        ) = args
        if indices.dim() != 2 or indices.shape[1] != ndim + 1:
            raise ValueError(
                f"{_WHERE}.{name}: indices must have shape (N, {ndim + 1}), "
                f"found {tuple(indices.shape)}"
            )
        outids, pairs, counts = sparse_ops.get_indice_pairs(
            indices,
            batch_size,
            spatial_shape,
            ksize,
            stride,
            padding,
            dilation,
            out_padding,
            bool(subm),
            bool(transpose),
        )
        _check_out_shape(
            name,
            out_shape,
            spatial_shape,
            ksize,
            stride,
            padding,
            dilation,
            out_padding,
            subm,
            transpose,
        )
        return [outids, pairs, counts]

    get_pairs.__name__ = get_pairs.__qualname__ = name
    get_pairs.__doc__ = (
        f"``[outids, indice_pairs, indice_pair_num]`` of a sparse convolution over ``(N, "
        f"{ndim + 1})`` int32 ``indices``{' (grid unused)' if grid else ''}."
    )
    return get_pairs


def _check_out_shape(
    name: str, out_shape: Sequence[int], spatial: Sequence[int], *sizes: Any
) -> None:
    ksize, stride, padding, dilation, out_padding, subm, transpose = sizes
    if subm:
        expected = list(spatial)
    elif transpose:
        expected = sparse_ops.get_deconv_output_size(
            spatial, ksize, stride, padding, dilation, out_padding
        )
    else:
        expected = sparse_ops.get_conv_output_size(spatial, ksize, stride, padding, dilation)
    if [int(s) for s in out_shape] != [int(s) for s in expected]:
        raise ValueError(
            f"{_WHERE}.{name}: out_shape {list(out_shape)} is not the convolution's {expected}"
        )


def _check_dtype(name: str, dtype: torch.dtype, **tensors: Optional[Tensor]) -> None:
    for arg, t in tensors.items():
        if t is not None and t.dtype != dtype:
            raise TypeError(f"{_WHERE}.{name}: {arg} must be {dtype}, found {t.dtype}")


def _typed(dtype: torch.dtype, suffix: str) -> Dict[str, Callable[..., Any]]:
    """The six typed entry points for ``dtype``, named with ``suffix``."""

    def indice_conv(
        features, filters, indice_pairs, indice_pair_num, num_activate_out, inverse, subm
    ):
        _check_dtype(f"indice_conv_{suffix}", dtype, features=features, filters=filters)
        return sparse_ops.indice_conv(
            features,
            filters,
            indice_pairs,
            indice_pair_num,
            num_activate_out,
            bool(inverse),
            bool(subm),
        )

    def indice_conv_backward(
        features, filters, out_bp, indice_pairs, indice_pair_num, inverse, subm
    ):
        _check_dtype(f"indice_conv_backward_{suffix}", dtype, features=features, filters=filters)
        found = sparse_ops.indice_conv_backward(
            features, filters, out_bp, indice_pairs, indice_pair_num, bool(inverse), bool(subm)
        )
        return list(found)

    def fused_indice_conv(
        features, filters, bias, indice_pairs, indice_pair_num, num_activate_out, inverse, subm
    ):
        _check_dtype(f"fused_indice_conv_{suffix}", dtype, features=features, filters=filters)
        return sparse_ops.fused_indice_conv(
            features,
            filters,
            bias,
            indice_pairs,
            indice_pair_num,
            num_activate_out,
            bool(inverse),
            bool(subm),
        )

    def indice_maxpool(features, indice_pairs, indice_pair_num, num_activate_out):
        _check_dtype(f"indice_maxpool_{suffix}", dtype, features=features)
        return sparse_ops.indice_maxpool(features, indice_pairs, indice_pair_num, num_activate_out)

    def indice_maxpool_backward(features, out_features, out_bp, indice_pairs, indice_pair_num):
        _check_dtype(f"indice_maxpool_backward_{suffix}", dtype, features=features)
        return sparse_ops.indice_maxpool_backward(
            features, out_features, out_bp, indice_pairs, indice_pair_num
        )

    found = {}
    for fn in (
        indice_conv,
        indice_conv_backward,
        fused_indice_conv,
        indice_maxpool,
        indice_maxpool_backward,
    ):
        name = f"{fn.__name__}_{suffix}"
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = (
            f"``sparse_ops.{fn.__name__.rsplit('_', 1)[0]}`` on {dtype} tensors (see the module)."
        )
        found[name] = fn
    return found


#: Full module name -> {pybind name: function}.
MODULES: Dict[str, Dict[str, Callable[..., Any]]] = {
    _WHERE: {
        **{f"get_indice_pairs_{n}d": _pairs(n, False) for n in (2, 3, 4)},
        **{f"get_indice_pairs_grid_{n}d": _pairs(n, True) for n in (2, 3)},
        **_typed(torch.float32, "fp32"),
        **_typed(torch.float16, "half"),
    }
}
