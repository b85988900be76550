"""One buffer per batch: every tensor of a collated batch laid out in one byte storage.

A detection batch holds a few large tensors (each chunk's padded image stack) and
many small ones (each image's boxes and labels). Moved tensor by tensor, every one
of them costs a shared-memory segment and a file descriptor to leave a DataLoader
worker, a pinned allocation and a copy in the pin thread, and a copy to the GPU.
:func:`mmpar.collate` instead writes them all into one :class:`BatchBuffer`, and
the containers hold typed views of it:

* the batch crosses the process boundary as one shared storage plus the small
  :data:`Spec` of each container chunk (:meth:`BatchBuffer.__reduce__`);
* pinning copies the one storage once (:meth:`BatchBuffer.pinned`);
* scatter copies chunk ``i``'s bytes to target ``i`` once and cuts the views there
  (:func:`cut`).

Layout: chunk ``i`` owns the bytes ``bounds[i]``, and the regions of its
containers follow one another inside it, each starting at a multiple of
:data:`~mmpar.packing.PACK_ALIGN` bytes, so that every dtype may view its region
and the regions never overlap. A chunk's list of per-image tensors of one dtype
and one trailing shape (boxes ``(k_i, 4)``, labels ``(k_i,)``) is one region of
rows, cut back with one ``torch.split``: the work per chunk does not grow with the
number of images.
"""

from __future__ import annotations

import operator
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from mmpar.packing import PACK_ALIGN

__all__ = [
    "BatchBuffer",
    "Items",
    "Rows",
    "Slot",
    "Spec",
    "align",
    "bufferable",
    "chunk_data",
    "cut",
    "matches",
    "nbytes_of",
    "strip",
]


class Slot(NamedTuple):
    """One tensor of ``shape`` and ``dtype`` at byte ``offset`` of its chunk."""

    offset: int
    dtype: torch.dtype
    shape: Tuple[int, ...]


class Rows(NamedTuple):
    """A list of tensors ``(sizes[i], *trailing)`` of one dtype, back to back from ``offset``.

    ``trailing=None`` stands for 0-dim tensors, one element each (``sizes`` all 1).
    """

    offset: int
    dtype: torch.dtype
    trailing: Optional[Tuple[int, ...]]
    sizes: Tuple[int, ...]


class Items(NamedTuple):
    """A list whose tensors have :class:`Slot` s; ``None`` marks an item kept outside
    the buffer (a numpy array, a registered type, a tensor that must not be copied)."""

    slots: Tuple[Optional[Slot], ...]


#: How one container chunk sits in its chunk's bytes; ``None``: not in the buffer.
Spec = Union[Slot, Rows, Items, None]


_QUANTIZED = frozenset({torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4})


def bufferable(t: Any) -> bool:
    """Whether ``t`` may be copied into a buffer and stand as a view of it: a plain
    (not subclassed), dense CPU tensor that does not track gradients."""
    # Cheapest tests first: collate asks this of every per-image tensor.
    return (
        type(t) is torch.Tensor
        and t.is_cpu
        and not t.requires_grad
        and t.dtype not in _QUANTIZED
        and t.layout is torch.strided
    )


