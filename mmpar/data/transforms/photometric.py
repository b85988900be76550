"""Photometric steps: change pixel values, never geometry."""

from __future__ import annotations

import copy
from typing import Sequence, Union

import numpy as np
import torch

from mmpar.data.transforms._fields import img_fields
from mmpar.data.transforms.backends import opencv
from mmpar.data.transforms.compose import KeepsSize
from mmpar.data.transforms.planar import empty_planar
from mmpar.registry import TRANSFORMS

__all__ = ["Normalize", "normalize_image", "DEFERRED_NORM"]

#: The results key under which a deferred :class:`Normalize` leaves its work for
#: ``Pad`` and ``DefaultFormatBundle`` (see :meth:`Normalize.deferred`).
DEFERRED_NORM = "_deferred_normalize"


def _vector(values: Sequence[float], argument: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError):
        raise TypeError(
            f"Normalize: {argument} must be a sequence of numbers, got {values!r}"
        ) from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(
            f"Normalize: {argument} must be a 1-D sequence with one value per channel, "
            f"got {values!r}"
        )
    return arr


def _lookup_table(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """``(C, 256)`` float32: ``(v - mean[c]) / std[c]`` for every uint8 value ``v``,
    computed as the float32 arithmetic on the image would."""
    values = np.arange(256, dtype=np.float32)
    return (values[None, :] - mean[:, None]) / std[:, None]


def normalize_image(
    img: np.ndarray, mean: np.ndarray, std: np.ndarray, swap_rb: bool = False
) -> np.ndarray:
    """``(img - mean) / std`` per channel in float32, written plane by plane.

    Each output channel is one pass over the pixels: a table lookup for uint8
    images (the 256 possible values of each channel computed once, with the same
    float32 arithmetic), a subtraction and a division for the others. The result
    is planar (see :mod:`mmpar.data.transforms.planar`), so that formatting it
    into a ``(C, H, W)`` tensor copies nothing.

    Args:
        img: ``(H, W, C)`` image (``(H, W)`` is taken as one channel).
        mean: ``(C,)`` float32.
        std: ``(C,)`` float32, no zeros.
        swap_rb: Reverse the channel order (BGR to RGB) on the way.

    Returns:
        A float32 ``(H, W, C)`` array over ``(C, H, W)`` memory (``(H, W)`` stays 2-D).
    """
    squeeze = img.ndim == 2
    if squeeze:
        img = img[:, :, None]
    channels = img.shape[2]
    out = empty_planar(img.shape, np.float32)
    table = _lookup_table(mean, std) if img.dtype == np.uint8 else None
    cv2 = opencv()
    planes = cv2.split(img) if cv2 is not None and table is not None and channels <= 4 else None
    for c in range(channels):
        src_c = channels - 1 - c if swap_rb else c
        dst = out[:, :, c]
        if planes is not None:
            cv2.LUT(planes[src_c], table[c], dst=dst)
        elif table is not None:
            np.take(table[c], img[:, :, src_c], out=dst, mode="clip")  # no bounds buffer
        else:
            dst[...] = img[:, :, src_c]
            np.subtract(dst, mean[c], out=dst)
            np.divide(dst, std[c], out=dst)
    return out[:, :, 0] if squeeze else out


@TRANSFORMS.register_module()
class Normalize(KeepsSize):
    """``img = (img - mean) / std`` per channel, as float32.

    ``to_rgb=True`` asks for RGB output: images recorded as BGR
    (``results["channel_order"] == "bgr"``) have their channels reversed first,
    RGB images (what mmpar's loaders produce by default, and what is assumed when
    nothing is recorded) are left as they are. ``to_rgb=False`` keeps the loaded
    order. So mmdet configs carry over: RGB means with ``to_rgb=True``, and
    caffe-style BGR means with ``to_rgb=False`` together with
    ``LoadImageFromFile(channel_order="bgr")``.

    Records ``img_norm_cfg = dict(mean=float32 array, std=float32 array,
    to_rgb=bool)`` and the new ``channel_order``.

    With ``on_device=True`` the pixels are left as they are (uint8 stays uint8)
    and the work is only recorded: ``img_norm_cfg`` also holds ``on_device=True``,
    ``swap_rb`` and ``norm_hw`` (the area to normalize), and mmpar's wrappers
    normalize on the target device after scatter, giving the model the same
    batch (see :mod:`mmpar.device_norm`). It should be the last step that changes
    pixel values; ``Pad`` may follow, as usual.

    Args:
        mean: One value per channel.
        std: One non-zero value per channel.
        to_rgb: Output RGB (see above).
        on_device: ``True``: normalize on the target device after scatter;
            ``"auto"``: do so when CUDA is available (where the bytes saved
            matter), else in the worker; ``False``: in the worker.

    Raises:
        TypeError: ``mean``/``std`` are not sequences of numbers.
        ValueError: Their lengths differ, a ``std`` is zero; at call time, the
            image has another number of channels.
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        to_rgb: bool = True,
        on_device: Union[bool, str] = False,
    ) -> None:
        self.mean = _vector(mean, "mean")
        self.std = _vector(std, "std")
        if self.mean.shape != self.std.shape:
            raise ValueError(
                "Normalize: mean and std need the same length, "
                f"got {len(self.mean)} and {len(self.std)}"
            )
        if np.any(self.std == 0):
            raise ValueError(f"Normalize: std must not contain zeros, got {list(std)}")
        self.to_rgb = bool(to_rgb)
        if on_device == "auto":
            on_device = torch.cuda.is_available()
        if not isinstance(on_device, bool):
            raise ValueError(
                f"Normalize: on_device must be True, False or 'auto', got {on_device!r}"
            )
        self.on_device = on_device

    #: A twin made by :meth:`deferred`: records, and collate normalizes.
    _deferred = False

    def deferred(self) -> "Normalize":
        """A twin that leaves the pixels raw and has collate normalize them (worker side).

        :class:`~mmpar.data.transforms.Compose` uses it when every later step only
        moves the pixels (``Pad``, ``DefaultFormatBundle``, ``Collect``): the
        twin keeps the image as it is and records, under :data:`DEFERRED_NORM`,
        what to do; ``Pad`` adds its margin value and ``DefaultFormatBundle``
        turns it into the container's :class:`~mmpar.pixel_norm.PixelNorm`, so
        that :func:`mmpar.collate` writes ``(img - mean) / std`` straight into the
        batch. The batch, the metas and ``container.data`` are what this step
        gives, bit for bit; the float32 image is written once instead of three
        times. An ``on_device`` step is its own twin.
        """
        if self.on_device:
            return self
        twin = copy.copy(self)
        twin._deferred = True
        return twin

    def __call__(self, results: dict) -> dict:
        swap = self.to_rgb and results.get("channel_order", "rgb") == "bgr"
        if self.on_device:
            return self._record(results, swap)
        if self._deferred and img_fields(results) == ["img"]:
            return self._defer(results, swap)
        for key in img_fields(results):
            img = results[key]
            self._check_channels(key, img)
            results[key] = normalize_image(img, self.mean, self.std, swap)
        if swap:
            results["channel_order"] = "rgb"
        results["img_norm_cfg"] = dict(
            mean=self.mean.copy(), std=self.std.copy(), to_rgb=self.to_rgb
        )
        return results

    def _check_channels(self, key: str, img: np.ndarray) -> None:
        channels = img.shape[2] if img.ndim == 3 else 1
        if channels != len(self.mean):
            raise ValueError(
                f"Normalize: results[{key!r}] has {channels} channels "
                f"but mean/std have {len(self.mean)} values"
            )

    def _defer(self, results: dict, swap: bool) -> dict:
        """Deferred to collate: check the image, keep its pixels, record the work."""
        img = results["img"]
        self._check_channels("img", img)
        results[DEFERRED_NORM] = dict(
            mean=self.mean, std=self.std, swap_rb=swap, content_hw=img.shape[:2], margin=0
        )
        if swap:
            results["channel_order"] = "rgb"
        results["img_norm_cfg"] = dict(
            mean=self.mean.copy(), std=self.std.copy(), to_rgb=self.to_rgb
        )
        return results

    def _record(self, results: dict, swap: bool) -> dict:
        """``on_device``: check the images, keep their pixels, record what to do after scatter."""
        keys = img_fields(results)
        for key in keys:
            img = results[key]
            self._check_channels(key, img)
        norm_hw = tuple(int(s) for s in results[keys[0]].shape[:2]) if keys else None
        if swap:
            results["channel_order"] = "rgb"  # what the model will see
        results["img_norm_cfg"] = dict(
            mean=self.mean.copy(),
            std=self.std.copy(),
            to_rgb=self.to_rgb,
            on_device=True,
            swap_rb=swap,
            norm_hw=norm_hw,
        )
        return results

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(mean={self.mean.tolist()}, std={self.std.tolist()}, "
            f"to_rgb={self.to_rgb}" + (", on_device=True)" if self.on_device else ")")
        )
