"""Planar images: ``(H, W, C)`` arrays whose memory is laid out ``(C, H, W)``.

The pipeline steps see images as ``(H, W, C)`` numpy arrays, the convention of
mmdet's pipelines; the batch holds them as ``(C, H, W)``. An image written
channel by channel into ``(C, H, W)`` memory and handed on as its
``transpose(1, 2, 0)`` view is both: steps index it as ``(H, W, C)``, and
:class:`~mmpar.data.transforms.DefaultFormatBundle` takes its ``(C, H, W)``
transpose as a contiguous tensor without copying it. :class:`Normalize` writes
its float32 output this way and :class:`Pad` keeps the layout, so a float image
is written once by each and copied once more, by collate, into the batch.
"""

from __future__ import annotations

from typing import Tuple, Union

import numpy as np

from mmpar.data.transforms.backends import opencv

__all__ = ["empty_planar", "is_planar", "channels_first", "pad_image"]


def empty_planar(shape: Tuple[int, int, int], dtype: np.dtype) -> np.ndarray:
    """An uninitialized ``(H, W, C)`` array of ``dtype`` over ``(C, H, W)`` memory."""
    h, w, c = shape
    return np.empty((c, h, w), dtype=dtype).transpose(1, 2, 0)


def is_planar(img: np.ndarray) -> bool:
    """Whether ``img`` is ``(H, W, C)`` over C-contiguous ``(C, H, W)`` memory."""
    return img.ndim == 3 and img.transpose(2, 0, 1).flags.c_contiguous


def channels_first(img: np.ndarray) -> np.ndarray:
    """``img`` ``(H, W, C)`` as a C-contiguous ``(C, H, W)`` array: a view of a planar
    image, else one copy (OpenCV's channel split for uint8 images where installed).
    """
    chw = img.transpose(2, 0, 1)
    if chw.flags.c_contiguous:
        return chw
    cv2 = opencv()
    if cv2 is not None and img.dtype == np.uint8 and 1 < img.shape[2] <= 4:
        out = np.empty(chw.shape, dtype=img.dtype)
        cv2.split(np.ascontiguousarray(img), list(out))
        return out
    return np.ascontiguousarray(chw)


def pad_image(img: np.ndarray, size_hw: Tuple[int, int], value: Union[int, float]) -> np.ndarray:
    """``img`` ``(H, W, ...)`` in the top-left corner of a ``size_hw`` array filled with ``value``.

    Only the margins are filled; a planar image stays planar.
    """
    h, w = img.shape[:2]
    shape = tuple(size_hw) + img.shape[2:]
    out = empty_planar(shape, img.dtype) if is_planar(img) else np.empty(shape, img.dtype)
    out[:h, :w] = img
    out[h:] = value
    out[:h, w:] = value
    return out
