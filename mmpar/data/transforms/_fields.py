"""Helpers shared by the transforms: reading the results dict and its field lists.

A pipeline passes one ``results`` dict from step to step. Besides the data, it
names which keys hold images, boxes and segmentation maps, so that a geometric
transform moves all of them together:

* ``img_fields``: HWC (or HW) numpy images, e.g. ``["img"]``;
* ``bbox_fields``: ``(K, 4)`` float32 x1y1x2y2 pixel boxes, e.g.
  ``["gt_bboxes", "gt_bboxes_ignore"]``;
* ``seg_fields``: HW integer label maps, e.g. ``["gt_semantic_seg"]``.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Sequence, Tuple

import numpy as np

from mmpar.utils.checks import is_int

__all__ = [
    "require",
    "img_fields",
    "bbox_fields",
    "seg_fields",
    "add_field",
    "check_boxes",
    "check_pair",
    "image_shape",
]


def require(results: Mapping[str, Any], key: str, owner: str) -> Any:
    """``results[key]``, or a KeyError that says which step needed it.

    Raises:
        TypeError: ``results`` is not a dict.
        KeyError: ``key`` is missing.
    """
    if not isinstance(results, Mapping):
        raise TypeError(f"{owner}: results must be a dict, got {type(results).__name__}")
    if key not in results:
        raise KeyError(f"{owner}: results has no {key!r} (keys: {sorted(map(str, results))})")
    return results[key]


def _fields(results: Mapping[str, Any], name: str, default: List[str]) -> List[str]:
    return [k for k in results.get(name, default) if k in results]


def img_fields(results: Mapping[str, Any]) -> List[str]:
    """Keys of the images present in ``results`` (default ``["img"]``)."""
    return _fields(results, "img_fields", ["img"])


def bbox_fields(results: Mapping[str, Any]) -> List[str]:
    """Keys of the box arrays present in ``results``."""
    return _fields(results, "bbox_fields", ["gt_bboxes", "gt_bboxes_ignore", "proposals"])


def seg_fields(results: Mapping[str, Any]) -> List[str]:
    """Keys of the segmentation maps present in ``results``."""
    return _fields(results, "seg_fields", ["gt_semantic_seg"])


def add_field(results: dict, list_name: str, key: str) -> None:
    """Append ``key`` to the field list ``results[list_name]`` once."""
    names = results.setdefault(list_name, [])
    if key not in names:
        names.append(key)


def check_boxes(boxes: Any, field: str) -> np.ndarray:
    """``boxes`` as a float32 ``(K, 4)`` array.

    Raises:
        TypeError: ``boxes`` is not array-like of numbers.
        ValueError: its shape is not ``(K, 4)``.
    """
    try:
        arr = np.asarray(boxes, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"{field}: expected a (K, 4) array of numbers, got {type(boxes).__name__} ({err})"
        ) from None
    if arr.size == 0:
        return arr.reshape(0, 4)
    if arr.ndim != 2 or arr.shape[1] != 4:
        raise ValueError(f"{field}: expected boxes of shape (K, 4) x1y1x2y2, got shape {arr.shape}")
    return arr


def check_pair(value: Sequence[int], argument: str) -> Tuple[int, int]:
    """``value`` as a tuple of two positive ints (a ``(w, h)`` scale or an ``(h, w)`` size).

    Raises:
        ValueError: ``value`` is not a tuple or list of two positive ints; the
            message names ``argument``.
    """
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(is_int(v) and v > 0 for v in value)
    ):
        raise ValueError(f"{argument}: expected a pair of positive ints, got {value!r}")
    return int(value[0]), int(value[1])


def image_shape(results: Mapping[str, Any], owner: str) -> Tuple[int, ...]:
    """Shape of the first image of ``results`` (``(H, W, C)`` or ``(H, W)``).

    Raises:
        KeyError: ``results`` holds no image; the message names ``owner``.
    """
    keys = img_fields(results)
    if not keys:
        raise KeyError(
            f"{owner}: results has no image (img_fields: {results.get('img_fields', ['img'])})"
        )
    return results[keys[0]].shape
