"""Moving tensors to a device: batched host-to-GPU copies on a side stream, pinning, and
numpy arrays as tensors.

A detection batch holds a few large tensors (images) and many small ones (each
image's boxes and labels). One ``cudaMemcpy`` per small tensor costs far more in
launch overhead than in bytes, so the small ones bound for one device are packed
into one pinned byte buffer, copied once, and cut back into typed views on the
device. Copies run on a per-device side stream with ``non_blocking=True``; the
consuming (current) stream then waits on the copy stream, and every output
records the consuming stream so the caching allocator does not reuse its memory
while the consumer may still read it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch

from mmpar._structures import map_structure
from mmpar.data_container import as_container
from mmpar.packing import TensorGroup, packed_copy
from mmpar.pinning import pin_structure, pin_tensor
from mmpar.type_handlers import get_handler, is_registered

__all__ = [
    "PACK_LIMIT",
    "array_to_tensor",
    "map_tensors",
    "BatchedTransfer",
    "move",
    "to_device_batched",
    "pin_memory",
    "pin_tensor",
]

#: Tensors of at most this many bytes travel packed into one copy per device.
PACK_LIMIT = 1 << 20
_copy_streams: Dict[int, "torch.cuda.Stream"] = {}


def _copy_stream(device: torch.device) -> "torch.cuda.Stream":
    stream = _copy_streams.get(device.index)
    if stream is None:
        stream = _copy_streams[device.index] = torch.cuda.Stream(device)
    return stream


class BatchedTransfer:
    """Collects the tensors bound for one CUDA device and moves them in as few copies as possible.

    :meth:`add` starts the copy of a large CPU tensor at once, on the device's side
    stream, so that the DMA engine works while the caller walks the rest of the
    batch; small CPU tensors wait for :meth:`finish`, which packs them with one
    ``torch.cat`` per ``(dtype, trailing shape)`` group into one pinned buffer,
    copies that buffer in one ``non_blocking`` copy, and cuts it back into views
    with one ``torch.split`` per group. :meth:`add_group` takes a whole list (a
    container's per-image boxes) as one group, looking at every tensor once. The
    current stream then waits on the side stream and every output records the
    current stream, so the caching allocator does not hand out its memory while
    the consumer may still read it.

    Args:
        device: A CUDA device.
        dtype: If given, floating-point tensors are cast to it on the device.

    Raises:
        ValueError: ``device`` is not a CUDA device.
    """

    def __init__(self, device: torch.device, dtype: Optional[torch.dtype] = None) -> None:
        if device.type != "cuda":
            raise ValueError(f"BatchedTransfer: device must be a CUDA device, got {device}")
        self.device = (
            device
            if device.index is not None
            else torch.device("cuda", torch.cuda.current_device())
        )
        self.dtype = dtype
        self._out: List[Any] = []
        self._groups: List[TensorGroup] = []
        self._singles: Dict[Any, TensorGroup] = {}
        self._copied: List[torch.Tensor] = []
        self._current = torch.cuda.current_stream(self.device)
        self._stream = _copy_stream(self.device)

    def add(self, t: torch.Tensor) -> int:
        """Register ``t``; returns its index in what :meth:`finish` returns."""
        index = len(self._out)
        self._out.append(t)
        if not t.is_cpu:  # already on a GPU: an ordinary ordered copy on the current stream
            self._out[index] = t.to(self.device, non_blocking=True)
        elif t.nbytes <= PACK_LIMIT and not _tracks_grad(t):
            key = (t.dtype, tuple(t.shape[1:]) if t.dim() else None)
            group = self._singles.get(key)
            if group is None:
                group = self._singles[key] = TensorGroup(t.dtype, key[1])
                self._groups.append(group)
            group.add(index, t)
        else:
            # Packing copies bytes and so detaches: tensors that carry autograd history
            # (a data_parallel input requiring grad) travel by ``.to`` like large ones.
            with torch.cuda.device(self.device), torch.cuda.stream(self._stream):
                moved = t.to(self.device, non_blocking=True)
            self._out[index] = moved
            self._copied.append(moved)
        return index

    def add_bytes(self, data: torch.Tensor) -> torch.Tensor:
        """Start copying one batch buffer's bytes (1-D ``uint8``, on the CPU) to the device.

        Pinned bytes go in one asynchronous copy. Unpinned ones of at most
        :data:`PACK_LIMIT` bytes are pinned first (one host copy) so that the
        copy stays asynchronous; larger ones are copied as they are.

        Returns:
            The device copy, to cut views from at once; its contents may be read
            on the current stream once :meth:`finish` has ordered the streams.
        """
        if not data.is_pinned() and data.nbytes <= PACK_LIMIT:
            data = pin_tensor(data)
        with torch.cuda.device(self.device), torch.cuda.stream(self._stream):
            moved = data.to(self.device, non_blocking=True)
        self._copied.append(moved)
        return moved

    def add_group(self, tensors: List[Any]) -> Optional[int]:
        """Register a list of small CPU tensors of one dtype and one trailing shape (a
        container's per-image boxes or labels) as one group, looking at each tensor once.

        Returns:
            The index of the first tensor (the others follow in order), or None,
            registering nothing, when the list is not such a group (then add its
            items one by one).
        """
        first = tensors[0] if tensors else None
        if type(first) is not torch.Tensor or first.dim() == 0:
            return None
        dtype, trailing = first.dtype, first.shape[1:]
        grad = torch.is_grad_enabled()
        if not all(
            type(t) is torch.Tensor
            and t.is_cpu
            and t.dtype is dtype
            and t.shape[1:] == trailing
            and t.nbytes <= PACK_LIMIT
            and not (grad and t.requires_grad)
            for t in tensors
        ):
            return None
        start = len(self._out)
        self._out.extend(tensors)
        group = TensorGroup(dtype, tuple(trailing))
        group.indices = range(start, start + len(tensors))
        group.tensors = tensors
        self._groups.append(group)
        return start

    def finish(self) -> List[torch.Tensor]:
        """Copy the small tensors, order the streams and return every tensor moved, in order."""
        out = self._out
        if self._groups:
            with torch.cuda.device(self.device), torch.cuda.stream(self._stream):
                buffer = packed_copy(self._groups, out, self.device)
            self._copied.append(buffer)
        if self._copied:
            self._current.wait_stream(self._stream)
            for t in self._copied:
                t.record_stream(self._current)
        self._out, self._groups, self._singles, self._copied = [], [], {}, []
        if self.dtype is None:
            return out
        return [_cast(t, self.dtype) for t in out]  # casts run on the current stream


def to_device_batched(
    tensors: Sequence[torch.Tensor], device: torch.device, dtype: Optional[torch.dtype] = None
) -> List[torch.Tensor]:
    """Move tensors to one device, casting floating-point ones to ``dtype``.

    On a CPU target this is ``tensor.to``: no copy when nothing changes. On a
    CUDA target, CPU tensors of at most :data:`PACK_LIMIT` bytes go in one packed
    copy, larger ones (and ones that require grad, so autograd sees the copy)
    each in their own; all host-to-device copies run on a side
    stream that the current stream then waits on (see :class:`BatchedTransfer`).

    Args:
        tensors: Tensors on any devices.
        device: The target.
        dtype: If given, floating-point tensors are cast to it on the target.

    Returns:
        The moved tensors, in order.
    """
    if device.type != "cuda":
        return [move(t, device, dtype) for t in tensors]
    transfer = BatchedTransfer(device, dtype)
    tensors = list(tensors)
    if transfer.add_group(tensors) is None:
        for t in tensors:
            transfer.add(t)
    return transfer.finish()


def _tracks_grad(t: torch.Tensor) -> bool:
    return t.requires_grad and torch.is_grad_enabled()


def move(
    t: torch.Tensor, device: torch.device, dtype: Optional[torch.dtype] = None
) -> torch.Tensor:
    """``t`` on ``device``, floating-point tensors cast to ``dtype``; ``t`` itself
    when nothing changes. One tensor, one ordinary copy: for CPU targets."""
    return _cast(t.to(device), dtype)


def _cast(t: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.Tensor:
    if dtype is not None and t.is_floating_point():
        return t.to(dtype)
    return t


def pin_memory(data: Any) -> Any:
    """``data`` with every tensor (and registered type) in pinned memory.

    Containers are rebuilt with their types (dataclasses included);
    DataContainers (mmpar's, and mmcv 1.x's, adopted) pin their own data
    (``cpu_only`` ones are left alone); other objects are returned as they are.
    """
    return pin_structure(data, adopt=as_container)


def _numeric(array: np.ndarray) -> bool:
    """Whether torch has a dtype for the array's: bools, ints, floats and complex
    numbers, but not strings, objects, dates or long doubles."""
    kind, size = array.dtype.kind, array.dtype.itemsize
    return kind in "biuf" and size <= 8 or kind == "c" and size <= 16


def array_to_tensor(array: np.ndarray, contiguous: bool = False) -> torch.Tensor:
    """The array as a tensor, sharing its memory where torch can.

    A flipped view (negative strides, as ``np.fliplr`` makes), a read-only or a
    byte-swapped array is copied first (torch cannot wrap those); any other array,
    strided views included, is shared, so the tensor keeps the array's strides.

    Args:
        array: A numeric numpy array.
        contiguous: Return a C-contiguous tensor, copying a strided array once
            (e.g. the ``(C, H, W)`` transpose of an ``(H, W, C)`` image).
    """
    shareable = array.flags.writeable and array.dtype.isnative
    if contiguous:
        shareable = shareable and array.flags.c_contiguous
    if shareable and all(s >= 0 for s in array.strides):
        return torch.from_numpy(array)
    return torch.from_numpy(np.array(array, dtype=array.dtype.newbyteorder("="), order="C"))


def map_tensors(
    obj: Any, fn: Callable[[torch.Tensor], Any], device: torch.device, numpy_too: bool = False
) -> Any:
    """``obj`` rebuilt with ``fn`` applied to every tensor in it (and, with
    ``numpy_too``, to every numeric numpy array as a tensor); registered types are
    moved to ``device`` with their ``to`` hook; other leaves are kept."""

    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return fn(x)
        if numpy_too and isinstance(x, np.ndarray) and _numeric(x):
            return fn(array_to_tensor(x))
        handler = get_handler(x)
        return x if handler is None else handler.to(x, device)

    return map_structure(obj, leaf, is_leaf=is_registered)
