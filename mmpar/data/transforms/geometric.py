"""Geometric steps: resize, flip and pad images, and move boxes and maps with them.

Every step applies to all of ``img_fields``, ``bbox_fields`` and ``seg_fields``
(see :mod:`mmpar.data.transforms._fields`), so the boxes always describe the
image they come with. Boxes are x1y1x2y2 in pixels: a box covering the pixel
columns ``a..b`` inclusive has ``x1 = a`` and ``x2 = b + 1``.
"""

from __future__ import annotations

import random
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from mmpar.data.transforms._fields import array_to_tensor, bbox_fields, img_fields, seg_fields
from mmpar.registry import TRANSFORMS
from mmpar.stacking import round_up

__all__ = [
    "Resize",
    "RandomFlip",
    "Pad",
    "rescale_size",
    "resize_image",
    "resize_seg",
    "flip_boxes",
]

Scale = Tuple[int, int]


def rescale_size(w: int, h: int, scale: Sequence[int]) -> Tuple[int, int]:
    """Size of a ``w x h`` image rescaled, keeping its ratio, to fit ``scale``.

    The long side ends up at most ``max(scale)`` and the short side at most
    ``min(scale)``, one of them equal (up to rounding), whatever the orientation.

    Returns:
        ``(new_w, new_h)``.
    """
    factor = min(max(scale) / max(h, w), min(scale) / min(h, w))
    return max(1, int(w * factor + 0.5)), max(1, int(h * factor + 0.5))


def resize_image(img: np.ndarray, size_hw: Tuple[int, int]) -> np.ndarray:
    """Bilinear resize of an ``(H, W, C)`` array to ``size_hw``, keeping its dtype.

    Uses ``torch.nn.functional.interpolate`` (``align_corners=False``, no
    antialiasing, like OpenCV's ``INTER_LINEAR``). uint8 images take torch's
    native uint8 kernel where it exists (results rounded to the nearest integer);
    other integer images are rounded and clipped to their dtype's range.
    """
    if img.shape[:2] == tuple(size_hw):
        return img.copy()
    t = array_to_tensor(img).permute(2, 0, 1)[None]
    if img.dtype == np.uint8:
        try:
            out = F.interpolate(t, size=tuple(size_hw), mode="bilinear", align_corners=False)
            return np.ascontiguousarray(out[0].permute(1, 2, 0).numpy())
        except (RuntimeError, NotImplementedError):
            pass  # torch builds without the uint8 kernel: use the float path below
    out = F.interpolate(
        t.to(torch.float32), size=tuple(size_hw), mode="bilinear", align_corners=False
    )
    arr = out[0].permute(1, 2, 0).numpy()
    if np.issubdtype(img.dtype, np.integer):
        info = np.iinfo(img.dtype)
        arr = np.clip(np.rint(arr), info.min, info.max)
    return np.ascontiguousarray(arr.astype(img.dtype))


