"""How one scatter call splits its inputs: the number of pieces and their sizes.

Every field of one call must split into the same number of pieces. Collated
DataContainers set the cut (chunk ``i`` goes to target ``i``); plain tensors are
then cut at the same sample boundaries, so a target never holds one sample's
image with another sample's label. Without containers, tensors are cut like
``torch.chunk`` (or at explicit ``chunk_sizes``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, List, Optional, Sequence, Tuple

import torch

from mmpar._structures import child_path, dataclass_fields, is_dataclass_instance
from mmpar.data_container import DataContainer, as_container
from mmpar.type_handlers import get_handler
from mmpar.utils.checks import is_int

__all__ = ["Plan", "make_plan", "torch_chunk_sizes", "container_chunks"]


@dataclasses.dataclass
class Plan:
    """``n`` pieces; ``sizes`` the samples per piece when one cut serves all fields
    (containers or ``chunk_sizes``), ``None`` when each tensor is cut by itself."""

    n: int
    sizes: Optional[List[int]]
    dim: int


def torch_chunk_sizes(length: int, k: int) -> List[int]:
    """The sizes ``torch.chunk`` cuts ``length`` elements into for ``k`` chunks."""
    if length == 0:
        return [0] * k
    step = -(-length // k)
    full, rest = divmod(length, step)
    return [step] * full + ([rest] if rest else [])


def container_chunks(dc: DataContainer) -> List[Any]:
    """A container's chunks: its data if that is a list (as collate makes it), else one chunk."""
    data = dc.data
    return list(data) if isinstance(data, (list, tuple)) else [data]


def _chunk_sizes(dc: DataContainer) -> Optional[List[int]]:
    if not isinstance(dc.data, (list, tuple)):
        return None
    sizes = []
    for chunk in dc.data:
        if dc.stack and not dc.cpu_only and isinstance(chunk, torch.Tensor) and chunk.dim() > 0:
            sizes.append(chunk.shape[0])
        elif isinstance(chunk, (list, tuple)):
            sizes.append(len(chunk))
        else:
            return None
    return sizes


def _survey(obj: Any, path: str, dim: int, containers: list, splittables: list) -> None:
    """Record every container ``(path, chunks, sizes)`` and splittable ``(path, length)``."""
    if isinstance(obj, torch.Tensor):
        if obj.dim() == 0:
            return  # copied whole to every target
        d = dim if dim >= 0 else dim + obj.dim()
        if not 0 <= d < obj.dim():
            raise ValueError(
                f"scatter: field {path or 'inputs'!r} has shape {tuple(obj.shape)}, cannot split "
                f"along dim={dim}"
            )
        splittables.append((path or "inputs", obj.shape[d]))
        return
    if isinstance(obj, (str, bytes)):
        return
    dc = as_container(obj)
    if dc is not None:
        containers.append((path or "inputs", len(container_chunks(dc)), _chunk_sizes(dc)))
        return
    handler = get_handler(obj)
    if handler is not None:
        splittables.append((path or "inputs", handler.length(obj)))
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            _survey(v, child_path(path, k), dim, containers, splittables)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _survey(v, child_path(path, i), dim, containers, splittables)
    elif is_dataclass_instance(obj):
        for name in dataclass_fields(obj):
            _survey(getattr(obj, name), child_path(path, name), dim, containers, splittables)


def _check_chunk_sizes(chunk_sizes: Sequence[int], n_targets: int) -> List[int]:
    if not isinstance(chunk_sizes, (list, tuple)) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in chunk_sizes
    ):
        raise ValueError(
            f"scatter: chunk_sizes must be a list of positive ints, got {chunk_sizes!r}"
        )
    if not 0 < len(chunk_sizes) <= n_targets:
        raise ValueError(
            f"scatter: chunk_sizes gives {len(chunk_sizes)} pieces for {n_targets} target(s); "
            "expected one size per used target"
        )
    return list(chunk_sizes)


