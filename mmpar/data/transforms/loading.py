"""Loading steps: put the image and the annotations of one sample into ``results``.

A dataset starts each sample with ``results = dict(img_info=..., ann_info=...,
img_prefix=..., seg_prefix=...)``; ``img_info`` holds at least ``filename``, and
``ann_info`` the arrays of ``get_ann_info()`` (``bboxes``, ``labels``,
``bboxes_ignore``, and ``seg_map`` (a file name) or ``seg`` (an array)).
"""

from __future__ import annotations

import os.path as osp
from typing import Any, Optional

import numpy as np

from mmpar.data.transforms._fields import add_field, check_boxes, require
from mmpar.data.transforms.backends import opencv, resolve_backend
from mmpar.data.transforms.compose import KeepsSize
from mmpar.registry import TRANSFORMS

__all__ = ["LoadImageFromFile", "LoadImageFromArray", "LoadAnnotations", "import_pil"]

_COLOR_TYPES = ("color", "grayscale")
_CHANNEL_ORDERS = ("rgb", "bgr")


def import_pil(owner: str) -> Any:
    """Import Pillow's ``Image`` module on first use.

    Raises:
        ImportError: Pillow is not installed; the message says how to get it.
    """
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(
            f"{owner} decodes images with Pillow, which is not installed: "
            "pip install -e '.[images]' (in the mmpar checkout)"
        ) from None
    return Image


def _join(prefix: Optional[str], name: str) -> str:
    return osp.join(prefix, name) if prefix else name


def _check_choice(value: str, choices: tuple, argument: str) -> None:
    if value not in choices:
        raise ValueError(f"{argument} must be one of {choices}, got {value!r}")


def _set_image(results: dict, img: np.ndarray, to_float32: bool) -> dict:
    if to_float32:
        img = img.astype(np.float32)
    results["img"] = img
    results["img_shape"] = img.shape
    results["ori_shape"] = img.shape
    add_field(results, "img_fields", "img")
    return results


def _decode_cv2(path: str, channel_order: str) -> Optional[np.ndarray]:
    """A colour image file decoded by OpenCV (EXIF orientation applied), or None when
    OpenCV cannot decode it."""
    cv2 = opencv()
    with open(path, "rb") as f:  # not cv2.imread: it cannot say why a path failed
        data = np.frombuffer(f.read(), dtype=np.uint8)
    rgb = channel_order == "rgb" and hasattr(cv2, "IMREAD_COLOR_RGB")  # OpenCV >= 4.10
    img = (
        cv2.imdecode(data, cv2.IMREAD_COLOR_RGB if rgb else cv2.IMREAD_COLOR) if data.size else None
    )
    if img is None or img.dtype != np.uint8:
        return None
    if channel_order == "rgb" and not rgb:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    return img