def resize_seg(seg: np.ndarray, size_hw: Tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize of an ``(H, W)`` label map; labels are never mixed.

    Output pixel ``(i, j)`` takes the input pixel under its centre.
    """
    h, w = seg.shape[:2]
    rows = np.minimum(((np.arange(size_hw[0]) + 0.5) * h / size_hw[0]).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(size_hw[1]) + 0.5) * w / size_hw[1]).astype(np.int64), w - 1)
    return np.ascontiguousarray(seg[rows[:, None], cols[None, :]])


def _check_scale(scale: Sequence[int], argument: str) -> Scale:
    if (
        not isinstance(scale, (tuple, list))
        or len(scale) != 2
        or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in scale)
    ):
        raise ValueError(f"{argument}: expected a pair of positive ints, got {scale!r}")
    return (scale[0], scale[1])


def _image_shape(results: dict, owner: str) -> Tuple[int, ...]:
    keys = img_fields(results)
    if not keys:
        raise KeyError(
            f"{owner}: results has no image (img_fields: {results.get('img_fields', ['img'])})"
        )
    return results[keys[0]].shape


@TRANSFORMS.register_module()
class Resize:
    """Resize the images, boxes and segmentation maps of a sample.

    With ``keep_ratio`` the image is scaled by one factor so that its long side is
    at most ``max(scale)`` and its short side at most ``min(scale)`` (mmdet's
    semantics: ``(1333, 800)`` fits portrait and landscape images alike);
    otherwise it is resized to exactly ``scale = (w, h)``. Several scales may be
    given; one is picked uniformly per sample (python ``random``, so DataLoader
    worker seeding makes it reproducible), unless ``results["scale"]`` is set.

    Records ``scale``, ``img_shape`` (the new ``(h, w, c)``), ``pad_shape`` (the
    same), ``keep_ratio`` and ``scale_factor``: float32
    ``[w_scale, h_scale, w_scale, h_scale]`` with ``w_scale = new_w / w``. Boxes
    are multiplied by it and clipped to the new image; maps are resized with
    nearest neighbour.

    Args:
        img_scale: One ``(w, h)`` pair or a list of them.
        keep_ratio: Keep the aspect ratio (see above).

    Raises:
        ValueError: ``img_scale`` is not a pair or list of pairs of positive ints.
    """

    def __init__(
        self, img_scale: Union[Scale, Sequence[Scale]] = (1333, 800), keep_ratio: bool = True
    ) -> None:
        if isinstance(img_scale, list) and img_scale and isinstance(img_scale[0], (tuple, list)):
            scales = [_check_scale(s, f"Resize: img_scale[{i}]") for i, s in enumerate(img_scale)]
        else:
            scales = [_check_scale(img_scale, "Resize: img_scale")]
        self.img_scale: List[Scale] = scales
        self.keep_ratio = bool(keep_ratio)

    def output_hw(self, h: int, w: int) -> Tuple[int, int]:
        """The ``(h, w)`` an ``h x w`` image is resized to: exact with one scale,
        with several (picked per sample) that of the largest scale."""
        scale = max(self.img_scale, key=lambda s: s[0] * s[1])
        new_w, new_h = rescale_size(w, h, scale) if self.keep_ratio else scale
        return new_h, new_w

    def __call__(self, results: dict) -> dict:
        h, w = _image_shape(results, "Resize")[:2]
        if "scale" not in results:
            results["scale"] = (
                self.img_scale[0] if len(self.img_scale) == 1 else random.choice(self.img_scale)
            )
        scale = _check_scale(tuple(results["scale"]), "Resize: results['scale']")
        new_w, new_h = rescale_size(w, h, scale) if self.keep_ratio else scale
        for key in img_fields(results):
            results[key] = resize_image(results[key], (new_h, new_w))
        factor = np.array([new_w / w, new_h / h] * 2, dtype=np.float32)
        for key in bbox_fields(results):
            boxes = results[key] * factor
            boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, new_w)
            boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, new_h)
            results[key] = boxes.astype(np.float32)
        for key in seg_fields(results):
            results[key] = resize_seg(results[key], (new_h, new_w))
        shape = results[img_fields(results)[0]].shape
        results["img_shape"] = shape
        results["pad_shape"] = shape
        results["scale_factor"] = factor
        results["keep_ratio"] = self.keep_ratio
        return results

    def __repr__(self) -> str:
        scale = self.img_scale[0] if len(self.img_scale) == 1 else self.img_scale
        return f"{type(self).__name__}(img_scale={scale}, keep_ratio={self.keep_ratio})"


_DIRECTIONS = ("horizontal", "vertical", "diagonal")


def flip_boxes(boxes: np.ndarray, img_hw: Tuple[int, int], direction: str) -> np.ndarray:
    """Mirror ``(K, 4)`` x1y1x2y2 boxes inside an image of size ``img_hw``."""
    h, w = img_hw
    out = boxes.copy()
    if direction in ("horizontal", "diagonal"):
        out[:, 0] = w - boxes[:, 2]
        out[:, 2] = w - boxes[:, 0]
    if direction in ("vertical", "diagonal"):
        out[:, 1] = h - boxes[:, 3]
        out[:, 3] = h - boxes[:, 1]
    return out


def _flip_array(arr: np.ndarray, direction: str) -> np.ndarray:
    if direction == "horizontal":
        arr = arr[:, ::-1]
    elif direction == "vertical":
        arr = arr[::-1]
    else:
        arr = arr[::-1, ::-1]
    return np.ascontiguousarray(arr)


@TRANSFORMS.register_module()
class RandomFlip:
    """Mirror the images, boxes and maps of a sample with probability ``flip_ratio``.

    The draw uses python ``random``, which ``torch.utils.data.DataLoader`` seeds
    in each worker, so a seeded loader flips the same samples every run. A
    ``results["flip"]`` set upstream (e.g. by test-time augmentation) is obeyed.
    Records ``flip`` (bool) and ``flip_direction`` (the direction, or None).

    Must come before :class:`Pad`: it mirrors the whole array, and padding would
    end up on the top/left.

    Args:
        flip_ratio: Probability of flipping, in ``[0, 1]``.
        direction: ``"horizontal"``, ``"vertical"`` or ``"diagonal"``.

    Raises:
        ValueError: ``flip_ratio`` outside ``[0, 1]`` or an unknown ``direction``;
            at call time, an image already padded (shape differs from ``img_shape``).
    """

    def __init__(self, flip_ratio: float = 0.5, direction: str = "horizontal") -> None:
        if (
            isinstance(flip_ratio, bool)
            or not isinstance(flip_ratio, (int, float))
            or not 0 <= flip_ratio <= 1
        ):
            raise ValueError(
                f"RandomFlip: flip_ratio must be a number in [0, 1], got {flip_ratio!r}"
            )
        if direction not in _DIRECTIONS:
            raise ValueError(
                f"RandomFlip: direction must be one of {_DIRECTIONS}, got {direction!r}"
            )
        self.flip_ratio = float(flip_ratio)
        self.direction = direction

    def __call__(self, results: dict) -> dict:
        if "flip" not in results:
            results["flip"] = random.random() < self.flip_ratio
        if not results["flip"]:
            results["flip_direction"] = None
            return results
        direction = results.get("flip_direction") or self.direction
        if direction not in _DIRECTIONS:
            raise ValueError(
                f"RandomFlip: results['flip_direction'] must be one of {_DIRECTIONS}, got {direction!r}"
            )
        shape = _image_shape(results, "RandomFlip")
        if "img_shape" in results and tuple(results["img_shape"][:2]) != tuple(shape[:2]):
            raise ValueError(
                f"RandomFlip: the image is {shape[:2]} but img_shape is {results['img_shape'][:2]}; "
                "flip before padding"
            )
        for key in img_fields(results) + seg_fields(results):
            results[key] = _flip_array(results[key], direction)
        for key in bbox_fields(results):
            results[key] = flip_boxes(results[key], shape[:2], direction)
        results["flip_direction"] = direction
        return results

    def __repr__(self) -> str:
        return f"{type(self).__name__}(flip_ratio={self.flip_ratio}, direction={self.direction!r})"


def _pad_array(arr: np.ndarray, size_hw: Tuple[int, int], value: Union[int, float]) -> np.ndarray:
    out = np.full(tuple(size_hw) + arr.shape[2:], value, dtype=arr.dtype)
    out[: arr.shape[0], : arr.shape[1]] = arr
    return out


def _check_number(value: object, argument: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{argument}: expected a number, got {type(value).__name__} {value!r}")


@TRANSFORMS.register_module()
class Pad:
    """Pad images and maps at the bottom and right, to a fixed size or a multiple.

    ``img_shape`` (the content) is unchanged and boxes do not move; records
    ``pad_shape`` (the padded ``(h, w, c)``), ``pad_fixed_size`` and
    ``pad_size_divisor``. Give exactly one of ``size`` and ``size_divisor``.

    Args:
        size: Fixed padded size ``(h, w)``; images larger than it are an error.
        size_divisor: Pad height and width up to multiples of it.
        pad_val: Value of the padded image pixels.
        seg_pad_val: Value of the padded segmentation pixels (255 = ignore).

    Raises:
        ValueError: Both or neither of ``size`` and ``size_divisor``, or a bad
            value; at call time, an image larger than ``size``.
        TypeError: ``pad_val`` or ``seg_pad_val`` is not a number.
    """

    def __init__(
        self,
        size: Optional[Tuple[int, int]] = None,
        size_divisor: Optional[int] = None,
        pad_val: Union[int, float] = 0,
        seg_pad_val: Union[int, float] = 255,
    ) -> None:
        if (size is None) == (size_divisor is None):
            raise ValueError(
                f"Pad: give exactly one of size and size_divisor, got size={size!r}, size_divisor={size_divisor!r}"
            )
        if size is not None:
            size = _check_scale(size, "Pad: size (h, w)")
        if size_divisor is not None and (
            isinstance(size_divisor, bool) or not isinstance(size_divisor, int) or size_divisor < 1
        ):
            raise ValueError(f"Pad: size_divisor must be a positive int, got {size_divisor!r}")
        _check_number(pad_val, "Pad: pad_val")
        _check_number(seg_pad_val, "Pad: seg_pad_val")
        self.size = size
        self.size_divisor = size_divisor
        self.pad_val = pad_val
        self.seg_pad_val = seg_pad_val

    def _target(self, h: int, w: int) -> Tuple[int, int]:
        if self.size is not None:
            if h > self.size[0] or w > self.size[1]:
                raise ValueError(
                    f"Pad: the image is (h, w) = {(h, w)}, larger than size={self.size}"
                )
            return self.size
        return round_up(h, self.size_divisor), round_up(w, self.size_divisor)

    def __call__(self, results: dict) -> dict:
        h, w = _image_shape(results, "Pad")[:2]
        target = self._target(h, w)
        norm = results.get("img_norm_cfg")
        on_device = isinstance(norm, dict) and bool(norm.get("on_device"))
        for key in img_fields(results):
            # Normalized on the device later: the raw margin is a placeholder (0), overwritten there.
            results[key] = _pad_array(results[key], target, 0 if on_device else self.pad_val)
        for key in seg_fields(results):
            results[key] = _pad_array(results[key], target, self.seg_pad_val)
        results["pad_shape"] = results[img_fields(results)[0]].shape
        if on_device:
            # The raw margin is normalized on the device; record what the worker would have put there.
            results["img_norm_cfg"] = dict(norm, pad_val=self.pad_val)
        results["pad_fixed_size"] = self.size
        results["pad_size_divisor"] = self.size_divisor
        return results

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={self.size}, size_divisor={self.size_divisor}, "
            f"pad_val={self.pad_val}, seg_pad_val={self.seg_pad_val})"
        )
