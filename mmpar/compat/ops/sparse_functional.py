"""mmcv 1.7.2's ``mmcv.ops.sparse_functional``: sparse convolution and max pooling with autograd.

``indice_conv`` / ``indice_subm_conv`` / ``indice_inverse_conv`` apply
``SparseConvFunction`` / ``SubMConvFunction`` / ``SparseInverseConvFunction``:
``(features, filters, indice_pairs, indice_pair_num, num_activate_out)`` to the
output features, with mmcv's gradients for ``features`` and ``filters`` (see
:mod:`mmpar.compat.ops.sparse.arithmetic`). ``indice_maxpool`` applies
``SparseMaxPoolFunction``, whose gradient goes to every input equal to its
output. Differences from mmcv-full and the NaN/inf rule: as ``sparse_ops``.
"""

from __future__ import annotations

from typing import Any, Tuple

from torch import Tensor
from torch.autograd import Function

from mmpar.compat.ops.sparse import arithmetic
from mmpar.compat.ops.sparse.operands import conv_operands, maxpool_operands

__all__ = [
    "SparseConvFunction",
    "SparseInverseConvFunction",
    "SparseMaxPoolFunction",
    "SubMConvFunction",
    "indice_conv",
    "indice_inverse_conv",
    "indice_maxpool",
    "indice_subm_conv",
]


def _forward(
    ctx: Any,
    op: str,
    features: Tensor,
    filters: Tensor,
    indice_pairs: Tensor,
    indice_pair_num: Tensor,
    num_activate_out: Any,
    inverse: bool,
    subm: bool,
) -> Tensor:
    weight, book = conv_operands(
        op, features, filters, indice_pairs, indice_pair_num, num_activate_out, inverse, subm
    )
    ctx.book = book
    ctx.save_for_backward(features, filters)
    return arithmetic.conv_forward(features, weight, book)


def _backward(ctx: Any, grad_output: Tensor) -> Tuple:
    features, filters = ctx.saved_tensors
    weight = filters.reshape(-1, filters.shape[-2], filters.shape[-1])
    grad_in, grad_w = arithmetic.conv_backward(
        features,
        weight,
        grad_output.contiguous(),
        ctx.book,
        need_features=ctx.needs_input_grad[0],
        need_weight=ctx.needs_input_grad[1],
    )
    if grad_w is not None:
        grad_w = grad_w.view(filters.shape)
    return grad_in, grad_w, None, None, None


class SparseConvFunction(Function):
    """Sparse convolution (strided or transposed) over a rulebook.

    Please refer to `SECOND <https://www.mdpi.com/1424-8220/18/10/3337>`_ for more details.
    """

    @staticmethod
    def forward(
        ctx: Any,
        features: Tensor,
        filters: Tensor,
        indice_pairs: Tensor,
        indice_pair_num: Tensor,
        num_activate_out: Any,
    ) -> Tensor:
        """``(num_activate_out, C_out)`` from ``(N, C_in)`` features and
        ``(*kernel_size, C_in, C_out)`` filters over the pairs."""
        op = "mmcv.ops.indice_conv"
        args = (features, filters, indice_pairs, indice_pair_num, num_activate_out)
        return _forward(ctx, op, *args, inverse=False, subm=False)

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> Tuple:
        return _backward(ctx, grad_output)


class SparseInverseConvFunction(Function):
    """The inverse of a sparse convolution: its pairs read from output to input."""

    @staticmethod
    def forward(
        ctx: Any,
        features: Tensor,
        filters: Tensor,
        indice_pairs: Tensor,
        indice_pair_num: Tensor,
        num_activate_out: Any,
    ) -> Tensor:
        """``(num_activate_out, C_out)``: ``features`` at the forward convolution's
        outputs, carried back to its inputs."""
        op = "mmcv.ops.indice_inverse_conv"
        args = (features, filters, indice_pairs, indice_pair_num, num_activate_out)
        return _forward(ctx, op, *args, inverse=True, subm=False)

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> Tuple:
        return _backward(ctx, grad_output)


class SubMConvFunction(Function):
    """Submanifold sparse convolution: the outputs are the input sites."""

    @staticmethod
    def forward(
        ctx: Any,
        features: Tensor,
        filters: Tensor,
        indice_pairs: Tensor,
        indice_pair_num: Tensor,
        num_activate_out: Any,
    ) -> Tensor:
        """``(num_activate_out, C_out)``, the centre offset as one matmul."""
        op = "mmcv.ops.indice_subm_conv"
        args = (features, filters, indice_pairs, indice_pair_num, num_activate_out)
        return _forward(ctx, op, *args, inverse=False, subm=True)

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> Tuple:
        return _backward(ctx, grad_output)


class SparseMaxPoolFunction(Function):
    """Sparse max pooling over a rulebook (outputs start at 0, as mmcv's kernel)."""

    @staticmethod
    def forward(
        ctx: Any,
        features: Tensor,
        indice_pairs: Tensor,
        indice_pair_num: Tensor,
        num_activate_out: Any,
    ) -> Tensor:
        """``(num_activate_out, C)``: the max of 0 and the paired inputs per output."""
        op = "mmcv.ops.indice_maxpool"
        book = maxpool_operands(op, features, indice_pairs, indice_pair_num, num_activate_out)
        out = arithmetic.maxpool_forward(features, book)
        ctx.book = book
        # A copy: the output is often changed in place next (SparseSequential's ReLU).
        ctx.out = out.detach().clone()
        ctx.save_for_backward(features)
        return out

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> Tuple:
        (features,) = ctx.saved_tensors
        grad = arithmetic.maxpool_backward(features, ctx.out, grad_output.contiguous(), ctx.book)
        return grad, None, None, None


indice_conv = SparseConvFunction.apply
indice_inverse_conv = SparseInverseConvFunction.apply
indice_subm_conv = SubMConvFunction.apply
indice_maxpool = SparseMaxPoolFunction.apply