@TRANSFORMS.register_module()
class LoadImageFromFile(KeepsSize):
    """Decode ``img_prefix / img_info["filename"]`` into an HWC uint8 array.

    The image is RGB (``channel_order="rgb"``, the default), or BGR for configs
    written for OpenCV-loaded images; the order is recorded in
    ``results["channel_order"]`` for :class:`~mmpar.data.transforms.Normalize`. The
    EXIF orientation is applied.

    Colour images are decoded by OpenCV where it is installed (about twice as
    fast as Pillow; the same pixels, see :mod:`~mmpar.data.transforms.backends`),
    and by Pillow otherwise or when OpenCV cannot read the file; grayscale images
    by Pillow.

    Sets ``img`` (``(H, W, 3)``, or ``(H, W, 1)`` for ``"grayscale"``), ``filename``,
    ``ori_filename``, ``img_shape``, ``ori_shape``, ``channel_order`` and
    ``img_fields``.

    Args:
        to_float32: Convert the image to float32 (otherwise uint8).
        color_type: ``"color"`` (3 channels) or ``"grayscale"`` (1 channel).
        channel_order: ``"rgb"`` or ``"bgr"`` (keyword only).
        backend: ``"auto"``, ``"cv2"`` or ``"pillow"`` (keyword only): the
            library that decodes colour images; ``"auto"`` is OpenCV if installed.

    Raises:
        ValueError: Unknown ``color_type``/``channel_order``/``backend``; at call
            time, a file that cannot be decoded (the message names it).
        FileNotFoundError: At call time, the image file does not exist.
        ImportError: ``backend="cv2"`` without OpenCV; at call time, Pillow is
            missing where it is needed.
    """

    def __init__(
        self,
        to_float32: bool = False,
        color_type: str = "color",
        *,
        channel_order: str = "rgb",
        backend: str = "auto",
    ) -> None:
        _check_choice(color_type, _COLOR_TYPES, "LoadImageFromFile: color_type")
        _check_choice(channel_order, _CHANNEL_ORDERS, "LoadImageFromFile: channel_order")
        self.to_float32 = bool(to_float32)
        self.color_type = color_type
        self.channel_order = channel_order
        self.backend = resolve_backend(backend, "pillow", "LoadImageFromFile")

    def __call__(self, results: dict) -> dict:
        info = require(results, "img_info", "LoadImageFromFile")
        name = require(info, "filename", "LoadImageFromFile: img_info")
        path = _join(results.get("img_prefix"), name)
        img = self._decode(path)
        results["filename"] = path
        results["ori_filename"] = name
        results["channel_order"] = self.channel_order if self.color_type == "color" else "rgb"
        return _set_image(results, img, self.to_float32)

    def _decode(self, path: str) -> np.ndarray:
        if not osp.isfile(path):
            raise FileNotFoundError(f"LoadImageFromFile: image file {path!r} does not exist")
        if self.backend == "cv2" and self.color_type == "color":
            img = _decode_cv2(path, self.channel_order)
            if img is not None:
                return img
        image_mod = import_pil("LoadImageFromFile")
        from PIL import ImageOps, UnidentifiedImageError

        try:
            with image_mod.open(path) as pil:
                pil = ImageOps.exif_transpose(pil)
                pil = pil.convert("RGB" if self.color_type == "color" else "L")
                img = np.array(pil, dtype=np.uint8)
        except (UnidentifiedImageError, OSError, SyntaxError) as err:
            raise ValueError(
                f"LoadImageFromFile: cannot decode image file {path!r}: {err}"
            ) from None
        if img.ndim == 2:
            img = img[:, :, None]
        elif self.channel_order == "bgr":
            img = img[:, :, ::-1]
        return np.ascontiguousarray(img)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(to_float32={self.to_float32}, color_type={self.color_type!r}, "
            f"channel_order={self.channel_order!r}, backend={self.backend!r})"
        )


@TRANSFORMS.register_module()
class LoadImageFromArray(KeepsSize):
    """The loading step of in-memory data: ``results["img"]`` is already an array.

    Datasets that generate or cache their images (such as
    :class:`~mmpar.data.datasets.SyntheticShapes`) put the array in
    ``results["img"]``; this step checks it and records what
    :class:`LoadImageFromFile` would: ``filename`` and ``ori_filename`` (from
    ``img_info["filename"]`` when present, else ``None``), ``img_shape``,
    ``ori_shape``, ``channel_order`` and ``img_fields``. A 2-D image becomes
    ``(H, W, 1)``.

    Args:
        to_float32: Convert the image to float32.
        channel_order: Channel order of the given arrays, ``"rgb"`` or ``"bgr"``.

    Raises:
        KeyError: At call time, ``results`` has no ``"img"``.
        TypeError: At call time, ``img`` is not a numpy array.
        ValueError: At call time, ``img`` is not 2-D or 3-D, or is empty.
    """

    def __init__(self, to_float32: bool = False, channel_order: str = "rgb") -> None:
        _check_choice(channel_order, _CHANNEL_ORDERS, "LoadImageFromArray: channel_order")
        self.to_float32 = bool(to_float32)
        self.channel_order = channel_order

    def __call__(self, results: dict) -> dict:
        img = require(results, "img", "LoadImageFromArray")
        if not isinstance(img, np.ndarray):
            raise TypeError(
                "LoadImageFromArray: results['img'] must be a numpy array, "
                f"got {type(img).__name__}"
            )
        if img.ndim == 2:
            img = img[:, :, None]
        if img.ndim != 3 or img.size == 0:
            raise ValueError(
                "LoadImageFromArray: results['img'] must be a non-empty HWC or HW array, "
                f"got shape {img.shape}"
            )
        name = results.get("img_info", {}).get("filename")
        results["filename"] = _join(results.get("img_prefix"), name) if name is not None else None
        results["ori_filename"] = name
        results["channel_order"] = self.channel_order
        return _set_image(results, img, self.to_float32)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(to_float32={self.to_float32}, "
            f"channel_order={self.channel_order!r})"
        )


