"""Container-aware scatter (batches to devices) and gather (results back)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from mmpar._scatter_plan import Plan, container_chunks, make_plan, torch_chunk_sizes
from mmpar._structures import (
    child_path,
    dataclass_fields,
    is_dataclass_instance,
    is_namedtuple,
    map_structure,
    rebuild_mapping,
)
from mmpar.batch_buffer import BatchBuffer, Rows, Slot, Spec, cut, strip
from mmpar.data_container import DataContainer, as_container
from mmpar.devices import Target, resolve_targets
from mmpar.transfer import BatchedTransfer, map_tensors, move
from mmpar.type_handlers import get_handler
from mmpar.utils.checks import is_int

__all__ = ["scatter", "scatter_kwargs", "to_device"]


class _Pending:
    """Stands in for a tensor until the batched copy to its target is done."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _PendingList:
    """Stands in for a plain list of tensors (a container's chunk of boxes or labels)."""

    __slots__ = ("start", "stop")

    def __init__(self, start: int, stop: int) -> None:
        self.start = start
        self.stop = stop


class _PendingCut:
    """Stands in for a buffered container chunk until its bytes' copy is ordered before use."""

    __slots__ = ("data", "spec", "raw")

    def __init__(self, data: torch.Tensor, spec: Spec, raw: Any) -> None:
        self.data = data
        self.spec = spec
        self.raw = raw


class _Target:
    """One target of a scatter: moves (or, on CUDA, collects) the tensors bound for it."""

    def __init__(self, device: torch.device, dtype: Optional[torch.dtype]) -> None:
        self.device = device
        self.dtype = dtype
        self.transfer: Optional[BatchedTransfer] = None
        self._copies: Dict[Tuple[int, int], Tuple[BatchBuffer, torch.Tensor]] = {}

    def _transfer(self) -> BatchedTransfer:
        if self.transfer is None:
            self.transfer = BatchedTransfer(self.device, self.dtype)
        return self.transfer

    def move(self, t: torch.Tensor) -> Any:
        if self.device.type == "cpu":
            return move(t, self.device, self.dtype)
        return _Pending(self._transfer().add(t))

    def move_tree(self, obj: Any) -> Any:
        """Move every tensor in ``obj`` (a container's chunk); numpy arrays become tensors."""
        if self.device.type != "cpu" and type(obj) is list and obj:
            # The common chunk, a list of per-image boxes or labels: one group, one placeholder.
            start = self._transfer().add_group(obj)
            if start is not None:
                return _PendingList(start, start + len(obj))
        return map_tensors(obj, self.move, self.device, numpy_too=True)

    def move_chunk(self, dc: DataContainer, index: int, chunk: Any) -> Any:
        """Move container ``dc``'s chunk ``index``: on a CUDA target, a buffered chunk's
        bytes go in one copy (shared by every container of the batch) and its views
        are cut on the device; anything else as :meth:`move_tree`."""
        buffered = dc.buffer
        spec = None if buffered is None else buffered[1][index]
        if spec is None:
            return self.move_tree(chunk)
        if self.device.type != "cuda":
            if self.dtype is None and isinstance(spec, (Slot, Rows)):
                return chunk  # CPU views, nothing to convert: as they are, without a walk
            return self.move_tree(chunk)
        buffer = buffered[0]
        key = (id(buffer), index)
        copied = self._copies.get(key)
        if copied is None:
            copied = self._copies[key] = (buffer, self._transfer().add_bytes(buffer.chunk(index)))
        raw = strip(chunk, spec)
        return _PendingCut(copied[1], spec, None if raw is None else self.move_tree(raw))

    def finish(self, obj: Any) -> Any:
        if self.transfer is None:
            return obj
        moved = self.transfer.finish()
        self.transfer, self._copies = None, {}
        return _fill(obj, moved, self.dtype)


