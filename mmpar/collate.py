"""collate: batch samples into DataContainers, in chunks of ``samples_per_gpu``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, List, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import default_collate

from mmpar._structures import child_path, is_namedtuple, map_structure, rebuild_mapping
from mmpar.batch_buffer import BatchBuffer, bufferable, strip
from mmpar.batch_layout import BatchLayout, Claim
from mmpar.data_container import DataContainer, as_container, container_classes
from mmpar.stacking import fill_stack, pad_stack, plan_stack
from mmpar.type_handlers import get_handler, is_registered
from mmpar.utils.checks import is_int

__all__ = ["collate"]


def collate(batch: Sequence[Any], samples_per_gpu: int = 1) -> Any:
    """Batch a list of samples; the result has the structure of one sample.

    The batch is cut into consecutive chunks of ``samples_per_gpu`` samples (the
    last one may be shorter), one chunk per device. A field that is a
    :class:`DataContainer` (mmpar's, or mmcv 1.x's as mmdet 2.x pipelines emit
    it, see :func:`~mmpar.data_container.as_container`) becomes one mmpar
    container whose ``data`` holds one entry per chunk:

    * ``cpu_only``: the list of the chunk's data;
    * ``stack``: one tensor ``(n, *lead, *padded)``, each sample padded at the end
      of its last ``pad_dims`` dimensions to the largest size in the chunk (rounded
      up to ``size_divisor``) with its own ``padding_value``;
    * neither: the list of the chunk's tensors.

    The result keeps every flag of the first sample. The tensors of every
    container that is not ``cpu_only`` (plain, dense CPU tensors) are laid out in
    one :class:`~mmpar.batch_buffer.BatchBuffer` for the whole batch, one aligned
    region per chunk and field, and the containers hold views of it that never
    overlap (see :attr:`DataContainer.buffer`): inside a DataLoader worker that
    buffer is one shared-memory storage, so the batch leaves the worker in one
    piece. Lists and tuples are collated
    position by position into lists (namedtuples keep their type), mappings key by
    key, strings into lists of strings, registered types (see
    :func:`mmpar.register_type`) with their ``collate`` hook, and anything else
    (tensors, numpy arrays, numbers) over the whole batch as
    ``torch.utils.data.default_collate`` does.

    Args:
        batch: The samples, a list or tuple.
        samples_per_gpu: Samples per chunk, >= 1.

    Returns:
        The batched sample.

    Raises:
        TypeError: ``batch`` is not a list or tuple, ``samples_per_gpu`` is not an
            int, a ``stack=True`` field holds something else than a tensor, or a
            field's samples are of different kinds.
        ValueError: empty batch, ``samples_per_gpu`` < 1, or samples that disagree
            (keys, list lengths, container flags, stacked shapes or dtypes). The
            message names the field.
    """
    if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence):
        raise TypeError(
            f"collate: batch must be a list or tuple of samples, got {type(batch).__name__}"
        )
    if len(batch) == 0:
        raise ValueError("collate: batch is empty, expected at least one sample")
    if not is_int(samples_per_gpu):
        raise TypeError(
            f"collate: samples_per_gpu must be an int, got {type(samples_per_gpu).__name__}"
        )
    if samples_per_gpu < 1:
        raise ValueError(f"collate: samples_per_gpu must be >= 1, got {samples_per_gpu}")
    layout = BatchLayout(-(-len(batch) // samples_per_gpu))
    out = _collate(list(batch), samples_per_gpu, "", layout)
    buffer = layout.build()
    if buffer is None:
        return map_structure(out, _resolve_plain, is_leaf=is_registered)
    return map_structure(out, lambda x: _resolve(x, buffer), is_leaf=is_registered)


class _Pending:
    """Stands in for a container until the batch's buffer is built."""

    __slots__ = ("template", "chunks")

    def __init__(self, template: DataContainer, chunks: List[Any]) -> None:
        self.template = template
        self.chunks = chunks  # per chunk: (its Claim or None, its data outside the buffer)


