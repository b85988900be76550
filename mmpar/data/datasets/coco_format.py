"""Read and check a COCO-format annotation file.

Every problem is reported with the path of the offending entry, e.g.
``"annotations[3] has no 'bbox'"`` or ``"images[0].width must be a positive int"``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mmpar.utils.checks import is_int

__all__ = [
    "load_json",
    "check_images",
    "check_categories",
    "select_categories",
    "group_annotations",
    "normalize_coco_gt",
]


def load_json(path: str) -> Dict[str, Any]:
    """The top-level object of a COCO annotation file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: invalid JSON, or the top level is not an object.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"CocoDetection: annotation file {path!r} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(
            f"CocoDetection: annotation file {path!r} is not valid JSON: {err}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"CocoDetection: {path!r} must hold a JSON object, got a {type(data).__name__}"
        )
    return data


def _list(data: Mapping[str, Any], key: str, path: str) -> List[Any]:
    if key not in data:
        raise ValueError(f"CocoDetection: {path!r} has no {key!r} key (keys: {sorted(data)})")
    if not isinstance(data[key], list):
        raise ValueError(
            f"CocoDetection: {path!r}: {key!r} must be a list, got {type(data[key]).__name__}"
        )
    return data[key]


def _field(entry: Any, where: str, key: str) -> Any:
    if not isinstance(entry, dict):
        raise ValueError(f"CocoDetection: {where} must be an object, got {type(entry).__name__}")
    if key not in entry:
        raise ValueError(f"CocoDetection: {where} has no {key!r}")
    return entry[key]


def _int(entry: Any, where: str, key: str, positive: bool = False) -> int:
    value = _field(entry, where, key)
    if not is_int(value) or (positive and value <= 0):
        kind = "a positive int" if positive else "an int"
        raise ValueError(f"CocoDetection: {where}.{key} must be {kind}, got {value!r}")
    return value


def check_images(data: Mapping[str, Any], path: str) -> List[Dict[str, Any]]:
    """``[dict(id, filename, width, height)]`` in file order.

    Raises:
        ValueError: a missing ``images`` list or field, a bad value, a repeated id.
    """
    infos: List[Dict[str, Any]] = []
    seen: Dict[int, int] = {}
    for i, entry in enumerate(_list(data, "images", path)):
        where = f"images[{i}]"
        img_id = _int(entry, where, "id")
        name = _field(entry, where, "file_name")
        if not isinstance(name, str) or not name:
            raise ValueError(
                f"CocoDetection: {where}.file_name must be a non-empty str, got {name!r}"
            )
        if img_id in seen:
            raise ValueError(
                f"CocoDetection: {where}.id {img_id} repeats the id of images[{seen[img_id]}]"
            )
        seen[img_id] = i
        infos.append(
            dict(
                id=img_id,
                filename=name,
                width=_int(entry, where, "width", positive=True),
                height=_int(entry, where, "height", positive=True),
            )
        )
    return infos


def check_categories(data: Mapping[str, Any], path: str) -> Dict[int, str]:
    """``{category id: name}``.

    Raises:
        ValueError: a missing ``categories`` list or field, a repeated id or name.
    """
    names: Dict[int, str] = {}
    for i, entry in enumerate(_list(data, "categories", path)):
        where = f"categories[{i}]"
        cat_id = _int(entry, where, "id")
        name = _field(entry, where, "name")
        if not isinstance(name, str):
            raise ValueError(f"CocoDetection: {where}.name must be a str, got {name!r}")
        if cat_id in names:
            raise ValueError(f"CocoDetection: {where}.id {cat_id} is used by two categories")
        if name in names.values():
            raise ValueError(f"CocoDetection: {where}.name {name!r} is used by two categories")
        names[cat_id] = name
    return names


def select_categories(names: Mapping[int, str], classes: Optional[Sequence[str]]) -> List[int]:
    """Category ids in label order: all by increasing id, or those of ``classes``.

    Raises:
        TypeError: ``classes`` is not a list of str.
        ValueError: a class is not a category name, or appears twice.
    """
    if classes is None:
        return sorted(names)
    if (
        isinstance(classes, str)
        or not isinstance(classes, Sequence)
        or not all(isinstance(c, str) for c in classes)
    ):
        raise TypeError(f"CocoDetection: classes must be a list of category names, got {classes!r}")
    by_name = {name: cat_id for cat_id, name in names.items()}
    ids = []
    for name in classes:
        if name not in by_name:
            raise ValueError(
                f"CocoDetection: classes: {name!r} is not a category name (names: "
                f"{sorted(by_name)})"
            )
        if by_name[name] in ids:
            raise ValueError(f"CocoDetection: classes: {name!r} is given twice")
        ids.append(by_name[name])
    return ids