def nbytes_of(spec: Union[Slot, Rows]) -> int:
    """Bytes of a slot's or rows' region."""
    if isinstance(spec, Slot):
        return _numel(spec.shape) * spec.dtype.itemsize
    return sum(spec.sizes) * _numel(spec.trailing or ()) * spec.dtype.itemsize


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def align(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`~mmpar.packing.PACK_ALIGN`."""
    return -(-n // PACK_ALIGN) * PACK_ALIGN


def _view(chunk: torch.Tensor, slot: Slot, cast: Optional[torch.dtype]) -> torch.Tensor:
    nbytes = _numel(slot.shape) * slot.dtype.itemsize
    t = chunk[slot.offset : slot.offset + nbytes].view(slot.dtype).view(slot.shape)
    return t.to(cast) if cast is not None and t.is_floating_point() else t


def cut(chunk: torch.Tensor, spec: Spec, raw: Any, cast: Optional[torch.dtype] = None) -> Any:
    """A container chunk's data, as views of ``chunk`` (its chunk's bytes, on any device).

    Args:
        chunk: 1-D ``uint8`` tensor, the bytes ``bounds[i]`` of a :class:`BatchBuffer`
            (or their copy on a device).
        spec: The chunk's :data:`Spec`.
        raw: What :func:`strip` left of the chunk's data: the items kept outside
            the buffer (for :class:`Items`), else ignored. With ``spec=None``, the
            whole data, returned as it is.
        cast: If given, floating-point tensors are cast to it (one cast per region).

    Returns:
        A tensor for a :class:`Slot`, a list of tensors for :class:`Rows` and
        :class:`Items` (the kept items in their places).
    """
    if spec is None:
        return raw
    if isinstance(spec, Slot):
        return _view(chunk, spec, cast)
    if isinstance(spec, Rows):
        n = sum(spec.sizes)
        flat = chunk[spec.offset : spec.offset + nbytes_of(spec)].view(spec.dtype)
        if cast is not None and flat.is_floating_point():
            flat = flat.to(cast)
        if spec.trailing is None:
            return list(flat.unbind(0))
        return list(flat.view((n,) + spec.trailing).split(spec.sizes))
    return [
        item if slot is None else _view(chunk, slot, cast) for slot, item in zip(spec.slots, raw)
    ]


def strip(data: Any, spec: Spec) -> Any:
    """A chunk's data without what the buffer holds: what :func:`cut` needs as ``raw``."""
    if spec is None:
        return data
    if isinstance(spec, Items):
        return [None if slot is not None else item for slot, item in zip(spec.slots, data)]
    return None


def matches(data: Any, built: Any, spec: Spec) -> bool:
    """Whether a chunk's data is still what was cut from the buffer (``built``): the
    same tensor objects, with their shapes, in the same list."""
    if spec is None:
        return True
    if isinstance(spec, Slot):
        return data is built and data.shape == spec.shape
    return type(data) is list and len(data) == len(built) and all(map(operator.is_, data, built))


class BatchBuffer:
    """The bytes of every bufferable tensor of a collated batch, one region per chunk.

    Args:
        data: 1-D ``uint8`` CPU tensor (shared memory in a DataLoader worker, pinned
            after :meth:`pinned`).
        bounds: ``(start, stop)`` of each chunk's bytes in ``data``, in chunk order.

    A :class:`BatchBuffer` pickles as its one storage and the bounds, so that
    every container of a batch that refers to it (through :mod:`pickle`'s memo)
    sends the storage once.
    """

    __slots__ = ("data", "bounds", "_pinned", "__weakref__")

    def __init__(self, data: torch.Tensor, bounds: Sequence[Tuple[int, int]]) -> None:
        if data.dtype != torch.uint8 or data.dim() != 1:
            raise ValueError(
                f"BatchBuffer: data must be a 1-D uint8 tensor, got {data.dtype} of shape "
                f"{tuple(data.shape)}"
            )
        self.data = data
        self.bounds: Tuple[Tuple[int, int], ...] = tuple(bounds)
        self._pinned: Optional[BatchBuffer] = None

    def __reduce__(self) -> Tuple[Any, ...]:
        return (BatchBuffer, (self.data, self.bounds))

    def __repr__(self) -> str:
        return f"BatchBuffer({self.data.numel()} bytes, {len(self.bounds)} chunks)"

    def chunk(self, index: int) -> torch.Tensor:
        """Chunk ``index``'s bytes: a 1-D ``uint8`` view."""
        start, stop = self.bounds[index]
        return self.data[start:stop]

    def pinned(self) -> "BatchBuffer":
        """This buffer in pinned memory: itself if it is pinned already, else one copy,
        made once and shared by every container of the batch."""
        if self.data.is_pinned():
            return self
        if self._pinned is None:
            self._pinned = BatchBuffer(self.data.pin_memory(), self.bounds)
        return self._pinned


def chunk_data(buffer: BatchBuffer, specs: Sequence[Spec], raws: Sequence[Any]) -> List[Any]:
    """A container's data (one entry per chunk) cut from ``buffer``."""
    return [cut(buffer.chunk(i), spec, raw) for i, (spec, raw) in enumerate(zip(specs, raws))]
