"""What a config's model takes: the batch's keys, mask kind, image sizes and classes.

Read from the config alone (its pipelines and its model), before any batch is made.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, List, Optional, Tuple

from mmpar_zoo.config import dicts

#: Image sizes (height, width) of the training batch, before padding: the second is
#: smaller, so that collate pads it to the first. The test batch is the first.
SHAPES = ((120, 150), (90, 120))
#: Size divisors the architecture needs whatever its pipeline pads to.
TYPE_DIVISORS = {"HourglassNet": 128, "NASFPN": 128, "FPG": 128}


def _pipeline_transforms(dataset_cfg: Any) -> Tuple[List[dict], Optional[dict]]:
    """Every transform of a dataset config's pipelines (wrappers included) and its Collect.

    The Collect is the outermost one (the shallowest): a dataset wrapper's
    (``MultiImageMixDataset``) pipeline runs last.
    """
    transforms = [n for n in dicts(dataset_cfg) if isinstance(n.get("type"), str)]
    collect = next((t for t in transforms if t["type"] == "Collect"), None)
    return transforms, collect


class Needs:
    """What one config's model takes: the batch's keys, mask kind, sizes, classes.

    Read from the config's train and test pipelines (``Collect`` keys,
    ``LoadAnnotations``/``LoadPanopticAnnotations`` flags, ``SegRescale``,
    ``Pad``) and from the model config (class counts, fixed input sizes).

    Args:
        cfg: The config (an ``mmcv.Config``, mmdet's compatibility passes made).
    """

    def __init__(self, cfg: Any) -> None:
        data = cfg.get("data") or {}
        train, collect = _pipeline_transforms(data.get("train"))
        self.keys: List[str] = (
            list(collect["keys"]) if collect else ["img", "gt_bboxes", "gt_labels"]
        )
        loads = [t for t in train if t["type"] in ("LoadAnnotations", "LoadPanopticAnnotations")]
        self.polygons = any(t.get("with_mask") and t.get("poly2mask") is False for t in loads)
        # Semantic maps: LoadAnnotations reads PNGs (uint8); LoadPanopticAnnotations makes
        # them from panopticapi's ids (int32).
        panoptic = any(t["type"] == "LoadPanopticAnnotations" for t in loads)
        self.seg_dtype = "int32" if panoptic else "uint8"
        # Fixed-size resizing or padding, or batches of one image: every image of a batch
        # has the same shape (YOLACT, SSD) or padded shape (Mask2Former, MaskFormer) in
        # training, and some heads rely on it.
        self.same_shape = any(t["type"] == "Resize" and t.get("keep_ratio") is False for t in train)
        self.same_pad = (
            self.same_shape
            or any(t["type"] == "Pad" and t.get("size") for t in train)
            or _samples_per_gpu(data) == 1
        )
        rescale = [t for t in train if t["type"] == "SegRescale"]
        self.seg_scale = float(rescale[0].get("scale_factor", 1)) if rescale else 1.0
        _, test_collect = _pipeline_transforms(data.get("test"))
        self.test_keys: List[str] = list(test_collect["keys"]) if test_collect else ["img"]
        self.meta_keys: Optional[List[str]] = (
            list(test_collect["meta_keys"])
            if test_collect and "meta_keys" in test_collect
            else None
        )
        model = cfg.model
        self.divisor = _divisor(train, model)
        self.fixed_size = _fixed_input_size(model)
        self.things, self.seg_classes = _class_counts(model)
        self.seg_pad = _seg_ignore(model)
        #: Rotated boxes (cx, cy, w, h, angle) instead of (x1, y1, x2, y2): mmrotate's.
        self.rotated = False

    def shapes(self) -> List[Tuple[Tuple[int, int], Tuple[int, int]]]:
        """(image shape, padded shape) of each training image (the test image is the first)."""
        if self.fixed_size is not None:
            side = (self.fixed_size, self.fixed_size)
            return [(side, side)] * len(SHAPES)
        found = []
        for base in SHAPES[:1] * len(SHAPES) if self.same_shape else SHAPES:
            pad = tuple(int(math.ceil(s / self.divisor) * self.divisor) for s in base)
            found.append((base, found[0][1] if found and self.same_pad else (pad[0], pad[1])))
        return found


def _samples_per_gpu(data: Any) -> Optional[int]:
    """Images per GPU in training (mmdet's compat_cfg moves it into ``train_dataloader``)."""
    return (data.get("train_dataloader") or {}).get("samples_per_gpu", data.get("samples_per_gpu"))


def _divisor(train: List[dict], model: Any) -> int:
    divisor = 32
    for t in train:
        if t["type"] == "Pad" and (t.get("size_divisor") or 0) > 1:
            divisor = max(divisor, int(t["size_divisor"]))
    for node in dicts(model):
        divisor = max(divisor, TYPE_DIVISORS.get(str(node.get("type")), 0))
    return divisor


def _fixed_input_size(model: Any) -> Optional[int]:
    """The input side of a model made for one input size (SSD's anchor generator)."""
    for node in dicts(model):
        if isinstance(node.get("input_size"), int) and "anchor" in str(node.get("type")).lower():
            return int(node["input_size"])
    return None


def _seg_ignore(model: Any) -> int:
    """The label that pads semantic maps: 255, or a semantic head's ``ignore_label``.

    mmdet 2.14's ``FusedSemanticHead`` ignores its ``ignore_label`` alone; mmdet3d 0.17's
    nuImages HTC configs set it to 0, the label their maps are padded with.
    """
    found = [n["ignore_label"] for n in dicts(model) if isinstance(n.get("ignore_label"), int)]
    return found[0] if found else 255


def _class_counts(model: Any) -> Tuple[int, int]:
    """(thing classes of the boxes' labels, classes of the semantic map)."""
    things = stuff = None
    counts: List[int] = []
    semantic: List[int] = []
    for node in dicts(model):
        if isinstance(node.get("num_things_classes"), int):
            things = node["num_things_classes"]
            stuff = node.get("num_stuff_classes", 0)
    for key, value in _items(model):
        if key[-1] != "num_classes" or not isinstance(value, int):
            continue
        if "semantic_head" in key:
            semantic.append(value)
        elif "rpn_head" not in key:
            counts.append(value)
    if things is None:
        things = min(counts) if counts else 1
    seg_classes = things + stuff if stuff is not None else (min(semantic) if semantic else things)
    return things, seg_classes


def _items(tree: Any, key: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], Any]]:
    """(key path, value) of every leaf of a config tree."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _items(v, key + (str(k),))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _items(v, key + (str(i),))
    else:
        yield key, tree
