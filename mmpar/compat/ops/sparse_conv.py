"""mmcv 1.7.2's ``mmcv.ops.sparse_conv``: sparse convolution layers (spconv 1.x's).

``SparseConvolution`` maps a :class:`SparseConvTensor` to one whose features are
``out[o] = sum over offsets k and paired inputs i of features[i] @ weight[k] (+ bias)``
(the pairs: :mod:`mmpar.compat.ops.sparse.rulebook`); ``weight`` is
``(*kernel_size, in_channels, out_channels)``, mmcv's layout, so mmcv/mmdet3d
checkpoints load as they are. The kinds:

* ``SparseConv{2,3,4}d``: strided convolution; the outputs are every site an input
  reaches, inside ``get_conv_output_size``;
* ``SparseConvTranspose{2,3}d``: transposed convolution (``get_deconv_output_size``);
* ``SubMConv{2,3,4}d``: submanifold: the outputs are the input sites (stride 1 and
  padding ``kernel_size // 2`` whatever is given, as mmcv's kernels);
* ``SparseInverseConv{2,3}d``: the inverse of the ``Sparse(Conv)`` that ran with the same
  ``indice_key``: its pairs read backwards, back to that convolution's input sites
  and shape.

Rulebooks are cached in ``input.indice_dict`` under ``indice_key`` (for a key of
None too, as mmcv) and reused by every later layer with that key; the output tensor
shares the dict. A kernel of one site (``conv1x1``) is a matmul on the same sites,
shape and dict, whatever the stride (as mmcv). ``groups`` must be 1.

Differences from mmcv-full: bad arguments raise one-line errors: ``groups != 1`` and
a stride and a dilation both above 1 in a dimension are ``ArgumentError`` (mmcv
asserts), an inverse convolution without its forward convolution's rulebook or with
another kernel volume is a ``ValueError`` (mmcv asserts), and features of another
width or dtype than the weight are errors before any arithmetic. Under autocast the
features and the weight are cast to its dtype, as torch's convolutions are (mmcv's
kernels take one dtype: mmcv's fp16 training with autocast, which casts the voxel
features to half, fails there). Indices outside the grid or batch are a
``ValueError`` (see ``sparse_structure``). The rest, and the NaN/inf rule, as
``sparse_ops``.
"""

from __future__ import annotations

import math
from typing import Any, Tuple

import numpy as np
import torch
from torch import Tensor
from torch.nn import init
from torch.nn.parameter import Parameter

from mmpar.compat.ops import sparse_functional as Fsp
from mmpar.compat.ops import sparse_ops as ops
from mmpar.compat.ops.backend import ArgumentError, check_int
from mmpar.compat.ops.sparse.coords import as_int_list
from mmpar.compat.ops.sparse.module import SparseModule
from mmpar.compat.ops.sparse_structure import SparseConvTensor

__all__ = [
    "SparseConv2d",
    "SparseConv3d",
    "SparseConv4d",
    "SparseConvTranspose2d",
    "SparseConvTranspose3d",
    "SparseConvolution",
    "SparseInverseConv2d",
    "SparseInverseConv3d",
    "SubMConv2d",
    "SubMConv3d",
    "SubMConv4d",
]


def _fan_in_hwio(weight: Tensor) -> int:
    """The fan-in of a ``(*kernel_size, C_in, C_out)`` weight: ``C_in * prod(kernel_size)``."""
    if weight.dim() < 2:
        raise ValueError(
            "fan in and fan out can not be computed for tensorwith fewer than 2 dimensions"
        )
    if weight.dim() == 2:
        return weight.shape[0]
    return weight.shape[-2] * weight[..., 0, 0].numel()


def _autocast(features: Tensor, weight: Tensor) -> Tuple[Tensor, Tensor]:
    """Under autocast, both in its dtype (as torch's convolutions); else as they are."""
    device = features.device.type
    if not torch.is_autocast_enabled(device):
        return features, weight
    dtype = torch.get_autocast_dtype(device)
    return features.to(dtype), weight.to(dtype)


