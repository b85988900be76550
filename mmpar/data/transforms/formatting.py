"""Formatting steps: turn numpy fields into tensors wrapped in DataContainers.

After :class:`DefaultFormatBundle` and :class:`Collect` a sample is what
:func:`mmpar.collate.collate` and :func:`mmpar.scatter_gather.scatter` expect:

===================  ================================================  ==========================
key                  container                                         content
===================  ================================================  ==========================
``img``              ``stack=True``, ``padding_value=pad_val["img"]``  ``(C, H, W)`` tensor
``gt_bboxes``        neither stack nor cpu_only                        float32 ``(K, 4)``
``gt_labels``        neither stack nor cpu_only                        int64 ``(K,)``
``gt_semantic_seg``  ``stack=True``, ``padding_value=pad_val["seg"]``  ``(1, H, W)`` tensor
``img_metas``        ``cpu_only=True``                                 dict of meta keys
===================  ================================================  ==========================
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from mmpar.data.transforms._fields import require
from mmpar.data.transforms.compose import KeepsSize
from mmpar.data.transforms.photometric import DEFERRED_NORM
from mmpar.data.transforms.planar import channels_first
from mmpar.data_container import DataContainer
from mmpar.pixel_norm import PixelNorm
from mmpar.registry import TRANSFORMS
from mmpar.stacking import round_up
from mmpar.transfer import array_to_tensor
from mmpar.utils.checks import check_positive_int, is_number

__all__ = ["DefaultFormatBundle", "Collect", "to_tensor", "DEFAULT_META_KEYS"]

Number = Union[int, float]

#: What :class:`Collect` puts in ``img_metas`` by default.
DEFAULT_META_KEYS = (
    "filename",
    "ori_filename",
    "ori_shape",
    "img_shape",
    "pad_shape",
    "scale_factor",
    "flip",
    "flip_direction",
    "img_norm_cfg",
)

_BOX_KEYS = ("proposals", "gt_bboxes", "gt_bboxes_ignore")
_PAD_KEYS = ("img", "seg", "masks")


def to_tensor(data: Any, field: str = "data") -> torch.Tensor:
    """Convert a numpy array, tensor, sequence or number to a tensor (no copy for arrays).

    Raises:
        TypeError: ``data`` is of another type.
    """
    if isinstance(data, torch.Tensor):
        return data
    if isinstance(data, np.ndarray):
        return array_to_tensor(data, contiguous=True)
    if isinstance(data, Sequence) and not isinstance(data, str):
        return torch.tensor(data)
    if not is_number(data):
        raise TypeError(f"{field}: cannot convert {type(data).__name__} to a tensor")
    return torch.tensor([data], dtype=torch.int64 if isinstance(data, int) else torch.float32)


def _check_pad_val(pad_val: Mapping[str, Number]) -> Dict[str, Number]:
    if not isinstance(pad_val, Mapping):
        raise TypeError(
            "DefaultFormatBundle: pad_val must be a dict such as dict(img=0, seg=255), "
            f"got {pad_val!r}"
        )
    unknown = sorted(set(pad_val) - set(_PAD_KEYS))
    if unknown:
        raise ValueError(
            f"DefaultFormatBundle: pad_val keys must be among {_PAD_KEYS}, got {unknown}"
        )
    out = dict(img=0, seg=255, masks=0)
    for key, value in pad_val.items():
        if not is_number(value):
            raise TypeError(
                f"DefaultFormatBundle: pad_val[{key!r}] must be a number, got {value!r}"
            )
        out[key] = value
    return out


@TRANSFORMS.register_module()
class DefaultFormatBundle(KeepsSize):
    """Convert the usual fields to tensors in :class:`~mmpar.data_container.DataContainer`.

    * ``img`` ``(H, W, C)`` (or ``(H, W)``) numpy -> ``(C, H, W)`` tensor of the same
      dtype (uint8 stays uint8), stacked with ``padding_value=pad_val["img"]``; the
      tensor shares the memory of a planar image (what ``Normalize`` and ``Pad``
      write, see :mod:`~mmpar.data.transforms.planar`) and copies any other once;
    * ``proposals``, ``gt_bboxes``, ``gt_bboxes_ignore`` -> float32 ``(K, 4)``
      tensors (``(0, 4)`` for none), ``gt_labels`` -> int64 ``(K,)``: per-image
      containers, neither stacked nor cpu_only;
    * ``gt_masks`` -> cpu_only container of the object as it is;
    * ``gt_semantic_seg`` ``(H, W)`` -> ``(1, H, W)`` tensor, stacked with
      ``padding_value=pad_val["seg"]``.

    ``size_divisor`` is passed to the ``img`` and ``gt_semantic_seg`` containers:
    :func:`~mmpar.collate.collate` then pads each image once, straight into the
    batch, to a multiple of it, which replaces ``Pad(size_divisor=...)`` in the
    workers (the same batch, one copy of each image fewer). ``pad_shape`` keeps
    mmdet's meaning: the image's ``(h, w)`` rounded up to ``size_divisor``, plus
    its channels (a batch may be larger still: it is padded to its largest image).
    Other meta keys a pipeline never set get their identity values:
    ``pad_shape = img_shape`` (without ``size_divisor``), ``scale_factor`` ones,
    ``flip=False``, ``flip_direction=None``, ``img_norm_cfg`` mean 0 / std 1.
    The tensors keep the image's size (:meth:`output_size` is the identity).

    Args:
        pad_val: Padding values by field: keys among ``img``, ``seg``, ``masks``.
        size_divisor: Batch padding multiple for ``img`` and ``gt_semantic_seg``.

    Raises:
        TypeError, ValueError: Bad ``pad_val`` or ``size_divisor``; at call time, an
            image or map of the wrong rank.
    """

    #: Only moves pixels, and packs a deferred Normalize's work (see Normalize.deferred).
    forwards_raw_pixels = True
    packs_raw_pixels = True

    def __init__(
        self,
        pad_val: Mapping[str, Number] = dict(img=0, seg=255),
        size_divisor: Optional[int] = None,
    ) -> None:
        self.pad_val = _check_pad_val(pad_val)
        if size_divisor is not None:
            size_divisor = check_positive_int(size_divisor, "size_divisor", "DefaultFormatBundle")
        self.size_divisor = size_divisor

    def __call__(self, results: dict) -> dict:
        if "img" in results:
            self._bundle_img(results)
        for key in _BOX_KEYS:
            if key in results:
                boxes = to_tensor(results[key], key).to(torch.float32)
                results[key] = DataContainer(boxes.reshape(-1, 4) if boxes.numel() == 0 else boxes)
        if "gt_labels" in results:
            results["gt_labels"] = DataContainer(
                to_tensor(results["gt_labels"], "gt_labels").to(torch.int64)
            )
        if "gt_masks" in results:
            results["gt_masks"] = DataContainer(results["gt_masks"], cpu_only=True)
        if "gt_semantic_seg" in results:
            seg = results["gt_semantic_seg"]
            if np.ndim(seg) != 2:
                raise ValueError(
                    "DefaultFormatBundle: gt_semantic_seg must be (H, W), "
                    f"got shape {np.shape(seg)}"
                )
            results["gt_semantic_seg"] = DataContainer(
                to_tensor(seg, "gt_semantic_seg")[None],
                stack=True,
                padding_value=self.pad_val["seg"],
                size_divisor=self.size_divisor,
            )
        return results

    def _bundle_img(self, results: dict) -> None:
        img = results["img"]
        if isinstance(img, np.ndarray) and img.ndim == 2:
            img = img[:, :, None]
        if not isinstance(img, np.ndarray) or img.ndim != 3:
            raise ValueError(
                "DefaultFormatBundle: img must be an (H, W, C) numpy array, "
                f"got {type(img).__name__} of shape {np.shape(img)}"
            )
        results.setdefault("img_shape", img.shape)
        if self.size_divisor is None:
            results.setdefault("pad_shape", img.shape)
        else:
            h, w = (round_up(s, self.size_divisor) for s in img.shape[:2])
            results["pad_shape"] = (h, w) + img.shape[2:]
        results.setdefault("scale_factor", np.ones(4, dtype=np.float32))
        results.setdefault("flip", False)
        results.setdefault("flip_direction", None)
        channels = img.shape[2]
        results.setdefault(
            "img_norm_cfg",
            dict(
                mean=np.zeros(channels, np.float32), std=np.ones(channels, np.float32), to_rgb=False
            ),
        )
        norm = results["img_norm_cfg"]
        padding_value = self.pad_val["img"]
        if isinstance(norm, dict) and norm.get("on_device"):
            # collate pads raw pixels with 0; the device step puts pad_val["img"]
            # (normalized units) there. Without a Pad step, collate also fills the
            # image's own margin (up to pad_shape): that one gets the same value.
            results["img_norm_cfg"] = dict(
                norm, batch_pad_val=padding_value, pad_val=norm.get("pad_val", padding_value)
            )
            padding_value = 0
        deferred = results.pop(DEFERRED_NORM, None)
        if deferred is not None:
            # Collate normalizes while it copies: no (C, H, W) copy of the raw pixels here.
            norm = PixelNorm(
                mean=tuple(map(float, deferred["mean"])),
                std=tuple(map(float, deferred["std"])),
                swap_rb=bool(deferred["swap_rb"]),
                content_hw=tuple(int(s) for s in deferred["content_hw"]),
                margin=deferred["margin"],
            )
            tensor = array_to_tensor(img.transpose(2, 0, 1))
        else:
            norm, tensor = None, array_to_tensor(channels_first(img), contiguous=True)
        results["img"] = DataContainer(
            tensor,
            stack=True,
            padding_value=padding_value,
            size_divisor=self.size_divisor,
            pixel_norm=norm,
        )

    def __repr__(self) -> str:
        pad_val = {k: self.pad_val[k] for k in ("img", "seg")}
        return f"{type(self).__name__}(pad_val={pad_val}, size_divisor={self.size_divisor})"


@TRANSFORMS.register_module()
class Collect(KeepsSize):
    """Keep ``keys`` and gather ``meta_keys`` into a cpu_only ``img_metas`` container.

    Args:
        keys: Data keys to keep, e.g. ``("img", "gt_bboxes", "gt_labels")``.
        meta_keys: Keys copied into the ``img_metas`` dict (see
            :data:`DEFAULT_META_KEYS`).

    Returns (when called):
        ``{"img_metas": DataContainer(dict, cpu_only=True), key: results[key], ...}``.

    Raises:
        TypeError: ``keys`` or ``meta_keys`` is not a sequence of str.
        KeyError: At call time, a key or meta key is missing from the results; the
            message names it.
    """

    #: Only moves pixels: a Normalize before it may be deferred to collate.
    forwards_raw_pixels = True

    def __init__(self, keys: Sequence[str], meta_keys: Sequence[str] = DEFAULT_META_KEYS) -> None:
        self.keys = self._check(keys, "keys")
        self.meta_keys = self._check(meta_keys, "meta_keys")

    @staticmethod
    def _check(names: Sequence[str], argument: str) -> tuple:
        if (
            isinstance(names, str)
            or not isinstance(names, Sequence)
            or not all(isinstance(n, str) for n in names)
        ):
            raise TypeError(f"Collect: {argument} must be a list of str, got {names!r}")
        return tuple(names)

    def __call__(self, results: dict) -> dict:
        meta = {key: require(results, key, "Collect (meta_keys)") for key in self.meta_keys}
        data: dict = {"img_metas": DataContainer(meta, cpu_only=True)}
        for key in self.keys:
            data[key] = require(results, key, "Collect (keys)")
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(keys={list(self.keys)}, meta_keys={list(self.meta_keys)})"
