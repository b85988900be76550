"""The arithmetic of a sparse convolution and a sparse max pooling over a rulebook.

Convolution (mmcv's ``indice_conv_forward``): ``out[o] = sum over pairs (i, o) of
offset k of features[i] @ weight[k]``, ``weight`` viewed ``(K, C_in, C_out)``; the
identity offset (SubM's centre) is one matmul of all rows. Per offset the input
rows are gathered, multiplied and added into the output rows with ``index_add_``.
Its gradients (``indice_conv_backward``): ``grad_features[i] += grad_out[o] @
weight[k]^T`` and ``grad_weight[k] = sum features[i]^T grad_out[o]`` over the pairs.

Max pooling (``indice_maxpool_forward``): the output starts at 0 and takes the
larger of itself and each paired input (a NaN never does); the gradient
(``indice_maxpool_backward``) goes to every paired input equal to its output.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.sparse.rulebook import Rulebook

__all__ = ["conv_backward", "conv_forward", "maxpool_backward", "maxpool_forward"]


def conv_forward(features: Tensor, weight: Tensor, book: Rulebook) -> Tensor:
    """``(book.num_out, C_out)``: the convolution of ``(num_in, C_in)`` ``features``
    by ``(K, C_in, C_out)`` ``weight`` over ``book``, in the features' dtype."""
    cout = weight.shape[-1]
    if book.identity >= 0:
        out = torch.mm(features, weight[book.identity])
    else:
        out = features.new_zeros(book.num_out, cout)
    for k, n in enumerate(book.counts):
        if n == 0 or k == book.identity:
            continue
        rows_in, rows_out = book.pairs(k)
        out.index_add_(0, rows_out, torch.mm(features.index_select(0, rows_in), weight[k]))
    return out


def conv_backward(
    features: Tensor,
    weight: Tensor,
    grad_out: Tensor,
    book: Rulebook,
    need_features: bool = True,
    need_weight: bool = True,
) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """``(grad_features, grad_weight)`` of :func:`conv_forward` (None where not needed)."""
    grad_in = grad_w = None
    if need_features:
        if book.identity >= 0:
            grad_in = torch.mm(grad_out, weight[book.identity].t())
        else:
            grad_in = torch.zeros_like(features)
    if need_weight:
        grad_w = torch.zeros_like(weight)
        if book.identity >= 0:
            torch.mm(features.t(), grad_out, out=grad_w[book.identity])
    for k, n in enumerate(book.counts):
        if n == 0 or k == book.identity:
            continue
        rows_in, rows_out = book.pairs(k)
        g = grad_out.index_select(0, rows_out)
        if need_weight:
            torch.mm(features.index_select(0, rows_in).t(), g, out=grad_w[k])
        if grad_in is not None:
            grad_in.index_add_(0, rows_in, torch.mm(g, weight[k].t()))
    return grad_in, grad_w


def maxpool_forward(features: Tensor, book: Rulebook) -> Tensor:
    """``(book.num_out, C)``: per output, the max of 0 and its paired inputs (NaN skipped)."""
    out = features.new_zeros(book.num_out, features.shape[1])
    if book.in_rows.numel() == 0:
        return out
    vals = features.index_select(0, book.in_rows)
    vals = vals.masked_fill(torch.isnan(vals), float("-inf"))
    index = book.out_rows[:, None].expand(-1, features.shape[1])
    return out.scatter_reduce_(0, index, vals, "amax", include_self=True)


def maxpool_backward(features: Tensor, out: Tensor, grad_out: Tensor, book: Rulebook) -> Tensor:
    """``(num_in, C)``: each output's gradient to every paired input equal to it."""
    grad_in = torch.zeros_like(features)
    if book.in_rows.numel() == 0:
        return grad_in
    hit = features.index_select(0, book.in_rows) == out.index_select(0, book.out_rows)
    grad = grad_out.index_select(0, book.out_rows) * hit
    return grad_in.index_add_(0, book.in_rows, grad)
