"""CocoDetection: a COCO-format annotation file and its image folder."""

from __future__ import annotations

import os.path as osp
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from mmpar.data.datasets.base import DetectionDataset
from mmpar.data.datasets.coco_format import (
    check_categories,
    check_images,
    group_annotations,
    load_json,
    normalize_coco_gt,
    select_categories,
)
from mmpar.registry import DATASETS

__all__ = ["CocoDetection"]


@DATASETS.register_module()
class CocoDetection(DetectionDataset):
    """Object detection on COCO-format data (``images``, ``annotations``, ``categories``).

    Category ids are mapped to contiguous labels ``0..C-1`` in increasing id order
    (or in the order of ``classes``). A box ``[x, y, w, h]`` becomes x1y1x2y2
    ``[x, y, x + w, y + h]``. Crowd boxes are kept apart as ``bboxes_ignore``;
    boxes of zero or negative size, boxes entirely outside their image and boxes of
    categories outside ``classes`` are left out and counted in
    ``skipped_boxes``. In training with ``filter_empty_gt``, images left
    without a box are left out too; their ids are in ``filtered_img_ids``.

    The annotation file is checked entirely when the dataset is built; image files
    are opened by the pipeline (``LoadImageFromFile`` names a missing one).

    The default pipeline (``pipeline=None``) is mmdet's, padding once: load image
    and annotations, ``Resize((1333, 800))``, ``RandomFlip(0.5)`` (training only),
    ``Normalize`` (ImageNet), ``DefaultFormatBundle(size_divisor=32)``, ``Collect``.
    Where mmdet has ``Pad(size_divisor=32)`` in the workers, collate pads each
    image once, straight into the batch: the same batch and ``pad_shape``.

    Attributes:
        cat_ids: Category ids in label order.
        cat2label: ``{category id: label}``.
        img_ids: Image ids in dataset order.
        skipped_boxes: Counts of left-out boxes: ``degenerate``, ``outside``,
            ``other_class`` (and ``crowd``, kept as ignore boxes).
        filtered_img_ids: Ids of the images left out by ``filter_empty_gt``.

    Args:
        ann_file: Path of the annotation JSON.
        img_prefix: Folder that ``file_name`` is relative to ("" for none).
        pipeline: Steps, or None for the default.
        test_mode: Evaluation mode: no filtering, ``annotations`` may be absent.
        filter_empty_gt: In training, leave out images without boxes.
        classes: Category names to use, in label order; None for all.
        normalize_on_device: ``True`` or ``"auto"``: the default pipeline ships
            uint8 images, normalized on the target device after scatter.

    Raises:
        FileNotFoundError: ``ann_file`` or ``img_prefix`` does not exist.
        ValueError: The annotation file is malformed; the message names the entry
            and field (e.g. ``"annotations[3] has no 'bbox'"``).
        TypeError: ``classes`` is not a list of str.
    """

    def __init__(
        self,
        ann_file: str,
        img_prefix: Optional[str],
        pipeline: Optional[Sequence[Any]] = None,
        test_mode: bool = False,
        filter_empty_gt: bool = True,
        classes: Optional[Sequence[str]] = None,
        normalize_on_device: Union[bool, str] = False,
    ) -> None:
        super().__init__(pipeline, test_mode, normalize_on_device)
        if img_prefix and not osp.isdir(img_prefix):
            raise FileNotFoundError(
                f"CocoDetection: image folder img_prefix={img_prefix!r} does not exist"
            )
        self.ann_file = ann_file
        self.img_prefix = img_prefix
        self.filter_empty_gt = bool(filter_empty_gt)
        self._load(ann_file, classes)

    def _load(self, ann_file: str, classes: Optional[Sequence[str]]) -> None:
        data = load_json(ann_file)
        images = check_images(data, ann_file)
        names = check_categories(data, ann_file)
        self.cat_ids: List[int] = select_categories(names, classes)
        self.cat2label: Dict[int, int] = {
            cat_id: label for label, cat_id in enumerate(self.cat_ids)
        }
        self.CLASSES = tuple(names[cat_id] for cat_id in self.cat_ids)
        anns, self.skipped_boxes = group_annotations(
            data, ann_file, images, names, self.cat2label, required=not self.test_mode
        )
        keep = [
            i
            for i, ann in enumerate(anns)
            if self.test_mode or not self.filter_empty_gt or len(ann["bboxes"]) > 0
        ]
        kept = set(keep)
        self.filtered_img_ids: List[int] = [
            info["id"] for i, info in enumerate(images) if i not in kept
        ]
        self.img_infos = [images[i] for i in keep]
        self.ann_infos = [anns[i] for i in keep]
        self.img_ids: List[int] = [info["id"] for info in self.img_infos]
        self._set_img_sizes([[info["height"], info["width"]] for info in self.img_infos])

    def default_pipeline(self) -> List[Dict[str, Any]]:
        steps: List[Dict[str, Any]] = [dict(type="LoadImageFromFile")]
        if not self.test_mode:
            steps.append(dict(type="LoadAnnotations"))
        steps.append(dict(type="Resize", img_scale=(1333, 800), keep_ratio=True))
        if not self.test_mode:
            steps.append(dict(type="RandomFlip", flip_ratio=0.5))
        return steps + self._format_steps()

    def get_img_info(self, idx: int) -> Dict[str, Any]:
        return dict(self.img_infos[self._check_index(idx)])

    def get_ann_info(self, idx: int) -> Dict[str, np.ndarray]:
        ann = self.ann_infos[self._check_index(idx)]
        return {key: value.copy() for key, value in ann.items()}

    def coco_ground_truth(self) -> Dict[str, Any]:
        """The annotation file as COCO ground truth for pycocotools' ``COCOeval``.

        The file is read again (the dataset keeps only its per-image arrays, which is
        what the loader's workers copy) and passed through
        :func:`mmpar.data.datasets.coco_format.normalize_coco_gt`: every annotation, as
        written, with ``area``, ``iscrowd`` and ``id`` filled in where missing. The
        boxes this dataset leaves out of training (degenerate, outside the image)
        stay, as in any evaluation against the file.

        Raises:
            ValueError: the file has no ``annotations`` (allowed in test mode, but
                there is nothing to score against), or is no longer valid.
        """
        data = load_json(self.ann_file)
        if "annotations" not in data:
            raise ValueError(
                f"CocoDetection: {self.ann_file!r} has no 'annotations': there is no ground "
                "truth to evaluate against"
            )
        check_images(data, self.ann_file)
        check_categories(data, self.ann_file)
        return normalize_coco_gt(data)