class SparseConvolution(SparseModule):
    """A sparse convolution of ``ndim`` spatial dimensions (see the module docstring).

    Args:
        ndim: The number of spatial dimensions.
        in_channels, out_channels: Feature widths.
        kernel_size, stride, padding, dilation, output_padding: An int or ``ndim`` ints.
        groups: Must be 1.
        bias: Whether to add a learnt ``(out_channels,)`` bias.
        subm, transposed, inverse: The kind.
        indice_key: The rulebook's name in ``indice_dict``.
        fused_bn: A batch norm folded into ``weight`` and ``bias`` (needs ``bias``).
    """

    def __init__(
        self,
        ndim: int,
        in_channels: int,
        out_channels: int,
        kernel_size: Any = 3,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        subm: bool = False,
        output_padding: Any = 0,
        transposed: bool = False,
        inverse: bool = False,
        indice_key: Any = None,
        fused_bn: bool = False,
    ):
        super().__init__()
        op = f"mmcv.ops.{type(self).__name__}"
        if groups != 1:
            raise ArgumentError(f"{op}: groups must be 1, found {groups!r}")
        ndim = check_int(op, "ndim", ndim, 1)
        in_channels = check_int(op, "in_channels", in_channels, 1)
        out_channels = check_int(op, "out_channels", out_channels, 1)
        self.kernel_size = as_int_list(op, "kernel_size", kernel_size, ndim)
        self.stride = as_int_list(op, "stride", stride, ndim)
        self.padding = as_int_list(op, "padding", padding, ndim)
        self.dilation = as_int_list(op, "dilation", dilation, ndim)
        self.output_padding = as_int_list(op, "output_padding", output_padding, ndim)
        for name in ("kernel_size", "stride", "dilation"):
            if min(getattr(self, name)) < 1:
                raise ValueError(f"{op}: {name} must be >= 1, found {getattr(self, name)}")
        ops.check_stride_dilation(op, self.stride, self.dilation)
        if fused_bn and not bias:
            raise ArgumentError(f"{op}: fused_bn needs bias=True")
        self.ndim = ndim
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.conv1x1 = np.prod(self.kernel_size) == 1
        self.transposed = transposed
        self.inverse = inverse
        self.groups = groups
        self.subm = subm
        self.indice_key = indice_key
        self.fused_bn = fused_bn
        self.weight = Parameter(torch.empty(*self.kernel_size, in_channels, out_channels))
        if bias:
            self.bias = Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """mmcv's initialisation: Kaiming uniform (``a = sqrt(5)``) on the weight as torch
        reads its fans, the bias uniform in ``+-1 / sqrt(C_in * kernel volume)``."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(_fan_in_hwio(self.weight))
            init.uniform_(self.bias, -bound, bound)

    def _check_input(self, op: str, input: Any) -> None:
        if not isinstance(input, SparseConvTensor):
            raise TypeError(f"{op}: input must be a SparseConvTensor, found {type(input).__name__}")
        features = input.features
        if features.dim() != 2 or features.shape[1] != self.in_channels:
            raise ValueError(
                f"{op}: input.features must be (N, in_channels={self.in_channels}), "
                f"found {tuple(features.shape)}"
            )
        if len(input.spatial_shape) != self.ndim:
            raise ValueError(
                f"{op}: input.spatial_shape must have {self.ndim} dims, "
                f"found {list(input.spatial_shape)}"
            )

    def _pairs(self, op: str, input: SparseConvTensor) -> Tuple[Any, Any, Any, Any]:
        """``(outids, indice_pairs, indice_pair_num, out_spatial_shape)``, cached by key."""
        data = input.find_indice_pair(self.indice_key)
        if self.inverse:
            if data is None:
                raise ValueError(
                    f"{op}: indice_key={self.indice_key!r} names no rulebook of the input: "
                    "an inverse convolution needs the convolution that ran with that key"
                )
            _, outids, indice_pairs, indice_pair_num, out_shape = data
            if indice_pairs.shape[0] != np.prod(self.kernel_size):
                raise ValueError(
                    f"{op}: kernel_size {self.kernel_size} must have the volume of its "
                    f"couple convolution's kernel ({indice_pairs.shape[0]})"
                )
            return outids, indice_pairs, indice_pair_num, out_shape
        if self.subm:
            out_shape = input.spatial_shape
        elif self.transposed:
            out_shape = ops.get_deconv_output_size(
                input.spatial_shape,
                self.kernel_size,
                self.stride,
                self.padding,
                self.dilation,
                self.output_padding,
            )
        else:
            out_shape = ops.get_conv_output_size(
                input.spatial_shape, self.kernel_size, self.stride, self.padding, self.dilation
            )
        if self.indice_key is not None and data is not None:
            outids, _, indice_pairs, indice_pair_num, _ = data
            return outids, indice_pairs, indice_pair_num, out_shape
        outids, indice_pairs, indice_pair_num = ops.get_indice_pairs(
            input.indices,
            input.batch_size,
            input.spatial_shape,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.output_padding,
            self.subm,
            self.transposed,
            grid=input.grid,
        )
        input.indice_dict[self.indice_key] = (
            outids,
            input.indices,
            indice_pairs,
            indice_pair_num,
            input.spatial_shape,
        )
        return outids, indice_pairs, indice_pair_num, out_shape

    def forward(self, input: SparseConvTensor) -> SparseConvTensor:
        op = f"mmcv.ops.{type(self).__name__}"
        self._check_input(op, input)
        features, weight = _autocast(input.features, self.weight)
        if self.conv1x1:
            out_features = torch.mm(features, weight.view(self.in_channels, self.out_channels))
            if self.bias is not None:
                out_features = out_features + self.bias
            out = SparseConvTensor(
                out_features, input.indices, input.spatial_shape, input.batch_size
            )
            out.indice_dict = input.indice_dict
            out.grid = input.grid
            return out
        outids, indice_pairs, indice_pair_num, out_shape = self._pairs(op, input)
        indice_pairs = indice_pairs.to(features.device)
        num_out = outids.shape[0]
        if self.fused_bn:
            out_features = ops.fused_indice_conv(
                features,
                weight,
                self.bias,
                indice_pairs,
                indice_pair_num,
                num_out,
                self.inverse,
                self.subm,
            )
        else:
            if self.subm:
                fn = Fsp.indice_subm_conv
            elif self.inverse:
                fn = Fsp.indice_inverse_conv
            else:
                fn = Fsp.indice_conv
            out_features = fn(features, weight, indice_pairs, indice_pair_num, num_out)
            if self.bias is not None:
                out_features += self.bias
        out = SparseConvTensor(out_features, outids, out_shape, input.batch_size)
        out.indice_dict = input.indice_dict
        out.grid = input.grid
        return out


def _kind(name: str, ndim: int, **kind: bool) -> type:
    """A ``SparseConvolution`` subclass of mmcv's signature for one kind and ``ndim``."""

    if kind.get("inverse"):

        def __init__(
            self: SparseConvolution,
            in_channels: int,
            out_channels: int,
            kernel_size: Any,
            indice_key: Any = None,
            bias: bool = True,
        ) -> None:
            SparseConvolution.__init__(
                self,
                ndim,
                in_channels,
                out_channels,
                kernel_size,
                bias=bias,
                indice_key=indice_key,
                **kind,
            )

    else:

        def __init__(
            self: SparseConvolution,
            in_channels: int,
            out_channels: int,
            kernel_size: Any,
            stride: Any = 1,
            padding: Any = 0,
            dilation: Any = 1,
            groups: int = 1,
            bias: bool = True,
            indice_key: Any = None,
        ) -> None:
            SparseConvolution.__init__(
                self,
                ndim,
                in_channels,
                out_channels,
                kernel_size,
                stride,
                padding,
                dilation,
                groups,
                bias,
                indice_key=indice_key,
                **kind,
            )

    __init__.__qualname__ = f"{name}.__init__"
    what = ", ".join(k for k, v in kind.items() if v) or "strided"
    doc = f"mmcv's ``{name}``: a {ndim}-D sparse convolution ({what}); see the module docstring."
    return type(
        name, (SparseConvolution,), {"__init__": __init__, "__doc__": doc, "__module__": __name__}
    )


SparseConv2d = _kind("SparseConv2d", 2)
SparseConv3d = _kind("SparseConv3d", 3)
SparseConv4d = _kind("SparseConv4d", 4)
SparseConvTranspose2d = _kind("SparseConvTranspose2d", 2, transposed=True)
SparseConvTranspose3d = _kind("SparseConvTranspose3d", 3, transposed=True)
SparseInverseConv2d = _kind("SparseInverseConv2d", 2, inverse=True)
SparseInverseConv3d = _kind("SparseInverseConv3d", 3, inverse=True)
SubMConv2d = _kind("SubMConv2d", 2, subm=True)
SubMConv3d = _kind("SubMConv3d", 3, subm=True)
SubMConv4d = _kind("SubMConv4d", 4, subm=True)
