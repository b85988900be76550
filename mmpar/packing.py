"""Packing: many small tensors copied as one flat byte buffer, and cut back into views.

Each tensor (or group of same-dtype tensors) starts at a multiple of
:data:`PACK_ALIGN` bytes, so every dtype may ``view`` its slice of the buffer.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Any, List, Optional, Sequence, Tuple

import torch

__all__ = ["PACK_ALIGN", "TensorGroup", "cat_rows", "pack", "packed_copy", "unpack"]

#: Byte alignment of each packed tensor, enough for any dtype's ``view``.
PACK_ALIGN = 64

Layout = List[Tuple[int, int, torch.dtype, torch.Size]]  # offset, nbytes, dtype, shape


def pack(tensors: Sequence[torch.Tensor], pin: bool = False) -> Tuple[torch.Tensor, Layout]:
    """Copy tensors into one flat ``uint8`` buffer.

    Args:
        tensors: CPU tensors of any dtype and shape.
        pin: Allocate the buffer in pinned (page-locked) memory.

    Returns:
        ``(buffer, layout)``: the bytes of every tensor, each starting at a
        multiple of 64, and for each tensor its ``(offset, nbytes, dtype, shape)``.
    """
    layout: Layout = []
    offset = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        layout.append((offset, nbytes, t.dtype, t.shape))
        offset += -(-nbytes // PACK_ALIGN) * PACK_ALIGN
    buffer = torch.empty(offset, dtype=torch.uint8, pin_memory=pin)
    for t, (start, nbytes, _, _) in zip(tensors, layout):
        if nbytes:
            buffer[start : start + nbytes].copy_(t.contiguous().reshape(-1).view(torch.uint8))
    return buffer, layout


def unpack(buffer: torch.Tensor, layout: Layout) -> List[torch.Tensor]:
    """Typed views into a buffer made by :func:`pack` (on whatever device it is now)."""
    return [
        buffer[start : start + nbytes].view(dtype).view(shape)
        for start, nbytes, dtype, shape in layout
    ]


class TensorGroup:
    """Small tensors of one dtype and trailing shape (``None``: 0-dim), and their output indices."""

    __slots__ = ("dtype", "trailing", "indices", "tensors")

    def __init__(self, dtype: torch.dtype, trailing: Optional[Tuple[int, ...]]) -> None:
        self.dtype = dtype
        self.trailing = trailing
        self.indices: Sequence[int] = []
        self.tensors: List[torch.Tensor] = []

    def add(self, index: int, t: torch.Tensor) -> None:
        self.indices.append(index)  # type: ignore[attr-defined]
        self.tensors.append(t)


#: Elements below which ``torch.cat`` copies serially; above it, it starts threads per input.
_SERIAL_CAT = 32767


def cat_rows(
    tensors: List[torch.Tensor], sizes: List[int], per_row: int, out: torch.Tensor
) -> None:
    """``torch.cat(tensors, out=out)`` in pieces small enough for its serial kernel (many
    small inputs otherwise cost a parallel region each)."""
    if len(tensors) < 16 or out.numel() <= _SERIAL_CAT:
        torch.cat(tensors, dim=0, out=out)
        return
    ends = list(itertools.accumulate(sizes))
    rows = max(1, _SERIAL_CAT // max(per_row, 1))
    i, row = 0, 0
    while i < len(tensors):
        j = max(bisect.bisect_right(ends, row + rows, i), i + 1)
        torch.cat(tensors[i:j], dim=0, out=out[row : ends[j - 1]])
        i, row = j, ends[j - 1]


def packed_copy(
    groups: List[TensorGroup], out: List[Any], device: torch.device, pin: bool = True
) -> torch.Tensor:
    """Copy each group's CPU tensors to ``device`` through one pinned buffer; their
    device views go into ``out`` at the groups' indices. Returns the device buffer.

    One ``torch.cat`` writes a group into the pinned buffer, one ``torch.split``
    cuts its views out of the device copy. Each group starts at a multiple of 64
    bytes, so every dtype may view it.
    """
    plan = []  # (group, sizes, rows, per_row, offset, nbytes)
    offset = 0
    for group in groups:
        per_row = 1
        for size in group.trailing or ():
            per_row *= size
        sizes = (
            [1] * len(group.tensors)
            if group.trailing is None
            else [t.shape[0] for t in group.tensors]
        )
        rows = sum(sizes)
        nbytes = rows * per_row * group.dtype.itemsize
        plan.append((group, sizes, rows, per_row, offset, nbytes))
        offset += -(-nbytes // PACK_ALIGN) * PACK_ALIGN
    host = torch.empty(max(offset, PACK_ALIGN), dtype=torch.uint8, pin_memory=pin)
    for group, sizes, rows, per_row, start, nbytes in plan:
        dst = host[start : start + nbytes].view(group.dtype)
        if group.trailing is None:
            torch.stack(group.tensors, out=dst)
        else:
            cat_rows(group.tensors, sizes, per_row, dst.view((rows,) + group.trailing))
    on_device = host.to(device, non_blocking=True)
    for group, sizes, rows, per_row, start, nbytes in plan:
        src = on_device[start : start + nbytes].view(group.dtype)
        if group.trailing is None:
            pieces: Sequence[torch.Tensor] = src.unbind(0)
        else:
            pieces = torch.split(src.view((rows,) + group.trailing), sizes, dim=0)
        if isinstance(group.indices, range):
            out[group.indices.start : group.indices.stop] = pieces
        else:
            for j, piece in zip(group.indices, pieces):
                out[j] = piece
    return on_device