def _fill(obj: Any, moved: List[torch.Tensor], dtype: Optional[torch.dtype]) -> Any:
    """Replace every placeholder in ``obj``; unchanged parts keep their identity."""

    def leaf(x: Any) -> Any:
        if isinstance(x, _Pending):
            return moved[x.index]
        if isinstance(x, _PendingList):
            return moved[x.start : x.stop]
        if isinstance(x, _PendingCut):
            return cut(x.data, x.spec, _fill(x.raw, moved, dtype), dtype)
        return x

    return map_structure(obj, leaf)


def _split(obj: Any, plan: Plan, targets: List[_Target], path: str) -> Optional[List[Any]]:
    """``obj`` cut into ``plan.n`` per-target pieces, or ``None``: give ``obj`` itself to all."""
    if isinstance(obj, torch.Tensor):
        if obj.dim() == 0 or plan.n == 1:
            pieces: Sequence[torch.Tensor] = [obj] * plan.n
        elif plan.sizes is not None:
            pieces = torch.split(obj, plan.sizes, plan.dim)
        else:
            pieces = torch.chunk(obj, len(targets), plan.dim)
        return [target.move(p) for target, p in zip(targets, pieces)]
    if isinstance(obj, (str, bytes)):
        return None
    dc = as_container(obj)
    if dc is not None:
        chunks = container_chunks(dc)
        if dc.cpu_only:
            return chunks
        return [target.move_chunk(dc, i, c) for i, (target, c) in enumerate(zip(targets, chunks))]
    handler = get_handler(obj)
    if handler is not None:
        if plan.n == 1:
            parts: Sequence[Any] = [obj]
        else:
            parts = handler.split(
                obj, plan.sizes or torch_chunk_sizes(handler.length(obj), len(targets))
            )
        return [handler.to(p, target.device) for target, p in zip(targets, parts)]
    if isinstance(obj, Mapping):
        split = {k: _split(v, plan, targets, child_path(path, k)) for k, v in obj.items()}
        if all(s is None for s in split.values()):
            return None
        return [
            rebuild_mapping(obj, ((k, obj[k] if s is None else s[i]) for k, s in split.items()))
            for i in range(plan.n)
        ]
    if isinstance(obj, (list, tuple)):
        columns = [_split(v, plan, targets, child_path(path, j)) for j, v in enumerate(obj)]
        if all(c is None for c in columns):
            return None
        rows = [[v if c is None else c[i] for v, c in zip(obj, columns)] for i in range(plan.n)]
        if is_namedtuple(obj):
            return [type(obj)(*row) for row in rows]
        return [tuple(row) for row in rows] if isinstance(obj, tuple) else rows
    if is_dataclass_instance(obj):
        fields = {
            name: _split(getattr(obj, name), plan, targets, child_path(path, name))
            for name in dataclass_fields(obj)
        }
        fields = {k: v for k, v in fields.items() if v is not None}
        if not fields:
            return None
        return [
            dataclasses.replace(obj, **{k: v[i] for k, v in fields.items()}) for i in range(plan.n)
        ]
    return None


def _check_dtype(dtype: Optional[torch.dtype]) -> None:
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise ValueError(
            f"scatter: dtype must be a floating-point torch.dtype or None, got {dtype!r}"
        )


def _scatter(
    inputs: Any,
    target_gpus: Sequence[Target],
    dim: int,
    chunk_sizes: Optional[Sequence[int]],
    max_size: Optional[int],
    dtype: Optional[torch.dtype],
    hint: str = "",
) -> List[Any]:
    devices = resolve_targets(target_gpus)
    _check_dtype(dtype)
    if not is_int(dim):
        raise TypeError(f"scatter: dim must be an int, got {type(dim).__name__}")
    plan = make_plan(inputs, len(devices), dim, chunk_sizes, max_size, hint)
    targets = [_Target(d, dtype) for d in devices[: plan.n]]
    pieces = _split(inputs, plan, targets, "")
    if pieces is None:
        return [inputs] * plan.n
    return [target.finish(piece) for target, piece in zip(targets, pieces)]


