"""The base class of the sparse layers, shared by ``sparse_conv``, ``sparse_pool`` and
``sparse_modules`` (which re-exports it under mmcv's name)."""

from __future__ import annotations

from torch import nn

__all__ = ["SparseModule"]


class SparseModule(nn.Module):
    """The base of modules that take and return a ``SparseConvTensor``."""
