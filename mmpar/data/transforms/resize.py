"""Resize: scale images, boxes and segmentation maps of a sample together.

Boxes are x1y1x2y2 in pixels: a box covering the pixel columns ``a..b``
inclusive has ``x1 = a`` and ``x2 = b + 1``.
"""

from __future__ import annotations

import random
from typing import List, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from mmpar.data.transforms._fields import (
    bbox_fields,
    check_pair,
    image_shape,
    img_fields,
    seg_fields,
)
from mmpar.data.transforms.backends import opencv, resolve_backend
from mmpar.registry import TRANSFORMS
from mmpar.transfer import array_to_tensor

__all__ = ["Resize", "rescale_size", "resize_image", "resize_seg"]

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


#: The dtypes OpenCV's resize takes.
_CV2_DTYPES = (np.uint8, np.uint16, np.int16, np.float32, np.float64)


def resize_image(img: np.ndarray, size_hw: Tuple[int, int], backend: str = "torch") -> np.ndarray:
    """Bilinear resize of an ``(H, W, C)`` array to ``size_hw``, keeping its dtype.

    Half-pixel centres (``align_corners=False``) and no antialiasing, with either
    library:

    * ``"cv2"``: OpenCV's ``INTER_LINEAR`` (fixed-point weights for integer
      images), for the dtypes it takes (uint8, uint16, int16, float32, float64)
      and up to 512 channels; others go to torch;
    * ``"torch"``: ``torch.nn.functional.interpolate``. uint8 images take torch's
      native uint8 kernel where it exists (results rounded to the nearest
      integer); other integer images are rounded and clipped to their dtype's range.

    For uint8 images both are within one grey level of exact bilinear sampling.
    """
    if img.shape[:2] == tuple(size_hw):
        return img.copy()
    cv2 = opencv() if backend == "cv2" else None
    if cv2 is not None and img.dtype in _CV2_DTYPES and img.ndim == 3 and img.shape[2] <= 512:
        out = cv2.resize(
            np.ascontiguousarray(img), (size_hw[1], size_hw[0]), interpolation=cv2.INTER_LINEAR
        )
        return out.reshape(tuple(size_hw) + img.shape[2:])  # one channel comes back 2-D
    t = array_to_tensor(img, contiguous=True).permute(2, 0, 1)[None]
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

    Images are resized by OpenCV where it is installed, by torch otherwise (see
    :func:`resize_image`: both bilinear, uint8 pixels within one grey level of
    each other's exact value).

    Args:
        img_scale: One ``(w, h)`` pair or a list of them.
        keep_ratio: Keep the aspect ratio (see above).
        backend: ``"auto"``, ``"cv2"`` or ``"torch"`` (keyword only): the library
            that resizes images; ``"auto"`` is OpenCV if installed.

    Raises:
        ValueError: ``img_scale`` is not a pair or list of pairs of positive ints,
            or an unknown ``backend``.
        ImportError: ``backend="cv2"`` without OpenCV.
    """

    def __init__(
        self,
        img_scale: Union[Scale, Sequence[Scale]] = (1333, 800),
        keep_ratio: bool = True,
        *,
        backend: str = "auto",
    ) -> None:
        if isinstance(img_scale, list) and img_scale and isinstance(img_scale[0], (tuple, list)):
            scales = [check_pair(s, f"Resize: img_scale[{i}]") for i, s in enumerate(img_scale)]
        else:
            scales = [check_pair(img_scale, "Resize: img_scale")]
        self.img_scale: List[Scale] = scales
        self.keep_ratio = bool(keep_ratio)
        self.backend = resolve_backend(backend, "torch", "Resize")

    def output_size(self, height: int, width: int) -> Tuple[int, int]:
        """The ``(height, width)`` a ``height x width`` image is resized to.

        Exact with one scale; with several (one picked per sample), that of the
        largest scale, an upper bound of what a sample gets.
        """
        scale = max(self.img_scale, key=lambda s: s[0] * s[1])
        new_w, new_h = rescale_size(width, height, scale) if self.keep_ratio else scale
        return new_h, new_w

    def __call__(self, results: dict) -> dict:
        h, w = image_shape(results, "Resize")[:2]
        if "scale" not in results:
            results["scale"] = (
                self.img_scale[0] if len(self.img_scale) == 1 else random.choice(self.img_scale)
            )
        scale = check_pair(tuple(results["scale"]), "Resize: results['scale']")
        new_w, new_h = rescale_size(w, h, scale) if self.keep_ratio else scale
        for key in img_fields(results):
            results[key] = resize_image(results[key], (new_h, new_w), self.backend)
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
        return (
            f"{type(self).__name__}(img_scale={scale}, keep_ratio={self.keep_ratio}, "
            f"backend={self.backend!r})"
        )
