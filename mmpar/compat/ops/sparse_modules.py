"""mmcv 1.7.2's ``mmcv.ops.sparse_modules``: ``SparseModule``, ``SparseSequential`` and kin.

``SparseSequential`` runs its modules in order: a :class:`SparseModule` (a sparse
convolution or pooling) takes and returns a :class:`SparseConvTensor`; any other
module (``BatchNorm1d``, ``ReLU``) is applied to the tensor's ``features`` in place
of them, and skipped when the tensor has no sites (as mmcv, so that a batch norm in
training never sees 0 rows). Before each sparse module it records the input's
``sparity`` under the module's name. ``fused()`` folds a ``BatchNorm1d`` that follows
a sparse convolution into the convolution (a ``fused_bn`` one), with mmcv's
formula: ``scale = bn.weight / (sqrt(running_var) + eps)``.

Differences from mmcv-full: a non-``SparseConvTensor`` input to a sparse module is a
``TypeError`` (mmcv asserts); mmcv's fused convolutions fail on float32 features at
``filters.dtypes``, mmpar's run (see ``sparse_ops``). NaN/inf: as the modules run.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Optional

import torch
from torch import nn

from mmpar.compat.ops.sparse.module import SparseModule
from mmpar.compat.ops.sparse_conv import SparseConvolution
from mmpar.compat.ops.sparse_structure import SparseConvTensor

__all__ = [
    "RemoveGrid",
    "SparseModule",
    "SparseSequential",
    "ToDense",
    "is_sparse_conv",
    "is_spconv_module",
]


def is_spconv_module(module: nn.Module) -> bool:
    """Whether ``module`` takes a :class:`SparseConvTensor` (a :class:`SparseModule`)."""
    return isinstance(module, SparseModule)


def is_sparse_conv(module: nn.Module) -> bool:
    """Whether ``module`` is a sparse convolution."""
    return isinstance(module, SparseConvolution)


class SparseSequential(SparseModule):
    """A sequence of modules over a :class:`SparseConvTensor` (see the module docstring).

    Args:
        *args: The modules, or one ``OrderedDict`` of them by name.
        **kwargs: More modules by name.

    Raises:
        ValueError: a keyword name that is already taken.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)
        for name, module in kwargs.items():
            if name in self._modules:
                raise ValueError("name exists.")
            self.add_module(name, module)
        self._sparity_dict: dict = {}

    def __getitem__(self, idx: int) -> nn.Module:
        if not (-len(self) <= idx < len(self)):
            raise IndexError(f"index {idx} is out of range")
        return list(self._modules.values())[idx]

    def __len__(self) -> int:
        return len(self._modules)

    @property
    def sparity_dict(self) -> dict:
        """The ``sparity`` of the input of each sparse module, by name, of the last run."""
        return self._sparity_dict

    def add(self, module: Any, name: Optional[str] = None) -> None:
        """Append ``module`` (named by its position when ``name`` is None).

        Raises:
            KeyError: the positional name is taken.
        """
        if name is None:
            name = str(len(self._modules))
            if name in self._modules:
                raise KeyError("name exists")
        self.add_module(name, module)

    def forward(self, input: Any) -> Any:
        for name, module in self._modules.items():
            if is_spconv_module(module):
                if not isinstance(input, SparseConvTensor):
                    raise TypeError(
                        f"mmcv.ops.SparseSequential: module {name!r} takes a "
                        f"SparseConvTensor, found {type(input).__name__}"
                    )
                self._sparity_dict[name] = input.sparity
                input = module(input)
            elif isinstance(input, SparseConvTensor):
                if input.indices.shape[0] != 0:
                    input.features = module(input.features)
            else:
                input = module(input)
        return input

    def fused(self) -> "SparseSequential":
        """A copy whose sparse convolutions absorb the ``BatchNorm1d`` after them."""
        mods = list(self._modules.values())
        out = []
        idx = 0
        while idx < len(mods):
            follows_bn = idx + 1 < len(mods) and isinstance(mods[idx + 1], nn.BatchNorm1d)
            if is_sparse_conv(mods[idx]) and follows_bn:
                out.append(_fuse(mods[idx], mods[idx + 1]))
                idx += 2
            else:
                out.append(mods[idx])
                idx += 1
        return SparseSequential(*out)


def _fuse(conv: nn.Module, bn: nn.BatchNorm1d) -> nn.Module:
    """A ``fused_bn`` convolution computing ``bn(conv(x))`` with ``bn``'s running stats."""
    fused = SparseConvolution(
        ndim=conv.ndim,
        in_channels=conv.in_channels,
        out_channels=conv.out_channels,
        kernel_size=conv.kernel_size,
        stride=conv.stride,
        padding=conv.padding,
        dilation=conv.dilation,
        groups=conv.groups,
        bias=True,
        subm=conv.subm,
        output_padding=conv.output_padding,
        transposed=conv.transposed,
        inverse=conv.inverse,
        indice_key=conv.indice_key,
        fused_bn=True,
    ).to(conv.weight.device)
    with torch.no_grad():
        scale = bn.weight / (torch.sqrt(bn.running_var) + bn.eps)
        fused.weight.copy_(conv.weight * scale)
        # mmcv starts from a zero bias: the convolution's own bias is dropped.
        fused.bias.copy_(-bn.running_mean * scale + bn.bias)
    return fused


class ToDense(SparseModule):
    """A :class:`SparseConvTensor` to its dense ``(B, C, *spatial_shape)`` tensor."""

    def forward(self, x: SparseConvTensor) -> torch.Tensor:
        return x.dense()


class RemoveGrid(SparseModule):
    """Drops the tensor's preallocated ``grid``."""

    def forward(self, x: SparseConvTensor) -> SparseConvTensor:
        x.grid = None
        return x
