"""Laying out a batch in one :class:`~mmpar.batch_buffer.BatchBuffer`, in two passes.

:func:`mmpar.collate` walks the samples once and, for every container chunk whose
tensors may live in the buffer, makes a claim: the shape of a padded stack and
how to fill it, or the list of per-image tensors to copy. :meth:`BatchLayout.build`
then places the claims (chunk by chunk, each region aligned), allocates the bytes
once (shared memory inside a DataLoader worker, so that the batch leaves the
worker as one storage) and writes every claim into its region: padded images go
straight to their place, without an intermediate stack.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.utils.data

from mmpar.batch_buffer import BatchBuffer, Items, Rows, Slot, Spec, align, bufferable, cut
from mmpar.packing import PACK_ALIGN, cat_rows
from mmpar.stacking import empty_large, empty_shared

__all__ = ["BatchLayout", "Claim"]


class Claim:
    """One container chunk's region of the buffer; :attr:`spec` is set by the build."""

    __slots__ = ("nbytes", "_place", "_write", "spec")

    def __init__(
        self,
        nbytes: int,
        place: Callable[[int], Spec],
        write: Callable[[torch.Tensor, Any], None],
    ) -> None:
        self.nbytes = nbytes
        self._place = place
        self._write = write
        self.spec: Spec = None

    def place(self, offset: int) -> None:
        self.spec = self._place(offset)

    def write(self, chunk: torch.Tensor) -> None:
        self._write(chunk, self.spec)


class BatchLayout:
    """The claims of one batch of ``n_chunks`` chunks, then its buffer.

    Args:
        n_chunks: Chunks in the batch.
    """

    def __init__(self, n_chunks: int) -> None:
        self._claims: List[List[Claim]] = [[] for _ in range(n_chunks)]

    def claim_stack(
        self,
        chunk: int,
        shape: Tuple[int, ...],
        dtype: torch.dtype,
        fill: Callable[[torch.Tensor], None],
    ) -> Claim:
        """Claim a ``(N, *lead, *padded)`` stack; ``fill(out)`` writes it at build time."""
        numel = 1
        for s in shape:
            numel *= s
        claim = Claim(
            numel * dtype.itemsize,
            lambda offset: Slot(offset, dtype, tuple(shape)),
            lambda data, spec: fill(cut(data, spec, None)),
        )
        self._claims[chunk].append(claim)
        return claim

    def claim_list(self, chunk: int, items: Sequence[Any]) -> Optional[Claim]:
        """Claim the bufferable tensors of a chunk's list (boxes, labels, masks...).

        One dtype and one trailing shape (or all 0-dim) make one region of rows;
        otherwise each bufferable tensor gets its own aligned slot and the other
        items stay outside. Returns None when no item is bufferable.
        """
        rows = _rows_of(items)
        if rows is not None:
            claim = _rows_claim(list(items), *rows)
        else:
            claim = _items_claim(items)
        if claim is not None:
            self._claims[chunk].append(claim)
        return claim

    def build(self) -> Optional[BatchBuffer]:
        """Place every claim, allocate the bytes and write them; None when nothing was claimed.

        Chunk ``i``'s regions follow one another in ``bounds[i]``, each aligned to
        :data:`~mmpar.packing.PACK_ALIGN`. Inside a DataLoader worker the bytes are
        allocated in shared memory.
        """
        if not any(self._claims):
            return None
        bounds, start = [], 0
        for claims in self._claims:
            offset = 0
            for claim in claims:
                claim.place(offset)
                offset = align(offset + claim.nbytes)
            bounds.append((start, start + offset))
            start += offset
        size = max(start, PACK_ALIGN)
        if torch.utils.data.get_worker_info() is not None:
            data = empty_shared((size,), torch.uint8)
        else:
            data = empty_large((size,), torch.uint8)
        buffer = BatchBuffer(data, bounds)
        for i, claims in enumerate(self._claims):
            chunk = buffer.chunk(i)
            for claim in claims:
                claim.write(chunk)
        return buffer


def _rows_of(items: Sequence[Any]) -> Optional[Tuple[torch.dtype, Optional[Tuple[int, ...]]]]:
    """``(dtype, trailing)`` when every item is a bufferable tensor of one dtype and
    trailing shape (``trailing=None``: all 0-dim), else None."""
    if not items or not bufferable(items[0]):
        return None
    first = items[0]
    dtype, dim = first.dtype, first.dim()
    trailing = first.shape[1:]
    for t in items:
        if not bufferable(t) or t.dtype is not dtype or t.dim() != dim:
            return None
        if dim and t.shape[1:] != trailing:
            return None
    return dtype, (tuple(trailing) if dim else None)


def _rows_claim(
    tensors: List[torch.Tensor], dtype: torch.dtype, trailing: Optional[Tuple[int, ...]]
) -> Claim:
    sizes = tuple(1 for _ in tensors) if trailing is None else tuple(t.shape[0] for t in tensors)
    per_row = 1
    for s in trailing or ():
        per_row *= s
    rows = sum(sizes)

    def write(chunk: torch.Tensor, spec: Rows) -> None:
        flat = chunk[spec.offset : spec.offset + rows * per_row * dtype.itemsize].view(dtype)
        if trailing is None:
            torch.stack(tensors, out=flat)
        else:
            cat_rows(tensors, list(sizes), per_row, flat.view((rows,) + trailing))

    return Claim(
        rows * per_row * dtype.itemsize,
        lambda offset: Rows(offset, dtype, trailing, sizes),
        write,
    )


def _items_claim(items: Sequence[Any]) -> Optional[Claim]:
    local: List[Optional[Tuple[int, torch.Tensor]]] = []
    end = 0
    for item in items:
        if bufferable(item):
            local.append((end, item))
            end = align(end + item.numel() * item.element_size())
        else:
            local.append(None)
    if all(entry is None for entry in local):
        return None

    def place(offset: int) -> Spec:
        return Items(
            tuple(
                None
                if entry is None
                else Slot(offset + entry[0], entry[1].dtype, tuple(entry[1].shape))
                for entry in local
            )
        )

    def write(chunk: torch.Tensor, spec: Items) -> None:
        for slot, entry in zip(spec.slots, local):
            if slot is not None and entry is not None:
                cut(chunk, slot, None).copy_(entry[1])

    return Claim(end, place, write)
