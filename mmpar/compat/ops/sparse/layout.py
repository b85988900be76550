"""A rulebook in mmcv's layout, and back: ``(indice_pairs, indice_pair_num)``.

mmcv's ``get_indice_pairs`` returns ``indice_pairs`` ``(K, 2, N)`` int32 (offset ``k``'s
input rows in ``[k, 0, :n_k]``, its output rows in ``[k, 1, :n_k]``, -1 after, ``N``
the number of input rows) and ``indice_pair_num`` ``(K,)`` int32, the ``n_k``. The
arithmetic works on the compact :class:`~.rulebook.Rulebook`: the one a layout was
made from travels on the ``indice_pairs`` tensor itself (an attribute, lost when the
tensor is copied or moved), and any other layout is read back, checked.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.sparse.rulebook import Rulebook

__all__ = ["attach", "attached", "from_layout", "resolve", "to_layout"]

#: The attribute of an ``indice_pairs`` tensor that carries its compact rulebook.
_ATTRIBUTE = "mmpar_rulebook"


def to_layout(book: Rulebook) -> Tuple[Tensor, Tensor]:
    """mmcv's ``(indice_pairs, indice_pair_num)`` of a rulebook.

    Returns:
        ``indice_pairs`` ``(K, 2, num_in)`` int32, offset ``k``'s input rows in
        ``[k, 0, :counts[k]]`` and output rows in ``[k, 1, :counts[k]]``, -1 after;
        ``indice_pair_num`` ``(K,)`` int32, the counts.
    """
    device = book.in_rows.device
    counts = torch.tensor(book.counts, dtype=torch.int32, device=device)
    pairs = torch.full((len(book.counts), 2, book.num_in), -1, dtype=torch.int32, device=device)
    for k, n in enumerate(book.counts):
        if n:  # a loop over the kernel's offsets: two copies each
            rows_in, rows_out = book.pairs(k)
            pairs[k, 0, :n] = rows_in
            pairs[k, 1, :n] = rows_out
    return pairs, counts


def attach(indice_pairs: Tensor, indice_pair_num: Tensor, book: Rulebook) -> None:
    """Let ``indice_pairs`` carry ``book`` to the arithmetic (see :func:`attached`)."""
    setattr(indice_pairs, _ATTRIBUTE, (indice_pair_num, book))


def attached(indice_pairs: Tensor, indice_pair_num: Tensor) -> Optional[Rulebook]:
    """The rulebook :func:`attach` gave this very ``indice_pairs`` with this very
    ``indice_pair_num``, or None (a tensor moved or copied loses it)."""
    carried = getattr(indice_pairs, _ATTRIBUTE, None)
    if carried is None or carried[0] is not indice_pair_num:
        return None
    return carried[1]


def from_layout(
    op: str,
    indice_pairs: Tensor,
    indice_pair_num: Tensor,
    num_in: int,
    num_out: int,
    subm: bool,
) -> Rulebook:
    """The rulebook of mmcv's layout, checked. For SubM, the fullest offset is done as
    one matmul of all rows (as mmcv's kernels do) when its pairs are ``(r, r)`` for
    every row; otherwise (a dilated kernel has no such offset) every offset's pairs are.

    Raises:
        TypeError: not integer tensors.
        ValueError: shapes that do not fit, a count above the pairs' length, or a row
            outside ``[0, num_in)`` / ``[0, num_out)``, naming the argument.
    """
    for name, t in (("indice_pairs", indice_pairs), ("indice_pair_num", indice_pair_num)):
        if not isinstance(t, Tensor) or t.is_floating_point() or t.dtype == torch.bool:
            found = t.dtype if isinstance(t, Tensor) else type(t).__name__
            raise TypeError(f"{op}: {name} must be an integer tensor, found {found}")
    k = indice_pair_num.numel()
    if indice_pairs.dim() != 3 or indice_pairs.shape[:2] != (k, 2):
        raise ValueError(
            f"{op}: indice_pairs must have shape ({k}, 2, L) for {k} counts in "
            f"indice_pair_num, found {tuple(indice_pairs.shape)}"
        )
    counts = indice_pair_num.reshape(-1).tolist()
    length = indice_pairs.shape[2]
    if k and (min(counts) < 0 or max(counts) > length):
        raise ValueError(f"{op}: indice_pair_num must be in [0, {length}], found {counts}")
    device = indice_pairs.device
    counts_t = torch.tensor(counts, dtype=torch.long, device=device)
    mask = torch.arange(length, device=device)[None] < counts_t[:, None]
    in_rows, out_rows = indice_pairs[:, 0][mask].long(), indice_pairs[:, 1][mask].long()
    for name, rows, limit in (("input", in_rows, num_in), ("output", out_rows, num_out)):
        if rows.numel() and (rows.min().item() < 0 or rows.max().item() >= limit):
            raise ValueError(f"{op}: indice_pairs has {name} rows outside [0, {limit})")
    book = Rulebook(in_rows, out_rows, counts, num_in, num_out)
    if subm and k and max(counts) == num_in == num_out:
        fullest = max(range(k), key=lambda i: (counts[i], -i))
        rows_in, rows_out = book.pairs(fullest)
        if bool((rows_in == rows_out).all()):
            book.identity = fullest
    return book


def resolve(
    op: str,
    indice_pairs: Tensor,
    indice_pair_num: Tensor,
    num_features: int,
    num_out: int,
    subm: bool,
    inverse: bool,
) -> Rulebook:
    """The rulebook mmcv's arithmetic reads from ``(indice_pairs, indice_pair_num)``,
    oriented from ``num_features`` input rows to ``num_out`` output rows (an inverse
    convolution reads its forward convolution's pairs backwards).

    Raises:
        ValueError: the row counts do not fit the pairs (see :func:`from_layout`).
    """
    book = attached(indice_pairs, indice_pair_num)
    num_in, num_res = (num_out, num_features) if inverse else (num_features, num_out)
    if book is None:
        book = from_layout(op, indice_pairs, indice_pair_num, num_in, num_res, subm)
    elif (book.num_in, book.num_out) != (num_in, num_res):
        side = "num_activate_out" if inverse else "features"
        raise ValueError(
            f"{op}: the pairs join {book.num_in} input rows to {book.num_out} output rows "
            f"of the forward convolution, found {num_in} and {num_res} (check {side})"
        )
    if inverse:
        return book.swapped()
    if not subm and book.identity >= 0:
        return Rulebook(book.in_rows, book.out_rows, book.counts, book.num_in, book.num_out)
    return book
