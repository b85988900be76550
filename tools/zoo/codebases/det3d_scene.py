"""What an mmdet3d config's model takes, read from its pipelines and its model config.

Read before any sample is made: the keys the train and test pipelines collect
(``Collect3D``), the box type (LiDAR, Depth or Camera), the point features
(``LoadPointsFromFile``'s ``use_dim``, ``shift_height``, the normalized coordinates
``IndoorPatchPointSample`` adds), the points a sampler keeps, the point cloud
range, the box size (9 with velocities), the class count and the image size.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from mmpar_zoo.config import dicts

#: Points of a LiDAR sweep outside the boxes, and inside each box.
LIDAR_POINTS = 4000
BOX_POINTS = 150
#: Points a sampler keeps, at most (the configs sample 4096 to 100000).
MAX_POINTS = 20000
#: Image size (height, width) of mono and multi-modal models, a multiple of 32.
IMAGE = (96, 160)
#: The range (x0, y0, z0, x1, y1, z1) of an indoor scene (Depth boxes).
INDOOR_RANGE = (-3.0, -3.0, 0.0, 3.0, 3.0, 2.5)
#: The range of the points of an indoor segmentation patch (``IndoorPatchPointSample``).
PATCH_RANGE = (0.0, 0.0, 0.0, 1.5, 1.5, 2.5)
#: A LiDAR range for configs that name none.
LIDAR_RANGE = (0.0, -40.0, -3.0, 70.4, 40.0, 1.0)
#: Box types by the points' ``coord_type``.
BOX_TYPES = {"LIDAR": "LiDAR", "DEPTH": "Depth", "CAMERA": "Camera"}


def _dataset(cfg: Any, split: str) -> dict:
    """The dataset of ``data.<split>`` that a wrapper (``CBGSDataset``, ``RepeatDataset``)
    wraps, or the first of a concatenation: the one whose pipeline runs.

    A wrapper can hold a stale ``pipeline`` of its own, merged in from a ``_base_``
    config: the wrapped dataset's is the one used.
    """
    node = (cfg.get("data") or {}).get(split)
    while True:
        if isinstance(node, (list, tuple)) and node:
            node = node[0]
        elif isinstance(node, dict) and isinstance(node.get("dataset"), (dict, list, tuple)):
            node = node["dataset"]
        elif isinstance(node, dict) and isinstance(node.get("datasets"), (list, tuple)):
            node = node["datasets"]
        else:
            return node if isinstance(node, dict) else {}


def pipeline(cfg: Any, split: str) -> List[dict]:
    """The pipeline of the dataset of ``data.<split>`` that runs (see :func:`_dataset`)."""
    found = _dataset(cfg, split).get("pipeline")
    if not isinstance(found, list):
        raise ValueError(f"the config has no {split} pipeline under data.{split}")
    return list(found)


def _transforms(steps: Sequence[dict]) -> List[dict]:
    """Every transform of a pipeline, those inside ``MultiScaleFlipAug*`` included."""
    return [n for n in dicts(list(steps)) if isinstance(n.get("type"), str)]


def _first(steps: Sequence[dict], *types: str) -> Optional[dict]:
    return next((t for t in _transforms(steps) if t["type"] in types), None)


class Scene:
    """What one mmdet3d config's model takes.

    Args:
        cfg: The config.
    """

    def __init__(self, cfg: Any) -> None:
        train, test = pipeline(cfg, "train"), pipeline(cfg, "test")
        collect = _first(train, "Collect3D", "Collect") or {}
        self.keys: List[str] = list(collect.get("keys", ["points", "gt_bboxes_3d"]))
        test_collect = _first(test, "Collect3D", "Collect") or {}
        self.test_keys: List[str] = list(test_collect.get("keys", ["points"]))
        #: The test pipeline wraps its samples in lists of augmentations.
        self.test_augs = any(str(t["type"]).startswith("MultiScaleFlipAug") for t in test)
        load = _first(train, "LoadPointsFromFile") or _first(test, "LoadPointsFromFile") or {}
        self.coord = str(load.get("coord_type", "LIDAR"))
        box_type = _dataset(cfg, "train").get("box_type_3d")
        if box_type is None:
            box_type = BOX_TYPES.get(self.coord, "LiDAR") if load else _image_box_type(cfg)
        self.box_type = str(box_type)
        self.point_dims = _point_dims(load, train)
        #: A segmentor's test points lack the normalized coordinates its patches add.
        self.test_point_dims = _point_dims(_first(test, "LoadPointsFromFile") or load, test)
        self.points = _sampled(train)
        self.patch = _first(train, "IndoorPatchPointSample") is not None
        self.range = _range(cfg, train, self.box_type, self.patch)
        self.box_dim = _box_dim(cfg.model)
        #: Boxes turn about z (ScanNet's heads code none: ``with_rot=False``).
        self.yaw = not any(n.get("with_rot") is False for n in dicts(cfg.model))
        self.classes = _classes(cfg)
        self.attrs = _int_in(cfg.model, "num_attrs") or 9
        self.image = IMAGE
        #: Each split's pipeline resizes its images: mmdet's Resize sets ``scale_factor``
        #: to 4 values; without one, MultiScaleFlipAug's ``scale_factor=1.0`` stays.
        self.resized = {
            split: _first(steps, "Resize", "Resize3D") is not None
            for split, steps in (("train", train), ("test", test))
        }

    @property
    def seg(self) -> bool:
        """A point segmentor: it takes ``pts_semantic_mask`` and no boxes."""
        return "pts_semantic_mask" in self.keys and "gt_bboxes_3d" not in self.keys


def _image_box_type(cfg: Any) -> str:
    """An image-only model's boxes: Camera for mono detectors, else the dataset's."""
    if "Mono3D" in str(cfg.model.get("type")):
        return "Camera"
    return "LiDAR"


def _point_dims(load: dict, train: Sequence[dict]) -> int:
    """Features per point after the pipeline (the model's ``in_channels`` follow them)."""
    use = load.get("use_dim", load.get("load_dim", 4))
    sweeps = _first(train, "LoadPointsFromMultiSweeps")
    if sweeps is not None:  # it keeps x, y, z and the time (its default) of every sweep
        use = sweeps.get("use_dim", [0, 1, 2, 4])
    dims = len(use) if isinstance(use, (list, tuple)) else int(use)
    if load.get("shift_height"):
        dims += 1
    patch = _first(train, "IndoorPatchPointSample")
    if patch is not None and patch.get("use_normalized_coord"):
        dims += 3
    return dims


def _sampled(train: Sequence[dict]) -> Optional[int]:
    """The points a sampler of the train pipeline keeps (capped at :data:`MAX_POINTS`)."""
    for t in _transforms(train):
        if "Sample" in t["type"] and isinstance(t.get("num_points"), int):
            return min(int(t["num_points"]), MAX_POINTS)
    return None


def _range(cfg: Any, train: Sequence[dict], box_type: str, patch: bool) -> Tuple[float, ...]:
    if patch:
        return PATCH_RANGE
    if box_type == "Depth":
        return INDOOR_RANGE
    found = cfg.get("point_cloud_range")
    if found is None:
        step = _first(train, "PointsRangeFilter", "ObjectRangeFilter") or {}
        found = step.get("point_cloud_range")
    return tuple(float(v) for v in found) if found else LIDAR_RANGE


def _int_in(model: Any, key: str) -> Optional[int]:
    values = [n[key] for n in dicts(model) if isinstance(n.get(key), int)]
    return max(values) if values else None


def _box_dim(model: Any) -> int:
    """7, or 9 where the heads code velocities (nuScenes): a code size of 9, or a head
    that predicts them (``pred_velo``; mmdet3d 0.17's FCOS3D leaves its code size of 9
    to the head's default)."""
    nodes = list(dicts(model))
    sizes = [
        n[k] for n in nodes for k in ("code_size", "bbox_code_size") if isinstance(n.get(k), int)
    ]
    return 9 if 9 in sizes or any(n.get("pred_velo") is True for n in nodes) else 7


def _classes(cfg: Any) -> int:
    """The class count: the config's ``class_names``, else the heads' ``num_classes``."""
    names = cfg.get("class_names")
    if isinstance(names, (list, tuple)) and names:
        return len(names)
    tasks = [n for n in dicts(cfg.model) if isinstance(n.get("tasks"), list)]
    if tasks:
        return sum(int(t.get("num_class", 1)) for t in tasks[0]["tasks"])
    counts = [n["num_classes"] for n in dicts(cfg.model) if isinstance(n.get("num_classes"), int)]
    return min(counts) if counts else 1
