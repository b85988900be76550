"""RandomFlip: mirror the images, boxes and segmentation maps of a sample together."""

from __future__ import annotations

import random
from typing import Tuple

import numpy as np
import torch

from mmpar.data.transforms._fields import bbox_fields, image_shape, img_fields, seg_fields
from mmpar.data.transforms.backends import opencv
from mmpar.registry import TRANSFORMS
from mmpar.utils.checks import is_number

__all__ = ["RandomFlip", "flip_array", "flip_boxes"]

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


#: OpenCV's flip codes.
_CV2_CODES = {"horizontal": 1, "vertical": 0, "diagonal": -1}
_AXES = {"horizontal": (1,), "vertical": (0,), "diagonal": (0, 1)}
#: The dtypes OpenCV's flip takes.
_CV2_DTYPES = (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64)


def flip_array(arr: np.ndarray, direction: str) -> np.ndarray:
    """A mirrored copy of an ``(H, W, ...)`` array (OpenCV's flip where installed:
    numpy's reversed-stride copy is several times slower)."""
    cv2 = opencv()
    if cv2 is not None and arr.ndim in (2, 3) and arr.dtype in _CV2_DTYPES and arr.size:
        out = cv2.flip(np.ascontiguousarray(arr), _CV2_CODES[direction])
        return out.reshape(arr.shape)  # one channel comes back 2-D
    t = torch.from_numpy(np.ascontiguousarray(arr))
    return t.flip(_AXES[direction]).numpy()


@TRANSFORMS.register_module()
class RandomFlip:
    """Mirror the images, boxes and maps of a sample with probability ``flip_ratio``.

    The draw uses python ``random``, which ``torch.utils.data.DataLoader`` seeds
    in each worker, so a seeded loader flips the same samples every run. A
    ``results["flip"]`` set upstream (e.g. by test-time augmentation) is obeyed.
    Records ``flip`` (bool) and ``flip_direction`` (the direction, or None).

    Must come before :class:`~mmpar.data.transforms.Pad`: it mirrors the whole
    array, and padding would end up on the top/left.

    Args:
        flip_ratio: Probability of flipping, in ``[0, 1]``.
        direction: ``"horizontal"``, ``"vertical"`` or ``"diagonal"``.

    Raises:
        ValueError: ``flip_ratio`` outside ``[0, 1]`` or an unknown ``direction``;
            at call time, an image already padded (shape differs from ``img_shape``).
    """

    def __init__(self, flip_ratio: float = 0.5, direction: str = "horizontal") -> None:
        if not is_number(flip_ratio) or not 0 <= flip_ratio <= 1:
            raise ValueError(
                f"RandomFlip: flip_ratio must be a number in [0, 1], got {flip_ratio!r}"
            )
        if direction not in _DIRECTIONS:
            raise ValueError(
                f"RandomFlip: direction must be one of {_DIRECTIONS}, got {direction!r}"
            )
        self.flip_ratio = float(flip_ratio)
        self.direction = direction

    def output_size(self, height: int, width: int) -> Tuple[int, int]:
        """Mirroring keeps the size: ``(height, width)``."""
        return height, width

    def __call__(self, results: dict) -> dict:
        if "flip" not in results:
            results["flip"] = random.random() < self.flip_ratio
        if not results["flip"]:
            results["flip_direction"] = None
            return results
        direction = results.get("flip_direction") or self.direction
        if direction not in _DIRECTIONS:
            raise ValueError(
                f"RandomFlip: results['flip_direction'] must be one of {_DIRECTIONS}, "
                f"got {direction!r}"
            )
        shape = image_shape(results, "RandomFlip")
        if "img_shape" in results and tuple(results["img_shape"][:2]) != tuple(shape[:2]):
            raise ValueError(
                f"RandomFlip: the image is {shape[:2]} but img_shape is "
                f"{results['img_shape'][:2]}; flip before padding"
            )
        for key in img_fields(results) + seg_fields(results):
            results[key] = flip_array(results[key], direction)
        for key in bbox_fields(results):
            results[key] = flip_boxes(results[key], shape[:2], direction)
        results["flip_direction"] = direction
        return results

    def __repr__(self) -> str:
        return f"{type(self).__name__}(flip_ratio={self.flip_ratio}, direction={self.direction!r})"
