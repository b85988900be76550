"""Photometric steps: change pixel values, never geometry."""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import torch

from mmpar.data.transforms._fields import img_fields
from mmpar.data.transforms.compose import KeepsSize
from mmpar.registry import TRANSFORMS

__all__ = ["Normalize"]


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

    def __call__(self, results: dict) -> dict:
        swap = self.to_rgb and results.get("channel_order", "rgb") == "bgr"
        if self.on_device:
            return self._record(results, swap)
        for key in img_fields(results):
            img = results[key]
            self._check_channels(key, img)
            if swap:
                img = img[..., ::-1]
            out = img.astype(np.float32)  # a new array: the in-place steps below are safe
            out -= self.mean
            out /= self.std
            results[key] = out
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
