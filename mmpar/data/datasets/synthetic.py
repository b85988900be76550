"""SyntheticShapes: a deterministic in-memory detection dataset of drawn shapes."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from mmpar.data.datasets.base import DetectionDataset
from mmpar.data.datasets.shapes import SHAPES, render_shapes
from mmpar.registry import DATASETS
from mmpar.utils.checks import is_int

__all__ = ["SyntheticShapes"]


def _check_int(value: Any, argument: str, low: int) -> int:
    if not is_int(value) or value < low:
        raise ValueError(f"SyntheticShapes: {argument} must be an int >= {low}, got {value!r}")
    return int(value)


@DATASETS.register_module()
class SyntheticShapes(DetectionDataset):
    """Images of filled shapes on a noisy background, with their exact boxes.

    Sample ``i`` is a pure function of ``(seed, i)``: its RNG is
    ``numpy.random.default_rng([seed, i])``, so it is the same in every run and
    process and does not depend on ``num_samples``. Each image has a random
    height and width in ``[min_size, max_size]`` (portrait and landscape alike)
    and 1 to ``max_objects`` non-overlapping shapes, each 12-40% of the short
    image side, in a bright solid colour; the class is the shape, never the
    colour. Boxes are tight around the drawn pixels.

    Images are made in memory, so the pipeline starts from ``results["img"]``
    already set: its loading step is
    :class:`~mmpar.data.transforms.LoadImageFromArray` instead of
    ``LoadImageFromFile``. ``ann_info`` also holds ``seg``, a uint8 map (0
    background, ``label + 1`` on shapes) for ``LoadAnnotations(with_seg=True)``.

    The default pipeline (``pipeline=None``) is, for training: load, annotations,
    ``RandomFlip(0.5)``, ``Normalize`` (ImageNet mean/std),
    ``DefaultFormatBundle(size_divisor=32)``, ``Collect(["img", "gt_bboxes",
    "gt_labels"])``; in ``test_mode`` the flip and annotations are left out and
    only ``img`` is kept. Images are not padded in the workers: collate pads each
    one once, into the batch, to multiples of 32 (``img_metas`` still record
    ``pad_shape``, the image's size rounded up to 32).

    Args:
        num_samples: Number of images.
        min_size: Smallest image side, >= 16.
        max_size: Largest image side, >= ``min_size``.
        num_classes: 1 to 5 shapes, in the order rectangle, ellipse, triangle,
            cross, ring.
        max_objects: Most shapes per image, >= 1.
        seed: Non-negative int selecting the dataset.
        pipeline: Steps, or None for the default.
        test_mode: Evaluation mode.
        normalize_on_device: ``True`` or ``"auto"``: the default pipeline ships
            uint8 images, normalized on the target device after scatter (see
            :class:`~mmpar.data.transforms.Normalize`).

    Raises:
        ValueError: An argument out of its range.
    """

    def __init__(
        self,
        num_samples: int = 128,
        min_size: int = 64,
        max_size: int = 160,
        num_classes: int = 3,
        max_objects: int = 4,
        seed: int = 0,
        pipeline: Optional[Sequence[Any]] = None,
        test_mode: bool = False,
        normalize_on_device: Union[bool, str] = False,
    ) -> None:
        self.num_samples = _check_int(num_samples, "num_samples", 0)
        self.min_size = _check_int(min_size, "min_size", 16)
        self.max_size = _check_int(max_size, "max_size", self.min_size)
        if not is_int(num_classes) or not 1 <= num_classes <= len(SHAPES):
            raise ValueError(
                f"SyntheticShapes: num_classes must be an int in [1, {len(SHAPES)}], "
                f"got {num_classes!r}"
            )
        self.max_objects = _check_int(max_objects, "max_objects", 1)
        self.seed = _check_int(seed, "seed", 0)
        self.CLASSES = tuple(SHAPES)[:num_classes]
        super().__init__(pipeline, test_mode, normalize_on_device)
        self._set_img_sizes([self._size(self._rng(i)) for i in range(self.num_samples)])

    def default_pipeline(self) -> List[Dict[str, Any]]:
        steps: List[Dict[str, Any]] = [dict(type="LoadImageFromArray")]
        if not self.test_mode:
            steps += [dict(type="LoadAnnotations"), dict(type="RandomFlip", flip_ratio=0.5)]
        return steps + self._format_steps()

    def _rng(self, idx: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, idx])

    def _size(self, rng: np.random.Generator) -> List[int]:
        return [int(s) for s in rng.integers(self.min_size, self.max_size + 1, size=2)]

    def render(self, idx: int) -> Dict[str, np.ndarray]:
        """Draw sample ``idx``.

        Returns:
            ``img`` uint8 ``(h, w, 3)`` RGB, ``bboxes`` float32 ``(K, 4)``, ``labels``
            int64 ``(K,)``, ``masks`` bool ``(K, h, w)``, ``seg`` uint8 ``(h, w)``.
        """
        idx = self._check_index(idx)
        rng = self._rng(idx)
        h, w = self._size(rng)
        return render_shapes(rng, h, w, self.CLASSES, self.max_objects)

    def get_img_info(self, idx: int) -> Dict[str, Any]:
        idx = self._check_index(idx)
        h, w = (int(s) for s in self.ori_img_sizes[idx])
        return dict(filename=f"synthetic_{self.seed}_{idx:06d}.png", height=h, width=w)

    def get_ann_info(self, idx: int) -> Dict[str, np.ndarray]:
        return self._ann_info(self.render(idx))

    @staticmethod
    def _ann_info(sample: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return dict(
            bboxes=sample["bboxes"],
            labels=sample["labels"],
            bboxes_ignore=np.zeros((0, 4), dtype=np.float32),
            seg=sample["seg"],
        )

    def _results(self, idx: int) -> Dict[str, Any]:
        sample = self.render(idx)
        results: Dict[str, Any] = dict(
            img_info=self.get_img_info(idx), ann_info=self._ann_info(sample)
        )
        self.pre_pipeline(results)
        results["img"] = sample["img"]
        return results
