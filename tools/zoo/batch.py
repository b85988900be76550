"""The small random batches of a config: images, boxes, labels, masks, proposals, maps.

Each sample is what mmdet's DefaultFormatBundle and Collect emit (train) or what
MultiScaleFlipAug emits (test), and ``mmpar.collate`` batches them.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from mmpar_zoo.images import image, image_meta
from mmpar_zoo.needs import Needs


def _boxes(rng: Any, shape: Tuple[int, int], count: int) -> Any:
    """``count`` random boxes (count, 4) float32 x1, y1, x2, y2 inside an image of ``shape``."""
    import numpy as np

    h, w = shape
    size = rng.uniform(0.15, 0.5, (count, 2)) * np.array([w, h])
    corner = rng.uniform(0, 1, (count, 2)) * (np.array([w, h]) - size)
    return np.concatenate([corner, corner + size], axis=1).astype(np.float32)


def _masks(boxes: Any, pad: Tuple[int, int], polygons: bool) -> Any:
    """One mask per box: the ellipse inscribed in it (mmdet's BitmapMasks or PolygonMasks)."""
    import numpy as np
    from mmdet.core import BitmapMasks, PolygonMasks

    angles = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    outlines = []
    for x1, y1, x2, y2 in boxes:
        cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
        points = np.stack([cx + rx * np.cos(angles), cy + ry * np.sin(angles)], axis=1)
        outlines.append(points.reshape(-1))
    if polygons:
        return PolygonMasks([[p] for p in outlines], *pad)
    ys, xs = np.mgrid[: pad[0], : pad[1]] + 0.5
    bitmaps = [
        ((xs - (x1 + x2) / 2) / max((x2 - x1) / 2, 1)) ** 2
        + ((ys - (y1 + y2) / 2) / max((y2 - y1) / 2, 1)) ** 2
        <= 1
        for x1, y1, x2, y2 in boxes
    ]
    return BitmapMasks(np.stack(bitmaps).astype(np.uint8), *pad)


def train_sample(
    needs: Needs, rng: Any, index: int, shape: Tuple[int, int], pad: Tuple[int, int]
) -> dict:
    """One sample of the train batch, as mmdet's DefaultFormatBundle and Collect emit it.

    Args:
        needs: What the model takes.
        rng: numpy's random generator.
        index: The image's place in the batch.
        shape: (height, width) of the image.
        pad: (height, width) it is padded to.

    Returns:
        Collect's keys -> DataContainers, and ``img_metas``.

    Raises:
        ValueError: The train pipeline collects a key the tool cannot make.
    """
    import torch

    from mmpar import DataContainer as DC

    boxes = _boxes(rng, shape, 3)
    sample: Dict[str, Any] = {}
    for key in needs.keys:
        if key == "img":
            sample[key] = DC(image(rng, shape, pad), stack=True)
        elif key == "gt_bboxes":
            sample[key] = DC(torch.from_numpy(_rotated(rng, boxes) if needs.rotated else boxes))
        elif key == "gt_labels":
            sample[key] = DC(torch.from_numpy(rng.integers(0, needs.things, len(boxes))))
        elif key == "gt_masks":
            sample[key] = DC(_masks(boxes, pad, needs.polygons), cpu_only=True)
        elif key == "gt_semantic_seg":
            size = tuple(int(round(s * needs.seg_scale)) for s in pad)
            seg = rng.integers(0, needs.seg_classes, size).astype(needs.seg_dtype)
            sample[key] = DC(torch.from_numpy(seg[None]), padding_value=needs.seg_pad, stack=True)
        elif key == "proposals":
            sample[key] = DC(torch.from_numpy(_proposals(rng, boxes, shape)))
        elif key == "gt_bboxes_ignore":
            sample[key] = DC(torch.zeros(0, 4))
        else:
            raise ValueError(f"the train pipeline collects {key!r}, which the tool cannot make")
    sample["img_metas"] = DC(image_meta(index, shape, pad, 1.0), cpu_only=True)
    return sample


def _rotated(rng: Any, boxes: Any) -> Any:
    """Rotated boxes (N, 5) float32 cx, cy, w, h, angle inside the given boxes.

    The angles (0.1 to 1.4 radians) lie in every angle range of mmrotate ('oc' (0,
    pi/2], 'le90' [-pi/2, pi/2), 'le135' [-pi/4, 3pi/4)).
    """
    import numpy as np

    centers = (boxes[:, :2] + boxes[:, 2:]) / 2
    sides = (boxes[:, 2:] - boxes[:, :2]) * 0.6
    angles = rng.uniform(0.1, 1.4, (len(boxes), 1))
    return np.concatenate([centers, sides, angles], axis=1).astype(np.float32)


def _proposals(rng: Any, boxes: Any, shape: Tuple[int, int]) -> Any:
    """Proposals (N, 4) float32: the boxes jittered, and random ones (as LoadProposals gives)."""
    import numpy as np

    jittered = boxes + rng.normal(0, 4, (8,) + boxes.shape).astype(np.float32)
    others = _boxes(rng, shape, 40)
    found = np.concatenate([jittered.reshape(-1, 4), others])
    found[:, 0::2] = found[:, 0::2].clip(0, shape[1] - 1)
    found[:, 1::2] = found[:, 1::2].clip(0, shape[0] - 1)
    found[:, 2:] = np.maximum(found[:, 2:], found[:, :2] + 1)
    return found.astype(np.float32)


def test_sample(needs: Needs, rng: Any, shape: Tuple[int, int], pad: Tuple[int, int]) -> dict:
    """One test sample as MultiScaleFlipAug emits it: lists of one augmentation.

    Args:
        needs: What the model takes.
        rng: numpy's random generator.
        shape: (height, width) of the image.
        pad: (height, width) it is padded to.

    Returns:
        ``img``, ``img_metas`` and the other keys the test pipeline collects.

    Raises:
        ValueError: The test pipeline collects a key the tool cannot make.
    """
    import torch

    from mmpar import DataContainer as DC

    meta = image_meta(0, shape, pad, 0.8)
    if needs.meta_keys is not None:
        meta = {k: meta[k] for k in needs.meta_keys if k in meta}
    sample: Dict[str, Any] = {
        "img": [image(rng, shape, pad)],
        "img_metas": [DC(meta, cpu_only=True)],
    }
    for key in needs.test_keys:
        if key == "proposals":
            boxes = _boxes(rng, shape, 3)
            sample[key] = [DC(torch.from_numpy(_proposals(rng, boxes, shape)))]
        elif key != "img":
            raise ValueError(f"the test pipeline collects {key!r}, which the tool cannot make")
    return sample


def make_batches(needs: Needs, seed: int) -> Tuple[Any, Any]:
    """(train batch of 2 images, test batch of 1), collated by mmpar.

    Args:
        needs: What the model takes.
        seed: The seed of numpy's generator that makes them.
    """
    import numpy as np

    from mmpar import collate

    rng = np.random.default_rng(seed)
    shapes = needs.shapes()
    samples = [train_sample(needs, rng, i, *s) for i, s in enumerate(shapes)]
    train = collate(samples, samples_per_gpu=len(samples))
    test = collate([test_sample(needs, rng, *shapes[0])], samples_per_gpu=1)
    return train, test
