"""Pad: pad the images and maps of a sample in the pipeline, to a fixed size or a multiple.

The default pipelines do not pad in the pipeline: ``DefaultFormatBundle(size_divisor=32)``
gives the image's container a ``size_divisor`` and :func:`mmpar.collate.collate` pads
each image once, straight into the batch. ``Pad`` is for pipelines that need the
padded array itself (a fixed ``size``, or a step after it that reads the margin).
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

from mmpar.data.transforms._fields import check_pair, image_shape, img_fields, seg_fields
from mmpar.data.transforms.photometric import DEFERRED_NORM
from mmpar.data.transforms.planar import pad_image
from mmpar.registry import TRANSFORMS
from mmpar.stacking import round_up
from mmpar.utils.checks import check_positive_int, is_number

__all__ = ["Pad"]


def _check_number(value: object, argument: str) -> None:
    if not is_number(value):
        raise TypeError(f"{argument}: expected a number, got {type(value).__name__} {value!r}")


@TRANSFORMS.register_module()
class Pad:
    #: Only moves pixels: a :class:`Normalize` before it may be deferred to collate.
    forwards_raw_pixels = True

    """Pad images and maps at the bottom and right, to a fixed size or a multiple.

    ``img_shape`` (the content) is unchanged and boxes do not move; records
    ``pad_shape`` (the padded ``(h, w, c)``), ``pad_fixed_size`` and
    ``pad_size_divisor``. Give exactly one of ``size`` and ``size_divisor``.

    To pad to a multiple only for batching, prefer
    ``DefaultFormatBundle(size_divisor=...)`` without ``Pad``: the batch is the
    same, and each image is copied once (into the batch) instead of twice.
    ``Pad`` followed by such a bundle also gives the same batch (with equal
    ``pad_val`` and the bundle's ``pad_val["img"]``, and equal ``seg_pad_val``
    and ``pad_val["seg"]``).

    Args:
        size: Fixed padded size ``(h, w)``; images larger than it are an error.
        size_divisor: Pad height and width up to multiples of it.
        pad_val: Value of the padded image pixels.
        seg_pad_val: Value of the padded segmentation pixels (255 = ignore).

    Raises:
        ValueError: Both or neither of ``size`` and ``size_divisor``, or a bad
            value; at call time, an image larger than ``size``.
        TypeError: ``size_divisor`` is not an int, or ``pad_val`` or
            ``seg_pad_val`` is not a number.
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
                "Pad: give exactly one of size and size_divisor, "
                f"got size={size!r}, size_divisor={size_divisor!r}"
            )
        if size is not None:
            size = check_pair(size, "Pad: size (h, w)")
        if size_divisor is not None:
            size_divisor = check_positive_int(size_divisor, "size_divisor", "Pad")
        _check_number(pad_val, "Pad: pad_val")
        _check_number(seg_pad_val, "Pad: seg_pad_val")
        self.size = size
        self.size_divisor = size_divisor
        self.pad_val = pad_val
        self.seg_pad_val = seg_pad_val

    def output_size(self, height: int, width: int) -> Tuple[int, int]:
        """The padded ``(height, width)``: ``size``, or both rounded up to ``size_divisor``.

        Raises:
            ValueError: With ``size``, an image larger than it.
        """
        if self.size is not None:
            if height > self.size[0] or width > self.size[1]:
                raise ValueError(
                    f"Pad: the image is (h, w) = {(height, width)}, larger than size={self.size}"
                )
            return self.size
        return round_up(height, self.size_divisor), round_up(width, self.size_divisor)

    def __call__(self, results: dict) -> dict:
        target = self.output_size(*image_shape(results, "Pad")[:2])
        norm = results.get("img_norm_cfg")
        on_device = isinstance(norm, dict) and bool(norm.get("on_device"))
        deferred = results.get(DEFERRED_NORM)
        raw = on_device or deferred is not None
        for key in img_fields(results):
            # Normalized later (on the device, or by collate): the raw margin is a
            # placeholder (0), overwritten there.
            results[key] = pad_image(results[key], target, 0 if raw else self.pad_val)
        if deferred is not None:
            results[DEFERRED_NORM] = dict(deferred, margin=self.pad_val)
        for key in seg_fields(results):
            results[key] = pad_image(results[key], target, self.seg_pad_val)
        results["pad_shape"] = results[img_fields(results)[0]].shape
        if on_device:
            # The raw margin is normalized on the device; record what the worker
            # would have put there.
            results["img_norm_cfg"] = dict(norm, pad_val=self.pad_val)
        results["pad_fixed_size"] = self.size
        results["pad_size_divisor"] = self.size_divisor
        return results

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={self.size}, size_divisor={self.size_divisor}, "
            f"pad_val={self.pad_val}, seg_pad_val={self.seg_pad_val})"
        )