@TRANSFORMS.register_module()
class LoadAnnotations(KeepsSize):
    """Copy the annotations of ``results["ann_info"]`` into ``results``.

    Sets ``gt_bboxes`` (float32 ``(K, 4)``, K may be 0), ``gt_bboxes_ignore`` when
    ``ann_info`` has ``bboxes_ignore``, ``gt_labels`` (int64 ``(K,)``) and
    ``gt_semantic_seg`` (an HW integer map read from ``seg_prefix /
    ann_info["seg_map"]`` with Pillow, or taken from the array ``ann_info["seg"]``),
    and adds them to ``bbox_fields`` / ``seg_fields``.

    Args:
        with_bbox: Load ``gt_bboxes`` (and ``gt_bboxes_ignore``).
        with_label: Load ``gt_labels``.
        with_seg: Load ``gt_semantic_seg``.

    Raises:
        KeyError: At call time, ``ann_info`` or a key it needs is missing.
        ValueError: At call time, boxes not ``(K, 4)``, labels not ``(K,)`` or a
            segmentation map that is not 2-D.
        FileNotFoundError: At call time, the ``seg_map`` file does not exist.
    """

    def __init__(
        self, with_bbox: bool = True, with_label: bool = True, with_seg: bool = False
    ) -> None:
        self.with_bbox = bool(with_bbox)
        self.with_label = bool(with_label)
        self.with_seg = bool(with_seg)

    def __call__(self, results: dict) -> dict:
        ann = require(results, "ann_info", "LoadAnnotations")
        if self.with_bbox:
            bboxes = require(ann, "bboxes", "LoadAnnotations: ann_info")
            results["gt_bboxes"] = check_boxes(bboxes, "LoadAnnotations: ann_info['bboxes']").copy()
            add_field(results, "bbox_fields", "gt_bboxes")
            if ann.get("bboxes_ignore") is not None:
                ignore = check_boxes(
                    ann["bboxes_ignore"], "LoadAnnotations: ann_info['bboxes_ignore']"
                )
                results["gt_bboxes_ignore"] = ignore.copy()
                add_field(results, "bbox_fields", "gt_bboxes_ignore")
        if self.with_label:
            results["gt_labels"] = self._labels(
                require(ann, "labels", "LoadAnnotations: ann_info"), results
            )
        if self.with_seg:
            results["gt_semantic_seg"] = self._seg(ann, results)
            add_field(results, "seg_fields", "gt_semantic_seg")
        return results

    def _labels(self, labels: Any, results: dict) -> np.ndarray:
        arr = np.asarray(labels)
        if arr.size == 0:
            arr = arr.astype(np.int64).reshape(0)
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                "LoadAnnotations: ann_info['labels'] must be a 1-D integer array, "
                f"got shape {arr.shape} dtype {arr.dtype}"
            )
        if self.with_bbox and len(arr) != len(results["gt_bboxes"]):
            raise ValueError(
                f"LoadAnnotations: ann_info has {len(results['gt_bboxes'])} bboxes "
                f"but {len(arr)} labels"
            )
        return arr.astype(np.int64)

    def _seg(self, ann: dict, results: dict) -> np.ndarray:
        if ann.get("seg") is not None:
            seg = np.array(ann["seg"])
        else:
            name = require(
                ann, "seg_map", "LoadAnnotations: ann_info (with_seg needs 'seg_map' or 'seg')"
            )
            path = _join(results.get("seg_prefix"), name)
            if not osp.isfile(path):
                raise FileNotFoundError(
                    f"LoadAnnotations: segmentation map file {path!r} does not exist"
                )
            image_mod = import_pil("LoadAnnotations")
            try:
                with image_mod.open(path) as pil:
                    seg = np.array(pil)
            except OSError as err:
                raise ValueError(
                    f"LoadAnnotations: cannot decode segmentation map {path!r}: {err}"
                ) from None
        if seg.ndim != 2:
            raise ValueError(
                f"LoadAnnotations: the segmentation map must be 2-D (H, W), got shape {seg.shape}"
            )
        return seg

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(with_bbox={self.with_bbox}, with_label={self.with_label}, "
            f"with_seg={self.with_seg})"
        )
