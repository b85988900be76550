"""The operands of mmcv's sparse kernels, checked: features, filters and the pairs.

mmcv's ``indice_conv_forward`` / ``indice_conv_backward`` / ``indice_maxpool_*`` take
``features`` ``(N, C_in)``, ``filters`` ``(*kernel_size, C_in, C_out)`` and the pairs
in mmcv's layout; here they become the arithmetic's ``(K, C_in, C_out)`` weight and
:class:`~.rulebook.Rulebook`, or a one-line error naming the argument.
"""

from __future__ import annotations

from typing import Any, Tuple

from torch import Tensor

from mmpar.compat.ops.sparse.layout import resolve
from mmpar.compat.ops.sparse.rulebook import Rulebook

__all__ = ["conv_operands", "maxpool_operands"]


def _num(op: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: num_activate_out must be an int, found {value!r}")
    if number < 0:
        raise ValueError(f"{op}: num_activate_out must be >= 0, found {number}")
    return number


def conv_operands(
    op: str,
    features: Tensor,
    filters: Tensor,
    indice_pairs: Tensor,
    indice_pair_num: Tensor,
    num_out: int,
    inverse: bool,
    subm: bool,
) -> Tuple[Tensor, Rulebook]:
    """``(weight (K, C_in, C_out), rulebook)`` for the arithmetic, checked.

    Raises:
        TypeError: features or filters not floating point, or of different dtypes.
        ValueError: shapes that do not fit, naming the argument.
    """
    for name, t in (("features", features), ("filters", filters)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            found = t.dtype if isinstance(t, Tensor) else type(t).__name__
            raise TypeError(f"{op}: {name} must be a floating-point tensor, found {found}")
    if features.dtype != filters.dtype:
        raise TypeError(
            f"{op}: features and filters must have one dtype, found {features.dtype} "
            f"and {filters.dtype}"
        )
    if features.dim() != 2 or filters.dim() < 2 or features.shape[1] != filters.shape[-2]:
        raise ValueError(
            f"{op}: features (N, C_in) must match filters (*kernel_size, C_in, C_out), "
            f"found {tuple(features.shape)} and {tuple(filters.shape)}"
        )
    weight = filters.reshape(-1, filters.shape[-2], filters.shape[-1])
    if weight.shape[0] != indice_pair_num.numel():
        raise ValueError(
            f"{op}: filters have {weight.shape[0]} kernel offsets, indice_pair_num "
            f"{indice_pair_num.numel()}"
        )
    num_out = _num(op, num_out)
    book = resolve(op, indice_pairs, indice_pair_num, features.shape[0], num_out, subm, inverse)
    return weight, book


def maxpool_operands(
    op: str, features: Tensor, indice_pairs: Tensor, indice_pair_num: Tensor, num_out: Any
) -> Rulebook:
    """The rulebook of a max pooling, checked (see :func:`conv_operands`)."""
    if not isinstance(features, Tensor) or not features.is_floating_point() or features.dim() != 2:
        found = (
            f"{features.dtype} {tuple(features.shape)}"
            if isinstance(features, Tensor)
            else type(features).__name__
        )
        raise TypeError(f"{op}: features must be a 2-D floating-point tensor, found {found}")
    num_out = _num(op, num_out)
    return resolve(op, indice_pairs, indice_pair_num, features.shape[0], num_out, False, False)
