"""mmocr's samples, made by the config's own pipeline from a small random image.

mmocr's models take targets that its pipelines compute (DBNet's shrink and
threshold maps, PANet's kernels, FCENet's Fourier maps, DRRG's components, the
segmentation recognizer's character kernels): the tool runs the tail of the
config's pipeline (:func:`tail`: normalizing, the ``*Targets`` transforms,
padding, the format bundle, ``Collect``, and the test-time wrappers) on what the
loading and augmenting head would have left: a small random image with text
polygons, a text line with its string, or a receipt's boxes and texts.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from mmpar_zoo.images import image_meta

#: Transforms of a pipeline's tail: they compute targets or format, at the image's size.
KEEP = (
    "Normalize",
    "NormalizeOCR",
    "ToTensorOCR",
    "ResizeOCR",
    "OCRSegTargets",
    "Pad",
    "ImageToTensor",
    "Collect",
    "MultiScaleFlipAug",
    "MultiRotateAugOCR",
)
#: Characters of the text strings (in every dictionary of mmocr's configs).
CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"
#: (height, width) of the text detectors' training images and of their test image.
DET_SHAPE = (160, 160)
DET_TEST_SHAPE = (150, 180)


def _kept(t: Any) -> bool:
    kind = str(t.get("type", ""))
    return kind in KEEP or kind.endswith(("Targets", "FormatBundle"))


def tail(pipeline: List[dict]) -> List[dict]:
    """The transforms of ``pipeline`` that :data:`KEEP` names, wrappers' ones too.

    A ``MultiScaleFlipAug`` keeps its wrapping (lists of one augmentation), without
    its resizing: the image keeps its size.
    """
    found = []
    for t in pipeline:
        if not _kept(t):
            continue
        t = dict(t)
        if "transforms" in t:
            t["transforms"] = tail(t["transforms"])
        if t["type"] == "MultiScaleFlipAug":
            t["flip"] = False
        found.append(t)
    return found


def run(pipeline: List[dict], results: Dict[str, Any]) -> Dict[str, Any]:
    """``results`` through the transforms (mmdet's ``Compose``, where mmocr registers its)."""
    from mmdet.datasets.pipelines import Compose

    return Compose(pipeline)(results)


def loaded(rng: Any, shape: Tuple[int, int], channels: int, index: int) -> Dict[str, Any]:
    """What loading leaves: a uint8 image and its names and shapes."""
    import numpy as np

    img = rng.integers(0, 256, shape + (channels,)).astype(np.uint8)
    return dict(
        img=img if channels > 1 else img[..., 0],
        img_shape=img.shape,
        ori_shape=img.shape,
        filename=f"zoo_{index}.jpg",
        ori_filename=f"zoo_{index}.jpg",
        img_fields=["img"],
        bbox_fields=[],
        mask_fields=[],
        seg_fields=[],
        scale_factor=np.ones(4, dtype=np.float32),
        flip=False,
        flip_direction=None,
        keep_ratio=True,
    )


def _text_polygons(rng: Any, shape: Tuple[int, int], count: int) -> List[Any]:
    """``count`` text lines: rotated rectangles outlined by 7 points on each long side."""
    import numpy as np

    h, w = shape
    found = []
    for _ in range(count):
        length, thick = rng.uniform(0.35, 0.6) * w, rng.uniform(0.1, 0.16) * h
        angle = rng.uniform(-0.3, 0.3)
        margin = length / 2 + thick
        cx, cy = rng.uniform(margin, w - margin), rng.uniform(thick * 2, h - thick * 2)
        along = np.linspace(-length / 2, length / 2, 7)
        top = np.stack([along, np.full(7, -thick / 2)], 1)
        bottom = np.stack([along[::-1], np.full(7, thick / 2)], 1)
        points = np.concatenate([top, bottom])
        rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        found.append((points @ rot.T + [cx, cy]).astype(np.float32).reshape(-1))
    return found


def text_detection(rng: Any, index: int) -> Dict[str, Any]:
    """An image with 3 text lines (polygon masks, their boxes, label 0), none ignored."""
    import numpy as np
    from mmdet.core import PolygonMasks

    results = loaded(rng, DET_SHAPE, 3, index)
    polygons = _text_polygons(rng, DET_SHAPE, 3)
    boxes = np.array(
        [[p[0::2].min(), p[1::2].min(), p[0::2].max(), p[1::2].max()] for p in polygons],
        dtype=np.float32,
    )
    results.update(
        gt_masks=PolygonMasks([[p] for p in polygons], *DET_SHAPE),
        gt_masks_ignore=PolygonMasks([], *DET_SHAPE),
        gt_bboxes=boxes,
        gt_labels=np.zeros(len(boxes), dtype=np.int64),
        gt_bboxes_ignore=np.zeros((0, 4), dtype=np.float32),
        bbox_fields=["gt_bboxes", "gt_bboxes_ignore"],
        mask_fields=["gt_masks", "gt_masks_ignore"],
    )
    return results


def detection_test(pipeline: List[dict], rng: Any) -> Dict[str, Any]:
    """A test image, as resized to 0.8 of its original, through the test pipeline's tail."""
    h, w = DET_TEST_SHAPE
    results = loaded(rng, (h, w), 3, 0)
    meta = image_meta(0, (h, w), (h, w), 0.8)
    results.update(ori_shape=meta["ori_shape"], scale_factor=meta["scale_factor"])
    return run(tail(pipeline), results)


def text_line(rng: Any, index: int, channels: int) -> Dict[str, Any]:
    """A text line's image (before ResizeOCR), its string, and the characters' quads."""
    shape = (40, 120)
    results = loaded(rng, shape, channels, index)
    text = "".join(rng.choice(list(CHARS), int(rng.integers(3, 8))))
    step = shape[1] / len(text)
    quads = [
        [i * step, 4, (i + 1) * step - 1, 4, (i + 1) * step - 1, 36, i * step, 36]
        for i in range(len(text))
    ]
    results.update(text=text, ann_info=dict(chars=list(text), char_quads=quads))
    return results


def receipt(rng: Any, index: int, classes: int) -> Dict[str, Any]:
    """A receipt: 4 text boxes, their strings' indices, relations and node/edge labels."""
    import numpy as np

    shape, count = (96, 128), 4
    results = loaded(rng, shape, 3, index)
    corner = rng.uniform(0, 1, (count, 2)) * [shape[1] - 40, shape[0] - 16]
    boxes = np.concatenate([corner, corner + [40, 16]], 1).astype(np.float32)
    x1, y1, x2, y2 = (boxes[:, i : i + 1] for i in range(4))
    w, h = x2 - x1 + 1, y2 - y1 + 1
    relations = np.stack(
        [(x1.T - x1) / 10, (y1.T - y1) / 10, w / h + 0 * (h.T / h), h.T / h, w.T / h], -1
    ).astype(np.float32)
    lengths = rng.integers(2, 6, count)
    texts = np.full((count, lengths.max()), -1, dtype=np.int64)
    for i, n in enumerate(lengths):
        texts[i, :n] = rng.integers(0, len(CHARS), n)
    edges = rng.integers(0, 2, (count, count)).astype(np.int64)
    np.fill_diagonal(edges, -1)
    labels = np.concatenate([rng.integers(0, classes, (count, 1)), edges], 1)
    results.update(
        gt_bboxes=boxes,
        gt_labels=labels,
        bbox_fields=["gt_bboxes"],
        ann_info=dict(relations=relations, texts=texts),
        ori_texts=["".join(CHARS[j] for j in t if j >= 0) for t in texts],
        ori_bboxes=boxes.copy(),
    )
    return results