def _resolve(x: Any, buffer: BatchBuffer) -> Any:
    if not isinstance(x, _Pending):
        return x
    specs = [None if claim is None else claim.spec for claim, _ in x.chunks]
    if all(spec is None for spec in specs):
        return _resolve_plain(x)
    raws = [strip(data, spec) for (_, data), spec in zip(x.chunks, specs)]
    return x.template.with_buffer(buffer, specs, raws)


def _resolve_plain(x: Any) -> Any:
    if not isinstance(x, _Pending):
        return x
    return x.template.with_data([data for _, data in x.chunks])


def _name(path: str) -> str:
    return f"collate: field {path!r}" if path else "collate: samples"


def _collate(samples: List[Any], samples_per_gpu: int, path: str, layout: BatchLayout) -> Any:
    elem = samples[0]
    if isinstance(elem, DataContainer) or as_container(elem) is not None:
        return _collate_containers(samples, samples_per_gpu, path, layout)
    _check_same_kind(samples, path)
    handler = get_handler(elem)
    if handler is not None:
        return handler.collate(samples)
    if isinstance(elem, (str, bytes)):
        return list(samples)
    if isinstance(elem, Mapping):
        return _collate_mappings(samples, samples_per_gpu, path, layout)
    if isinstance(elem, Sequence):
        return _collate_sequences(samples, samples_per_gpu, path, layout)
    return _default_collate(samples, path)


def _check_same_kind(samples: List[Any], path: str) -> None:
    """Every sample's value is of the first one's kind (containers included)."""
    elem = samples[0]
    if isinstance(elem, Mapping):
        kind: Any = Mapping
    elif isinstance(elem, (str, bytes)):
        kind = (str, bytes)
    elif isinstance(elem, Sequence):
        kind = Sequence
    else:
        kind = None
    containers = container_classes()
    for i, s in enumerate(samples):
        if isinstance(s, containers):
            raise ValueError(
                f"{_name(path)}: is a DataContainer in sample {i} but not in sample 0 "
                f"({type(elem).__name__}); wrap it in every sample or in none"
            )
        if kind is not None and (
            not isinstance(s, kind) or (kind is Sequence and isinstance(s, (str, bytes)))
        ):
            raise TypeError(
                f"{_name(path)}: sample 0 holds {type(elem).__name__}, sample {i} holds "
                f"{type(s).__name__}"
            )


def _collate_containers(
    samples: List[Any], samples_per_gpu: int, path: str, layout: BatchLayout
) -> Any:
    """Collate one field; ``samples`` (our own list) may hold mmcv's containers, adopted."""
    for i, s in enumerate(samples):
        if not isinstance(s, DataContainer):
            adopted = as_container(s)
            if adopted is None:
                raise ValueError(
                    f"{_name(path)}: is a DataContainer in sample 0 but {type(s).__name__} in "
                    f"sample {i}; wrap it in every sample or in none"
                )
            samples[i] = adopted
    elem: DataContainer = samples[0]
    for i, s in enumerate(samples):
        for flag in ("cpu_only", "stack") + (("pad_dims", "size_divisor") if elem.stack else ()):
            if getattr(s, flag) != getattr(elem, flag):
                raise ValueError(
                    f"{_name(path)}: {flag} must agree across samples, sample 0 has "
                    f"{getattr(elem, flag)!r}, sample {i} has {getattr(s, flag)!r}"
                )
        if (s.pixel_norm is None) != (elem.pixel_norm is None):
            raise ValueError(
                f"{_name(path)}: sample 0 has {'a' if elem.pixel_norm else 'no'} pixel_norm, "
                f"sample {i} has {'one' if s.pixel_norm else 'none'}; normalize every sample "
                "the same way"
            )
    chunks = [samples[i : i + samples_per_gpu] for i in range(0, len(samples), samples_per_gpu)]
    if elem.cpu_only:
        return elem.with_data([[s.data for s in chunk] for chunk in chunks])
    if not elem.stack:
        lists = [[s.data for s in chunk] for chunk in chunks]
        return _Pending(elem, [(layout.claim_list(c, data), data) for c, data in enumerate(lists)])
    return _Pending(
        elem,
        [
            _claim_stack(
                elem,
                chunk,
                c,
                layout,
                _chunk_name(path, c, c * samples_per_gpu, len(chunk)),
            )
            for c, chunk in enumerate(chunks)
        ],
    )