def scatter(
    inputs: Any,
    target_gpus: Sequence[Target],
    dim: int = 0,
    chunk_sizes: Optional[Sequence[int]] = None,
    max_size: Optional[int] = None,
    dtype: Optional[torch.dtype] = None,
) -> List[Any]:
    """Split a batch over targets and move each piece there, unwrapping DataContainers.

    * A tensor is cut along ``dim`` like ``torch.chunk`` (at the containers' chunk
      boundaries when the inputs hold collated containers, or at ``chunk_sizes``);
      for a single target it is passed whole (on the CPU: the tensor itself).
    * A DataContainer (mmpar's or mmcv 1.x's) gives its chunk ``i`` to target ``i``:
      ``cpu_only`` data as it is, other data (tensors, lists of tensors, numpy arrays as
      tensors) moved.
    * Tuples, lists, dicts, namedtuples and dataclasses are rebuilt per target.
    * Strings, numbers, ``None``, numpy arrays outside containers and containers
      holding nothing to split are given, by reference, to every used target.

    Args:
        inputs: The batch, typically what :func:`mmpar.collate` returned.
        target_gpus: Targets: ints (``-1`` = CPU), ``"cpu"``, ``"cuda:k"`` or
            ``torch.device``; a target may repeat (``["cpu", "cpu"]``).
        dim: Dimension along which plain tensors are cut.
        chunk_sizes: Explicit samples per used target, summing to the size of ``dim``.
        max_size: The most samples any one target may receive (a check, not a rule).
        dtype: Floating-point tensors are cast to it on their target.

    Returns:
        One entry per used target, in order: as many as the pieces the inputs split
        into (all targets when nothing splits), never more than the targets.

    Raises:
        TypeError: Bad ``target_gpus`` or ``dim``.
        ValueError: No targets, an unknown or unavailable target, fields that split
            into different numbers of pieces or more pieces than targets, bad
            ``chunk_sizes``, a piece over ``max_size``, or a non-float ``dtype``.
    """
    return _scatter(inputs, target_gpus, dim, chunk_sizes, max_size, dtype)


def scatter_kwargs(
    inputs: Any,
    kwargs: Optional[Dict[str, Any]],
    target_gpus: Sequence[Target],
    dim: int = 0,
    chunk_sizes: Optional[Sequence[int]] = None,
    max_size: Optional[int] = None,
    dtype: Optional[torch.dtype] = None,
) -> Tuple[Tuple[Tuple[Any, ...], ...], Tuple[Dict[str, Any], ...]]:
    """Scatter positional and keyword inputs together (one cut for both).

    Returns:
        ``(inputs, kwargs)``: a tuple of positional-argument tuples and a tuple of
        keyword dicts, one of each per used target.

    Raises:
        TypeError: ``kwargs`` is not a mapping or ``None``; otherwise as :func:`scatter`.
        ValueError: As :func:`scatter`.
    """
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(
            f"scatter_kwargs: kwargs must be a dict or None, got {type(kwargs).__name__}"
        )
    if inputs is None:
        inputs = ()
    elif not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    # One mapping, so that one plan cuts both and errors name "inputs[0]" or "kwargs.img".
    both = {"inputs": tuple(inputs), "kwargs": dict(kwargs or {})}
    pieces = _scatter(both, target_gpus, dim, chunk_sizes, max_size, dtype)
    return tuple(p["inputs"] for p in pieces), tuple(p["kwargs"] for p in pieces)


def to_device(data: Any, device: Target) -> Any:
    """Unwrap every DataContainer of a batch collated for one device and move it there.

    For code that uses no wrapper: ``model(**to_device(batch, "cuda:0"))``.

    Raises:
        ValueError: A container holds several chunks (use :func:`scatter`), or
            ``device`` is unknown or unavailable.
    """
    hint = (
        "; to_device moves a batch collated for one device, use scatter(data, targets) to split it"
    )
    return _scatter(data, [device], 0, None, None, None, hint)[0]
