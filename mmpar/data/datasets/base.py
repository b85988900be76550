"""DetectionDataset: what every detection dataset of mmpar shares."""

from __future__ import annotations

import operator
import random
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from torch.utils.data import Dataset

from mmpar.data.transforms.compose import Compose

__all__ = ["DetectionDataset"]

#: Mean and std (RGB, 0-255) of the default pipelines' ``Normalize``.
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)

#: The default pipelines' images are batched at multiples of this.
PAD_SIZE_DIVISOR = 32

#: A training sample dropped by the pipeline is replaced by another one; after
#: this many drops in a row the pipeline is considered broken.
MAX_REDRAWS = 100


class DetectionDataset(Dataset):
    """Base of the detection datasets: sizes, aspect flags and the pipeline loop.

    Subclasses call :meth:`_set_img_sizes` and implement :meth:`get_img_info` and
    :meth:`get_ann_info`; they may add keys to the initial results in
    :meth:`pre_pipeline`.

    ``dataset[i]`` builds ``results = dict(img_info=..., ann_info=...,
    img_prefix=..., seg_prefix=..., img_fields=[], bbox_fields=[],
    seg_fields=[])`` and runs the pipeline on it. When the pipeline drops the
    sample (returns ``None``), a training dataset returns a random other sample
    of the same aspect ``flag`` instead (python ``random``, seeded per DataLoader
    worker); a ``test_mode`` dataset raises, since no test sample may be lost.

    Attributes:
        CLASSES: Class names; label ``k`` is ``CLASSES[k]``.
        ori_img_sizes: int64 ``(N, 2)`` array of the original ``(h, w)`` of each image.
        img_sizes: int64 ``(N, 2)`` array of each image's ``(h, w)`` as it will
            be batched: the original size through every step's declared
            ``output_size`` (:meth:`Compose.output_size
            <mmpar.data.transforms.Compose.output_size>`; a step that declares
            nothing is taken to keep the size). With the default pipelines it is
            the resized size, ``img_shape``; a ``Pad`` step rounds it up.
            Size-aware samplers batch similar sizes by it.
        flag: uint8 ``(N,)`` array, 1 where ``w / h > 1`` (landscape), for
            aspect-ratio grouped samplers.
        pipeline: The :class:`~mmpar.data.transforms.Compose` run on each sample.
        test_mode: Whether the dataset serves evaluation.

    Args:
        pipeline: Steps for :class:`~mmpar.data.transforms.Compose`, or None for
            :meth:`default_pipeline`.
        test_mode: Evaluation mode.
        normalize_on_device: The default pipeline's ``Normalize(on_device=...)``:
            ``True``/``"auto"`` ship uint8 images and normalize them on the
            target device after scatter (``"auto"``: when CUDA is available).
    """

    CLASSES: Tuple[str, ...] = ()

    def __init__(
        self,
        pipeline: Optional[Sequence[Any]] = None,
        test_mode: bool = False,
        normalize_on_device: Union[bool, str] = False,
    ) -> None:
        self.test_mode = bool(test_mode)
        self.normalize_on_device = normalize_on_device
        self.pipeline = Compose(self.default_pipeline() if pipeline is None else pipeline)
        self.img_prefix: Optional[str] = None
        self.seg_prefix: Optional[str] = None
        self.ori_img_sizes = np.zeros((0, 2), dtype=np.int64)
        self.img_sizes = self.ori_img_sizes
        self.flag = np.zeros(0, dtype=np.uint8)

    def default_pipeline(self) -> List[Any]:
        """Steps used when ``pipeline=None``; subclasses define them."""
        raise NotImplementedError(
            f"{type(self).__name__} has no default pipeline; pass pipeline=[...]"
        )

    def _format_steps(self) -> List[Dict[str, Any]]:
        """The tail of the default pipelines: normalize (ImageNet statistics), format
        into DataContainers whose images collate pads to multiples of 32, collect.

        No ``Pad`` step: padding in the workers and then again into the batch would
        copy every image twice for the same batch; ``size_divisor`` on the
        containers pads each image once, in :func:`~mmpar.collate.collate`.
        """
        return [
            dict(
                type="Normalize",
                mean=list(IMAGENET_MEAN),
                std=list(IMAGENET_STD),
                to_rgb=True,
                on_device=self.normalize_on_device,
            ),
            dict(type="DefaultFormatBundle", size_divisor=PAD_SIZE_DIVISOR),
            dict(
                type="Collect",
                keys=["img"] if self.test_mode else ["img", "gt_bboxes", "gt_labels"],
            ),
        ]

    def _set_img_sizes(self, sizes: Any) -> None:
        """Record the original ``(h, w)`` of every image, and derive ``img_sizes`` and ``flag``."""
        self.ori_img_sizes = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
        batched = [self.pipeline.output_size(int(h), int(w)) for h, w in self.ori_img_sizes]
        self.img_sizes = np.asarray(batched, dtype=np.int64).reshape(-1, 2)
        self.flag = (self.img_sizes[:, 1] > self.img_sizes[:, 0]).astype(np.uint8)

    def __len__(self) -> int:
        return len(self.ori_img_sizes)

    def get_img_info(self, idx: int) -> Dict[str, Any]:
        """``dict(filename=..., height=..., width=...)`` of image ``idx``."""
        raise NotImplementedError

    def get_ann_info(self, idx: int) -> Dict[str, np.ndarray]:
        """Annotations of image ``idx`` in numpy: ``bboxes`` float32 ``(K, 4)``
        x1y1x2y2, ``labels`` int64 ``(K,)``, ``bboxes_ignore`` float32 ``(M, 4)``."""
        raise NotImplementedError

    def pre_pipeline(self, results: Dict[str, Any]) -> None:
        """Add what every pipeline expects to the initial ``results``."""
        results["img_prefix"] = self.img_prefix
        results["seg_prefix"] = self.seg_prefix
        results["img_fields"] = []
        results["bbox_fields"] = []
        results["seg_fields"] = []

    def _results(self, idx: int) -> Dict[str, Any]:
        results: Dict[str, Any] = dict(
            img_info=self.get_img_info(idx), ann_info=self.get_ann_info(idx)
        )
        self.pre_pipeline(results)
        return results

    def _check_index(self, idx: Any) -> int:
        try:
            idx = operator.index(idx)
        except TypeError:
            raise TypeError(
                f"{type(self).__name__}: index must be an int, got {type(idx).__name__}"
            ) from None
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"{type(self).__name__}: index {idx} out of range for {n} samples")
        return idx % n

    def __getitem__(self, idx: int) -> Any:
        idx = self._check_index(idx)
        first = idx
        for _ in range(MAX_REDRAWS):
            data = self.pipeline(self._results(idx))
            if data is not None:
                return data
            if self.test_mode:
                raise RuntimeError(
                    f"{type(self).__name__}: the pipeline dropped test sample {idx}; "
                    "test pipelines must keep every sample"
                )
            idx = self._rand_another(idx)
        raise RuntimeError(
            f"{type(self).__name__}: the pipeline dropped {MAX_REDRAWS} samples in a row "
            f"(starting at index {first})"
        )

    def _rand_another(self, idx: int) -> int:
        pool = np.flatnonzero(self.flag == self.flag[idx])
        return int(random.choice(pool))

    def __repr__(self) -> str:
        mode = "test" if self.test_mode else "train"
        return (
            f"{type(self).__name__}({len(self)} images, {len(self.CLASSES)} classes, {mode} mode)"
        )