def _claim_stack(
    elem: DataContainer,
    chunk: List[DataContainer],
    index: int,
    layout: BatchLayout,
    field: str,
) -> Tuple[Optional[Claim], Any]:
    """Claim a chunk's padded stack in the buffer, or stack it now when its tensors
    cannot live there (on a GPU, tracking gradients). Raw pixels with a
    :class:`~mmpar.pixel_norm.PixelNorm` are normalized as they are written."""
    values = [s.padding_value for s in chunk]
    tensors = [s.raw_data for s in chunk]
    if not all(map(bufferable, tensors)):
        tensors = [s.data for s in chunk]  # normalized now, if they ask for it
        return None, pad_stack(tensors, elem.pad_dims, values, elem.size_divisor, field=field)
    norms = [s.pixel_norm for s in chunk] if elem.pixel_norm is not None else None
    dtype = torch.float32 if norms else tensors[0].dtype
    shape, fills = plan_stack(
        tensors, elem.pad_dims, values, elem.size_divisor, field=field, dtype=dtype
    )
    pad_dims = elem.pad_dims
    claim = layout.claim_stack(
        index, shape, dtype, lambda out: fill_stack(out, tensors, pad_dims, fills, norms)
    )
    return claim, None


def _chunk_name(path: str, chunk: int, start: int, size: int) -> str:
    # pad_stack numbers the samples within their chunk: say where the chunk starts.
    return f"{_name(path)} (chunk {chunk}: batch samples {start}..{start + size - 1})"


def _collate_mappings(
    samples: List[Mapping], samples_per_gpu: int, path: str, layout: BatchLayout
) -> Mapping:
    elem = samples[0]
    keys = list(elem)
    for i, s in enumerate(samples):
        if len(s) != len(keys) or any(k not in s for k in keys):
            missing = [k for k in keys if k not in s]
            extra = [k for k in s if k not in elem]
            raise ValueError(
                f"{_name(path)}: samples must have the same keys; sample {i} lacks {missing} "
                f"and has extra {extra} compared with sample 0"
            )
    return rebuild_mapping(
        elem,
        (
            (k, _collate([s[k] for s in samples], samples_per_gpu, child_path(path, k), layout))
            for k in keys
        ),
    )


def _collate_sequences(
    samples: List[Sequence], samples_per_gpu: int, path: str, layout: BatchLayout
) -> Any:
    elem = samples[0]
    for i, s in enumerate(samples):
        if len(s) != len(elem):
            raise ValueError(
                f"{_name(path)}: lists must have the same length in every sample, "
                f"sample 0 has {len(elem)}, sample {i} has {len(s)}"
            )
    columns = [
        _collate([s[j] for s in samples], samples_per_gpu, child_path(path, j), layout)
        for j in range(len(elem))
    ]
    if is_namedtuple(elem):
        return type(elem)(*columns)
    return columns


def _default_collate(samples: List[Any], path: str) -> Any:
    elem = samples[0]
    if isinstance(elem, (torch.Tensor, np.ndarray)):
        for i, s in enumerate(samples):
            if type(s) is not type(elem) or s.shape != elem.shape or s.dtype != elem.dtype:
                raise ValueError(
                    f"{_name(path)}: plain {type(elem).__name__} fields are stacked over the "
                    "whole batch "
                    f"and must agree in type, shape and dtype; sample 0 is {_describe(elem)}, "
                    f"sample {i} is {_describe(s)} (wrap the field in DataContainer(stack=True) "
                    "to pad it, or DataContainer() to keep a list)"
                )
    try:
        return default_collate(samples)
    except (TypeError, RuntimeError) as err:
        raise TypeError(f"{_name(path)}: cannot batch {type(elem).__name__} values: {err}") from err
    except (ValueError, OverflowError) as err:  # e.g. an int beyond 64 bits
        raise ValueError(
            f"{_name(path)}: cannot batch {type(elem).__name__} values: {err}"
        ) from err


def _describe(x: Any) -> str:
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return f"{type(x).__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    return type(x).__name__
