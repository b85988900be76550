"""Read the sampler contract of a dataset: its length, group ids and image sizes.

A dataset handed to the samplers needs ``len(dataset)`` and may expose:

* ``flag``: array-like of ``N`` integer group ids, one per sample (mmdet uses
  1 for landscape images, ``w / h > 1``, and 0 otherwise). Any integers work;
  samples of different ids never share a batch.
* ``img_sizes``: array-like of shape ``(N, 2)`` holding each sample's
  ``(h, w)`` as it will be batched (after resizing). Used by size-aware
  batching, and for the group ids when ``flag`` is absent.

Without ``flag`` the group id comes from ``img_sizes`` (1 when ``w / h > 1``,
else 0); without both every sample is in group 0.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

__all__ = ["dataset_groups", "dataset_length", "group_ids", "image_sizes"]


def dataset_length(dataset: Any, owner: str) -> int:
    """``len(dataset)``, with an error naming ``owner`` when it has none.

    Raises:
        TypeError: the dataset has no ``__len__``.
    """
    try:
        return len(dataset)
    except TypeError:
        raise TypeError(
            f"{owner}: dataset must define __len__, got {type(dataset).__name__}"
        ) from None


def image_sizes(dataset: Any, owner: str) -> Optional[np.ndarray]:
    """The dataset's ``img_sizes`` as a float array ``(N, 2)`` of ``(h, w)``, or ``None``.

    Raises:
        ValueError: ``img_sizes`` is not of shape ``(len(dataset), 2)``, or holds
            sizes that are not finite and positive.
    """
    raw = getattr(dataset, "img_sizes", None)
    if raw is None:
        return None
    n = dataset_length(dataset, owner)
    try:
        sizes = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{owner}: dataset.img_sizes must be numeric (h, w) pairs ({err})"
        ) from None
    if sizes.shape == (0,) and n == 0:
        return sizes.reshape(0, 2)
    if sizes.ndim != 2 or sizes.shape != (n, 2):
        raise ValueError(
            f"{owner}: dataset.img_sizes must have shape ({n}, 2) (one (h, w) per sample), "
            f"found shape {sizes.shape}"
        )
    bad = ~np.isfinite(sizes) | (sizes <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ValueError(
            f"{owner}: dataset.img_sizes must hold positive (h, w), sample {i} has "
            f"{sizes[i].tolist()}"
        )
    return sizes


def group_ids(dataset: Any, owner: str) -> np.ndarray:
    """One int64 group id per sample (see the module docstring for the rules).

    Raises:
        ValueError: ``flag`` is not one-dimensional of length ``len(dataset)`` or
            holds non-integer values; bad ``img_sizes`` (see :func:`image_sizes`).
    """
    n = dataset_length(dataset, owner)
    raw = getattr(dataset, "flag", None)
    if raw is None:
        sizes = image_sizes(dataset, owner)
        if sizes is None:
            return np.zeros(n, dtype=np.int64)
        return (sizes[:, 1] > sizes[:, 0]).astype(np.int64)
    flag = np.asarray(raw)
    if flag.ndim != 1 or flag.shape[0] != n:
        raise ValueError(
            f"{owner}: dataset.flag must hold one group id per sample, expected shape ({n},) "
            f"(len(dataset)), found shape {flag.shape}"
        )
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if flag.dtype.kind in "iub":
        return flag.astype(np.int64)
    if flag.dtype.kind == "f" and np.all(np.isfinite(flag)) and np.all(flag == np.round(flag)):
        return flag.astype(np.int64)
    raise ValueError(
        f"{owner}: dataset.flag must hold integer group ids, found dtype {flag.dtype} "
        f"(first values {flag[:5].tolist()})"
    )


def dataset_groups(
    dataset: Any, owner: str, size_aware: bool
) -> Tuple[int, np.ndarray, Optional[np.ndarray], np.ndarray]:
    """What a group sampler reads from ``dataset``, checked in this order.

    Args:
        dataset: Sized dataset, optionally with ``flag`` and ``img_sizes``.
        owner: Name of the sampler, for error messages.
        size_aware: Whether to read ``img_sizes`` (for size-aware batching).

    Returns:
        ``(num_samples, flag, sizes, group_sizes)``: ``len(dataset)``, the group
        id per sample (see :func:`group_ids`), the ``(h, w)`` per sample when
        ``size_aware`` (else ``None``, see :func:`image_sizes`), and the number
        of samples of each group, in ascending group id.

    Raises:
        TypeError: the dataset has no ``__len__``.
        ValueError: a ``flag`` or ``img_sizes`` that does not match the dataset.
    """
    num_samples = dataset_length(dataset, owner)
    flag = group_ids(dataset, owner)
    sizes = image_sizes(dataset, owner) if size_aware else None
    group_sizes = np.bincount(np.unique(flag, return_inverse=True)[1].ravel())
    return num_samples, flag, sizes, group_sizes
