"""Moving tensors to a device: batched host-to-GPU copies on a side stream, and pinning.

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

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ._structures import map_structure
from .data_container import as_container
from .type_handlers import get_handler, is_registered

__all__ = ["PACK_LIMIT", "move", "pack", "unpack", "to_device_batched", "pin_memory"]

#: Tensors of at most this many bytes travel packed into one copy per device.
PACK_LIMIT = 1 << 20
#: Byte alignment of each packed tensor, enough for any dtype's ``view``.
_ALIGN = 64

_Layout = List[Tuple[int, int, torch.dtype, torch.Size]]  # offset, nbytes, dtype, shape
_copy_streams: Dict[int, "torch.cuda.Stream"] = {}


def pack(tensors: Sequence[torch.Tensor], pin: bool = False) -> Tuple[torch.Tensor, _Layout]:
    """Copy tensors into one flat ``uint8`` buffer.

    Args:
        tensors: CPU tensors of any dtype and shape.
        pin: Allocate the buffer in pinned (page-locked) memory.

    Returns:
        ``(buffer, layout)``: the bytes of every tensor, each starting at a
        multiple of 64, and for each tensor its ``(offset, nbytes, dtype, shape)``.
    """
    layout: _Layout = []
    offset = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        layout.append((offset, nbytes, t.dtype, t.shape))
        offset += -(-nbytes // _ALIGN) * _ALIGN
    buffer = torch.empty(offset, dtype=torch.uint8, pin_memory=pin)
    for t, (start, nbytes, _, _) in zip(tensors, layout):
        if nbytes:
            buffer[start : start + nbytes].copy_(t.contiguous().reshape(-1).view(torch.uint8))
    return buffer, layout


def unpack(buffer: torch.Tensor, layout: _Layout) -> List[torch.Tensor]:
    """Typed views into a buffer made by :func:`pack` (on whatever device it is now)."""
    return [
        buffer[start : start + nbytes].view(dtype).view(shape)
        for start, nbytes, dtype, shape in layout
    ]


def _copy_stream(device: torch.device) -> "torch.cuda.Stream":
    stream = _copy_streams.get(device.index)
    if stream is None:
        stream = _copy_streams[device.index] = torch.cuda.Stream(device)
    return stream


def to_device_batched(
    tensors: Sequence[torch.Tensor], device: torch.device, dtype: Optional[torch.dtype] = None
) -> List[torch.Tensor]:
    """Move tensors to one device, casting floating-point ones to ``dtype``.

    On a CPU target this is ``tensor.to``: no copy when nothing changes. On a
    CUDA target, CPU tensors of at most :data:`PACK_LIMIT` bytes go in one packed
    copy, larger ones (and ones that require grad, so autograd sees the copy)
    each in their own; all host-to-device copies run on a side
    stream that the current stream then waits on.

    Args:
        tensors: Tensors on any devices.
        device: The target.
        dtype: If given, floating-point tensors are cast to it on the target.

    Returns:
        The moved tensors, in order.
    """
    if device.type != "cuda":
        return [move(t, device, dtype) for t in tensors]
    out: List[Optional[torch.Tensor]] = [None] * len(tensors)
    # Packing copies bytes and so detaches: tensors that carry autograd history
    # (a data_parallel input requiring grad) travel by ``.to`` like large ones.
    packable = [t.device.type == "cpu" and _nbytes(t) <= PACK_LIMIT and not _tracks_grad(t) for t in tensors]
    small = [i for i, ok in enumerate(packable) if ok]
    large = [i for i, (t, ok) in enumerate(zip(tensors, packable)) if t.device.type == "cpu" and not ok]
    for i, t in enumerate(tensors):
        if t.device.type != "cpu":  # already on a GPU: an ordinary ordered copy
            out[i] = t.to(device, non_blocking=True)
    current = torch.cuda.current_stream(device)
    stream = _copy_stream(device)
    copied: List[torch.Tensor] = []
    with torch.cuda.device(device), torch.cuda.stream(stream):
        if small:
            buffer, layout = pack([tensors[i] for i in small], pin=True)
            on_device = buffer.to(device, non_blocking=True)
            copied.append(on_device)
            for i, view in zip(small, unpack(on_device, layout)):
                out[i] = view
        for i in large:
            out[i] = tensors[i].to(device, non_blocking=True)
            copied.append(out[i])
    current.wait_stream(stream)
    for t in copied:
        t.record_stream(current)
    return [_cast(t, dtype) for t in out]  # casts run on the current stream


def _tracks_grad(t: torch.Tensor) -> bool:
    return t.requires_grad and torch.is_grad_enabled()


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def move(t: torch.Tensor, device: torch.device, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
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
    DataContainers pin their own data (``cpu_only`` ones are left alone); other
    objects are returned as they are.
    """
    return map_structure(data, _pin_leaf, is_leaf=is_registered)


def _pin_leaf(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.pin_memory()
    handler = get_handler(obj)
    if handler is not None:
        return handler.pin_memory(obj)
    container = as_container(obj)
    if container is not None:
        return container.pin_memory()
    if hasattr(obj, "pin_memory") and not isinstance(obj, type):
        return obj.pin_memory()
    return obj
