"""Pad tensors of different sizes and stack them, in one copy."""

from __future__ import annotations

import math
import mmap
import numbers
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.utils.data

from mmpar.pixel_norm import PixelNorm

__all__ = [
    "round_up",
    "padded_shape",
    "plan_stack",
    "fill_stack",
    "pad_stack",
    "empty_shared",
    "empty_large",
]

#: Batches of at least this many bytes are allocated in transparent huge pages.
HUGE_PAGE_MIN_BYTES = 8 << 20
_HUGE_PAGES = hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS")

Number = Union[int, float]


def round_up(size: int, divisor: Optional[int]) -> int:
    """``size`` rounded up to a multiple of ``divisor`` (``size`` itself when None)."""
    return size if divisor is None else -(-size // divisor) * divisor


def padded_shape(
    shapes: Sequence[Sequence[int]], pad_dims: Optional[int], size_divisor: Optional[int] = None
) -> Tuple[int, ...]:
    """The common shape of one sample after padding (without the batch dimension).

    Args:
        shapes: Each sample's shape; all of the same length.
        pad_dims: Number of trailing dimensions padded, or ``None`` for none.
        size_divisor: Round each padded dimension up to a multiple of it.

    Returns:
        The leading dimensions of the first shape followed by, for each of the last
        ``pad_dims`` dimensions, the largest size among the shapes (rounded up).
    """
    first = tuple(shapes[0])
    k = 0 if pad_dims is None else pad_dims
    lead = first[: len(first) - k]
    padded = []
    for d in range(len(first) - k, len(first)):
        padded.append(round_up(max(s[d] for s in shapes), size_divisor))
    return lead + tuple(padded)


def empty_shared(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor whose storage is allocated in shared memory.

    A DataLoader worker sends such a tensor to the main process by handing over
    the shared segment, without the copy that moving an ordinary tensor costs.
    This is what ``torch.utils.data.default_collate`` does for what it stacks;
    the storage constructor it uses is private, hence this one isolated call
    (``tests/test_stacking.py`` fails loudly if torch removes it).
    """
    numel = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    storage = torch.UntypedStorage._new_shared(numel * itemsize)
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))


def empty_large(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor; a large one is backed by transparent huge pages.

    A fresh batch of hundreds of megabytes is too large for the C allocator to
    reuse freed memory, so every batch faults in tens of thousands of new 4 KiB
    pages, which costs more than writing the batch. Asking the kernel for 2 MiB
    pages (``madvise(MADV_HUGEPAGE)`` on a private anonymous mapping) cuts the
    faults 512-fold. The mapping is released when the tensor's storage is freed.
    Falls back to ``torch.empty`` below :data:`HUGE_PAGE_MIN_BYTES` or where the
    platform has no such advice.
    """
    numel = math.prod(shape)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if not _HUGE_PAGES or nbytes < HUGE_PAGE_MIN_BYTES:
        return torch.empty(tuple(shape), dtype=dtype)
    buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buffer.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # kernel without THP: ordinary pages, still correct
        pass
    return torch.frombuffer(buffer, dtype=dtype, count=numel).view(tuple(shape))


def _check_stackable(tensors: Sequence[torch.Tensor], pad_dims: Optional[int], field: str) -> None:
    first = tensors[0]
    k = 0 if pad_dims is None else pad_dims
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(
                f"{field}: stack=True needs tensors, sample {i} holds {type(t).__name__}"
            )
        if t.dim() < k:
            raise ValueError(
                f"{field}: pad_dims={pad_dims} needs tensors of at least {k} dimensions, "
                f"sample {i} has shape {tuple(t.shape)}"
            )
        if t.dim() != first.dim() or t.shape[: t.dim() - k] != first.shape[: first.dim() - k]:
            what = "shapes" if pad_dims is None else f"dimensions before the last {k}"
            raise ValueError(
                f"{field}: {what} must agree to stack, sample 0 has shape {tuple(first.shape)}, "
                f"sample {i} has {tuple(t.shape)}"
            )
        if t.dtype != first.dtype:
            raise ValueError(
                f"{field}: dtypes must agree to stack, sample 0 is {first.dtype}, sample {i} is "
                f"{t.dtype}"
            )
        if t.device != first.device:
            raise ValueError(
                f"{field}: devices must agree to stack, sample 0 is on {first.device}, "
                f"sample {i} on {t.device}"
            )


def _fill_value(value: Number, dtype: torch.dtype, field: str, i: int) -> Number:
    """``value`` as written into a ``dtype`` tensor; raise unless ``dtype`` holds it.

    Floating dtypes take any float (``inf`` and ``nan`` included) whose magnitude
    fits; integer and bool dtypes take integers in their range only (``0.5``
    would be truncated and ``-1`` in uint8 wrapped, writing another value).
    """
    if dtype.is_complex:
        return value
    if dtype.is_floating_point:
        try:
            number = float(value)
        except OverflowError:  # an int beyond float64
            number = math.inf
        too_large = abs(number) > torch.finfo(dtype).max and (
            math.isfinite(number) or isinstance(value, numbers.Integral)
        )
        if too_large:
            raise ValueError(f"{field}: padding_value {value!r} of sample {i} overflows {dtype}")
        return number
    low, high = (0, 1) if dtype == torch.bool else (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
    integral = isinstance(value, numbers.Integral) or (
        math.isfinite(value) and float(value).is_integer()
    )
    if not integral or not low <= int(value) <= high:
        raise ValueError(
            f"{field}: padding_value {value!r} of sample {i} cannot be held by {dtype}; "
            f"expected an integer in [{low}, {high}]"
        )
    return int(value)


def plan_stack(
    tensors: Sequence[torch.Tensor],
    pad_dims: Optional[int],
    padding_values: Union[Number, Sequence[Number]] = 0,
    size_divisor: Optional[int] = None,
    field: str = "tensors",
    dtype: Optional[torch.dtype] = None,
) -> Tuple[Tuple[int, ...], List[Number]]:
    """Check that tensors can be padded and stacked, and say how.

    Arguments as :func:`pad_stack`; ``dtype`` is the stack's when it is not the
    tensors' (float32 for raw pixels normalized on the way, see :func:`fill_stack`).

    Returns:
        ``(shape, values)``: the stacked shape ``(N, *lead, p_1, ..., p_k)`` and
        each sample's padding value as its dtype holds it.

    Raises:
        As :func:`pad_stack`.
    """
    if len(tensors) == 0:
        raise ValueError(f"{field}: nothing to stack, got no tensors")
    _check_stackable(tensors, pad_dims, field)
    if isinstance(padding_values, numbers.Real):
        padding_values = [padding_values] * len(tensors)
    elif len(padding_values) != len(tensors):
        raise ValueError(
            f"{field}: padding_values must be one number or one per sample, got "
            f"{len(padding_values)} values for {len(tensors)} samples"
        )
    dtype = tensors[0].dtype if dtype is None else dtype
    values = [_fill_value(v, dtype, field, i) for i, v in enumerate(padding_values)]
    shape = (len(tensors),) + padded_shape([t.shape for t in tensors], pad_dims, size_divisor)
    return shape, values


def fill_stack(
    out: torch.Tensor,
    tensors: Sequence[torch.Tensor],
    pad_dims: Optional[int],
    values: Sequence[Number],
    norms: Optional[Sequence[Optional[PixelNorm]]] = None,
) -> None:
    """Write each tensor into its corner of ``out`` and fill only the margins.

    Args:
        out: The stacked tensor, of the shape :func:`plan_stack` gave.
        tensors: The ``N`` samples.
        pad_dims: As :func:`pad_stack`.
        values: One padding value per sample, as :func:`plan_stack` gave them.
        norms: Per sample, None or the :class:`~mmpar.pixel_norm.PixelNorm` that
            normalizes its raw ``(C, H, W)`` pixels into the float32 ``out``.
    """
    k = 0 if pad_dims is None else pad_dims
    norms = norms or [None] * len(tensors)
    for sample, t, value, norm in zip(out, tensors, values, norms):
        _fill_margins(sample, t.shape, k, value)
        corner = sample[tuple(slice(0, s) for s in t.shape)]
        if norm is None:
            corner.copy_(t)
        else:
            norm.write(corner, t)


def pad_stack(
    tensors: Sequence[torch.Tensor],
    pad_dims: Optional[int],
    padding_values: Union[Number, Sequence[Number]] = 0,
    size_divisor: Optional[int] = None,
    field: str = "tensors",
) -> torch.Tensor:
    """Pad tensors at the end of their last ``pad_dims`` dimensions and stack them.

    The batch is allocated once, each sample is copied into its corner, and only
    the margins are filled with the padding value: one write per element, no
    padded temporaries. Inside a DataLoader worker the batch lives in shared
    memory (see :func:`empty_shared`). The dtype is kept.

    Args:
        tensors: ``N`` tensors of shape ``(*lead, s_1, ..., s_k)`` with equal
            ``lead``, dtype and device.
        pad_dims: ``k``, the number of trailing dimensions padded, or ``None``
            (shapes must then agree).
        padding_values: One value for all samples, or one per sample.
        size_divisor: Round every padded dimension up to a multiple of it.
        field: Name of the field, for error messages.

    Returns:
        A tensor of shape ``(N, *lead, p_1, ..., p_k)``, ``p_j`` the largest
        ``s_j`` (rounded up to ``size_divisor``).

    Raises:
        TypeError: An entry is not a tensor.
        ValueError: Empty input, too few dimensions for ``pad_dims``, leading
            dimensions, dtypes or devices that disagree, or a padding value the
            dtype cannot hold (out of range or not an integer for integer and
            bool dtypes, overflowing for floating ones).
    """
    shape, values = plan_stack(tensors, pad_dims, padding_values, size_divisor, field)
    first = tensors[0]
    if first.device.type == "cpu" and torch.utils.data.get_worker_info() is not None:
        out = empty_shared(shape, first.dtype)
    elif first.device.type == "cpu":
        out = empty_large(shape, first.dtype)
    else:
        out = torch.empty(shape, dtype=first.dtype, device=first.device)
    fill_stack(out, tensors, pad_dims, values)
    return out


def _fill_margins(sample: torch.Tensor, content: torch.Size, k: int, value: Number) -> None:
    """Fill the part of ``sample`` outside ``content`` (the last ``k`` dims padded).

    The margin is cut into ``k`` disjoint slabs: slab ``j`` spans the content in
    the padded dims before ``j``, the padding in dim ``j`` and everything after.
    """
    ndim = sample.dim()
    for j in range(ndim - k, ndim):
        if content[j] == sample.shape[j]:
            continue
        index: List[slice] = [slice(None)] * ndim
        for d in range(ndim - k, j):
            index[d] = slice(0, content[d])
        index[j] = slice(content[j], None)
        sample[tuple(index)].fill_(value)
