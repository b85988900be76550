"""How much of a batch is padding: per batch, or over a whole loader epoch.

"Pixels" are spatial positions ``(y, x)`` of the padded images; channels are
not counted. The padded share of a batch is::

    padded_pixels / total_pixels,  total_pixels = sum over chunks of n * H * W

where a chunk is what one GPU gets (``samples_per_gpu`` images stacked to
``(n, C, H, W)``) and ``padded_pixels = total_pixels - sum of h * w`` over its
images.

The true ``(h, w)`` of each image are not in a padded tensor, so for collated
batches they come from ``img_metas[i]["img_shape"]`` (``(h, w, ...)``, the
shape after resizing and before padding, as the detection pipelines record
it). Without metadata, pass the sizes themselves: one list of ``(h, w)`` per
chunk, with the ``size_divisor`` the collate would round up to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sized
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from mmpar.data_container import DataContainer
from mmpar.stacking import round_up

__all__ = ["PaddingStats", "padding_counts", "padding_ratio", "loader_padding_ratio"]


@dataclass(frozen=True)
class PaddingStats:
    """Pixel counts of one or more batches.

    Attributes:
        padded_pixels: Pixels of the padded tensors that hold padding.
        total_pixels: All pixels of the padded tensors.
        batches: Number of batches counted.
    """

    padded_pixels: int = 0
    total_pixels: int = 0
    batches: int = 0

    @property
    def ratio(self) -> float:
        """``padded_pixels / total_pixels`` (0.0 when nothing was counted)."""
        return self.padded_pixels / self.total_pixels if self.total_pixels else 0.0

    def __add__(self, other: "PaddingStats") -> "PaddingStats":
        if not isinstance(other, PaddingStats):
            return NotImplemented
        return PaddingStats(
            self.padded_pixels + other.padded_pixels,
            self.total_pixels + other.total_pixels,
            self.batches + other.batches,
        )


def _is_int_at_least(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _round_up(size: float, divisor: Optional[int]) -> int:
    return round_up(int(math.ceil(size)), divisor)  # sizes may be fractional estimates


def _counts_from_sizes(
    chunks: Sequence[Sequence[Sequence[float]]], size_divisor: Optional[int]
) -> PaddingStats:
    if isinstance(chunks, (str, bytes)) or not isinstance(chunks, (Sequence, np.ndarray)):
        raise TypeError(
            "padding_counts: sizes must be a list of chunks, each a list of (h, w); "
            f"got {type(chunks).__name__}"
        )
    padded = total = 0
    for c, chunk in enumerate(chunks):
        pairs = _pairs(chunk, f"sizes[{c}]")
        height = _round_up(max(h for h, _ in pairs), size_divisor)
        width = _round_up(max(w for _, w in pairs), size_divisor)
        chunk_total = len(pairs) * height * width
        total += chunk_total
        padded += chunk_total - sum(int(h) * int(w) for h, w in pairs)
    return PaddingStats(padded, total, 1)


def _pairs(chunk: Any, where: str) -> List[Tuple[float, float]]:
    if len(chunk) == 0:
        raise ValueError(f"padding_counts: {where} is an empty chunk, expected at least one (h, w)")
    pairs = []
    for i, size in enumerate(chunk):
        if len(size) < 2 or size[0] <= 0 or size[1] <= 0:
            raise ValueError(
                f"padding_counts: {where}[{i}] must be a positive (h, w), got {size!r}"
            )
        pairs.append((size[0], size[1]))
    return pairs


def _meta_chunks(img_metas: Any) -> List[List[Any]]:
    if isinstance(img_metas, DataContainer):
        img_metas = img_metas.data
    if not isinstance(img_metas, Sequence) or not all(isinstance(c, Sequence) for c in img_metas):
        raise TypeError(
            "padding_counts: img_metas must be a collated DataContainer or a list of per-chunk "
            f"lists of dicts, got {type(img_metas).__name__}"
        )
    return [list(c) for c in img_metas]


def _counts_from_tensors(img: DataContainer, img_metas: Any) -> PaddingStats:
    if not img.stack or not isinstance(img.data, list):
        raise ValueError(
            "padding_counts: img must be a collated stack=True DataContainer (data = one tensor "
            f"per chunk), got stack={img.stack} with {type(img.data).__name__} data"
        )
    if img_metas is None:
        raise ValueError(
            "padding_counts: the true image sizes are unknown; pass img_metas (with 'img_shape' "
            "per image) or a collated batch dict that holds them"
        )
    metas = _meta_chunks(img_metas)
    if len(metas) != len(img.data):
        raise ValueError(
            f"padding_counts: img has {len(img.data)} chunks but img_metas has {len(metas)}"
        )
    padded = total = 0
    for c, (tensor, chunk_metas) in enumerate(zip(img.data, metas)):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() < 3:
            raise ValueError(
                f"padding_counts: img chunk {c} must be a tensor (n, ..., H, W), got {tensor!r:.80}"
            )
        n, height, width = tensor.shape[0], tensor.shape[-2], tensor.shape[-1]
        if len(chunk_metas) != n:
            raise ValueError(
                f"padding_counts: img chunk {c} holds {n} images but img_metas[{c}] has "
                f"{len(chunk_metas)}"
            )
        for i, meta in enumerate(chunk_metas):
            shape = meta.get("img_shape") if isinstance(meta, Mapping) else None
            if shape is None:
                raise ValueError(f"padding_counts: img_metas[{c}][{i}] has no 'img_shape'")
            h, w = int(shape[0]), int(shape[1])
            if not (0 < h <= height and 0 < w <= width):
                raise ValueError(
                    f"padding_counts: img_metas[{c}][{i}]['img_shape'] = {tuple(shape)} does not "
                    f"fit the padded chunk of (H, W) = ({height}, {width})"
                )
            padded += height * width - h * w
        total += n * height * width
    return PaddingStats(padded, total, 1)


def padding_counts(
    batch_or_sizes: Any,
    size_divisor: Optional[int] = None,
    img_metas: Any = None,
    key: str = "img",
    meta_key: str = "img_metas",
) -> PaddingStats:
    """Padded and total pixels of one batch.

    Args:
        batch_or_sizes: One of

            * a collated batch (a mapping) holding ``batch[key]``, a stacked
              :class:`DataContainer`, and ``batch[meta_key]``, the collated metas;
            * a collated ``img`` DataContainer (with ``img_metas`` given);
            * a list of chunks, each a list of ``(h, w)`` sizes.
        size_divisor: For sizes only: round the padded ``H`` and ``W`` of each
            chunk up to a multiple of it, as collate does.
        img_metas: The metas of a DataContainer input: a collated
            ``cpu_only`` DataContainer or a list of per-chunk lists of dicts with
            ``"img_shape"``.
        key: Image field of a batch mapping.
        meta_key: Metadata field of a batch mapping.

    Returns:
        The counts, with ``batches=1``.

    Raises:
        TypeError: an input of another kind.
        ValueError: a missing field, missing ``img_shape``, an empty chunk,
            metas that do not match the images, or ``size_divisor`` with tensors.
    """
    if isinstance(batch_or_sizes, Mapping):
        if key not in batch_or_sizes:
            raise ValueError(
                f"padding_counts: batch has no field {key!r} (fields: {sorted(batch_or_sizes)})"
            )
        if img_metas is None:
            img_metas = batch_or_sizes.get(meta_key)
        batch_or_sizes = batch_or_sizes[key]
    if isinstance(batch_or_sizes, DataContainer):
        if size_divisor is not None:
            raise ValueError(
                "padding_counts: size_divisor is for sizes input only; "
                "a collated tensor already holds its padding"
            )
        return _counts_from_tensors(batch_or_sizes, img_metas)
    if size_divisor is not None and not _is_int_at_least(size_divisor, 1):
        raise ValueError(
            f"padding_counts: size_divisor must be a positive int or None, got {size_divisor!r}"
        )
    return _counts_from_sizes(batch_or_sizes, size_divisor)


def padding_ratio(
    batch_or_sizes: Any,
    size_divisor: Optional[int] = None,
    img_metas: Any = None,
    key: str = "img",
    meta_key: str = "img_metas",
) -> float:
    """Share of padded pixels in one batch, in ``[0, 1)``.

    Takes the same arguments as :func:`padding_counts` and raises the same errors.
    """
    return padding_counts(batch_or_sizes, size_divisor, img_metas, key, meta_key).ratio


def loader_padding_ratio(
    loader: Iterable[Any],
    key: str = "img",
    max_batches: Optional[int] = None,
    meta_key: str = "img_metas",
) -> PaddingStats:
    """Padding over the batches of one pass through ``loader``.

    Args:
        loader: Yields collated batch mappings (e.g. from
            :func:`mmpar.data.builder.build_dataloader`).
        key: Image field.
        max_batches: Stop after this many batches (``None``: the whole epoch,
            i.e. ``len(loader)`` batches when the loader has a length, so that
            an endless loader (``runner_type="IterBasedRunner"``) stops after
            one pass).
        meta_key: Metadata field with ``img_shape`` per image.

    Returns:
        The summed counts; ``ratio`` is the padded share of the epoch.

    Raises:
        ValueError: ``max_batches`` < 0, or a batch rejected by :func:`padding_counts`.
    """
    if max_batches is not None and not _is_int_at_least(max_batches, 0):
        raise ValueError(
            f"loader_padding_ratio: max_batches must be an int >= 0 or None, got {max_batches!r}"
        )
    stats = PaddingStats()
    if max_batches is None and isinstance(loader, Sized):
        try:
            max_batches = len(loader)
        except TypeError:  # a DataLoader over an IterableDataset without __len__
            pass
    if max_batches == 0:
        return stats
    for batch in loader:
        stats = stats + padding_counts(batch, key=key, meta_key=meta_key)
        if max_batches is not None and stats.batches >= max_batches:
            break
    return stats