def _bbox(entry: Dict[str, Any], where: str) -> Tuple[float, float, float, float]:
    box = _field(entry, where, "bbox")
    if (
        not isinstance(box, (list, tuple))
        or len(box) != 4
        or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in box
        )
    ):
        raise ValueError(
            f"CocoDetection: {where}.bbox must be 4 finite numbers [x, y, w, h], got {box!r}"
        )
    return tuple(float(v) for v in box)  # type: ignore[return-value]


def group_annotations(
    data: Mapping[str, Any],
    path: str,
    images: List[Dict[str, Any]],
    names: Mapping[int, str],
    cat2label: Mapping[int, int],
    required: bool = True,
) -> Tuple[List[Dict[str, np.ndarray]], Dict[str, int]]:
    """Per image (in ``images`` order): ``bboxes``, ``labels``, ``bboxes_ignore``.

    Crowd boxes (``iscrowd=1``) go to ``bboxes_ignore``. Boxes of zero or negative
    width or height, boxes entirely outside their image and boxes of categories
    not selected are left out, and counted.

    Returns:
        The per-image arrays and the counts ``{"degenerate", "outside",
        "other_class", "crowd"}``.

    Raises:
        ValueError: a missing ``annotations`` list (when ``required``) or field, an
            unknown image or category id, a bad ``bbox`` or ``iscrowd``.
    """
    index = {info["id"]: i for i, info in enumerate(images)}
    boxes: List[List[List[float]]] = [[] for _ in images]
    labels: List[List[int]] = [[] for _ in images]
    ignore: List[List[List[float]]] = [[] for _ in images]
    counts = dict(degenerate=0, outside=0, other_class=0, crowd=0)
    entries = _list(data, "annotations", path) if required or "annotations" in data else []
    for i, entry in enumerate(entries):
        where = f"annotations[{i}]"
        img_id = _int(entry, where, "image_id")
        if img_id not in index:
            raise ValueError(f"CocoDetection: {where}.image_id {img_id} is not the id of any image")
        cat_id = _int(entry, where, "category_id")
        if cat_id not in names:
            raise ValueError(
                f"CocoDetection: {where}.category_id {cat_id} is not the id of any category"
            )
        x, y, w, h = _bbox(entry, where)
        crowd = entry.get("iscrowd", 0)
        if crowd not in (0, 1) or isinstance(crowd, float):
            raise ValueError(f"CocoDetection: {where}.iscrowd must be 0 or 1, got {crowd!r}")
        k = index[img_id]
        info = images[k]
        if w <= 0 or h <= 0:
            counts["degenerate"] += 1
        elif x >= info["width"] or y >= info["height"] or x + w <= 0 or y + h <= 0:
            counts["outside"] += 1
        elif cat_id not in cat2label:
            counts["other_class"] += 1
        elif crowd:
            counts["crowd"] += 1
            ignore[k].append([x, y, x + w, y + h])
        else:
            boxes[k].append([x, y, x + w, y + h])
            labels[k].append(cat2label[cat_id])
    anns = [
        dict(
            bboxes=np.array(b, dtype=np.float32).reshape(-1, 4),
            labels=np.array(lab, dtype=np.int64),
            bboxes_ignore=np.array(ig, dtype=np.float32).reshape(-1, 4),
        )
        for b, lab, ig in zip(boxes, labels, ignore)
    ]
    return anns, counts


def normalize_coco_gt(data: Mapping[str, Any]) -> Dict[str, Any]:
    """A COCO ground truth that ``COCOeval`` accepts, from an annotation file's object.

    ``COCOeval`` reads ``area``, ``iscrowd`` and ``id`` of every annotation, which
    COCO-format files made by hand often lack: a missing ``area`` becomes the box's
    ``w * h``, a missing ``iscrowd`` 0, a missing ``id`` the annotation's position + 1.
    Everything else is kept as written.

    Args:
        data: ``dict(images=[...], annotations=[...], categories=[...])``.

    Returns:
        A new dict; ``data`` is not changed.
    """
    annotations = []
    for i, ann in enumerate(data["annotations"]):
        ann = dict(ann)
        if "area" not in ann:
            ann["area"] = float(ann["bbox"][2]) * float(ann["bbox"][3])
        ann.setdefault("iscrowd", 0)
        ann.setdefault("id", i + 1)
        annotations.append(ann)
    out = {key: value for key, value in data.items() if key != "annotations"}
    out["annotations"] = annotations
    return out