def _plan_from_containers(
    containers: list, splittables: list, n_targets: int, hint: str
) -> Tuple[int, Optional[List[int]]]:
    for path, count, _ in containers:
        if count == 0:
            raise ValueError(
                f"scatter: field {path!r} is a DataContainer holding no chunk (empty data); "
                "collate at least one sample into it"
            )
    path0, n, _ = containers[0]
    for path, count, _ in containers[1:]:
        if count != n:
            raise ValueError(
                f"scatter: every field must split into the same number of pieces; field {path0!r} "
                f"holds {n} chunks but field {path!r} holds {count}"
            )
    if n > n_targets:
        raise ValueError(
            f"scatter: field {path0!r} holds {n} chunks but only {n_targets} target(s) were given; "
            f"chunks are never dropped{hint}"
        )
    known = [(path, sizes) for path, _, sizes in containers if sizes is not None]
    sizes = known[0][1] if known else None
    for path, other in known[1:]:
        if other != sizes:
            raise ValueError(
                f"scatter: containers disagree on their chunks: field {known[0][0]!r} has chunk "
                f"sizes {sizes}, field {path!r} has {other}"
            )
    if n > 1:
        for path, length in splittables:
            if sizes is None:
                raise ValueError(
                    f"scatter: field {path!r} must be cut at the containers' chunk boundaries, "
                    "but their chunk sizes are unknown (collate the batch with mmpar.collate)"
                )
            if length != sum(sizes):
                raise ValueError(
                    f"scatter: field {path!r} holds {length} samples but the containers' chunks "
                    "hold "
                    f"{sizes} = {sum(sizes)}; every field of one call must hold the same samples"
                )
    return n, sizes


def make_plan(
    inputs: Any,
    n_targets: int,
    dim: int = 0,
    chunk_sizes: Optional[Sequence[int]] = None,
    max_size: Optional[int] = None,
    hint: str = "",
) -> Plan:
    """Decide how ``inputs`` splits over ``n_targets`` targets.

    Raises:
        ValueError: fields that split into different numbers of pieces, more
            pieces than targets, ``chunk_sizes`` that disagree with the inputs, or
            a piece larger than ``max_size``.
    """
    containers: list = []
    splittables: list = []
    _survey(inputs, "", dim, containers, splittables)
    if chunk_sizes is not None:
        chunk_sizes = _check_chunk_sizes(chunk_sizes, n_targets)
    if containers:
        n, sizes = _plan_from_containers(containers, splittables, n_targets, hint)
        if chunk_sizes is not None and chunk_sizes != sizes:
            raise ValueError(
                f"scatter: chunk_sizes={chunk_sizes} must equal the collated containers' chunk "
                f"sizes {sizes}"
            )
        pieces_per_field = [(containers[0][0], sizes)] if sizes else []
    elif chunk_sizes is not None:
        for path, length in splittables:
            if length != sum(chunk_sizes):
                raise ValueError(
                    f"scatter: chunk_sizes={chunk_sizes} sum to {sum(chunk_sizes)} but field "
                    f"{path!r} holds {length} along dim {dim}"
                )
        n, sizes = len(chunk_sizes), chunk_sizes
        pieces_per_field = [("chunk_sizes", sizes)]
    elif splittables:
        pieces_per_field = [
            (path, torch_chunk_sizes(length, n_targets)) for path, length in splittables
        ]
        n = len(pieces_per_field[0][1])
        for path, pieces in pieces_per_field[1:]:
            if len(pieces) != n:
                raise ValueError(
                    f"scatter: every field must split into the same number of pieces; field "
                    f"{pieces_per_field[0][0]!r} splits into {n} but field {path!r} into "
                    f"{len(pieces)} over {n_targets} target(s)"
                )
        sizes = None
    else:
        n, sizes, pieces_per_field = n_targets, None, []
    if max_size is not None:
        _check_max_size(max_size, pieces_per_field)
    return Plan(n=n, sizes=sizes, dim=dim)


def _check_max_size(max_size: int, pieces_per_field: list) -> None:
    if not is_int(max_size) or max_size < 1:
        raise ValueError(f"scatter: max_size must be a positive int, got {max_size!r}")
    for path, sizes in pieces_per_field:
        if max(sizes, default=0) > max_size:
            raise ValueError(
                f"scatter: max_size={max_size} but field {path!r} would give the targets {sizes} "
                "samples; samples are never dropped, use more targets or smaller batches"
            )
