"""mmdet3d 1.0: LiDAR, indoor, monocular and multi-modal 3D detectors, point segmentors,
and nuImages' 2D detectors.

Each sample is what the config's train pipeline ends in (``DefaultFormatBundle3D``
and ``Collect3D``; see ``det3d_scene`` and ``det3d_samples``): point clouds of a
few thousand points (or the count the pipeline samples) as DataContainers of
different sizes, boxes as ``LiDARInstance3DBoxes``, ``DepthInstance3DBoxes`` or
``CameraInstance3DBoxes`` (``cpu_only``), labels, point masks, images with
``cam2img`` / ``lidar2img`` / ``depth2img`` in their metas. nuImages' configs are
mmdet's models, and take mmdet's batches. mmdet3d 1.0 asks for mmcv <= 1.7.0 (see
``--pythonpath``); FCAF3D needs MinkowskiEngine, which installing mmdet3d does not
install (skipped, not counted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Tuple

from mmpar_zoo.batch import make_batches as detection_batches
from mmpar_zoo.checks import check_result as check_detection
from mmpar_zoo.codebase import Codebase, StageError, form
from mmpar_zoo.codebases import det3d_samples as samples
from mmpar_zoo.codebases.det import mmdet_compat
from mmpar_zoo.codebases.det3d_scene import Scene, pipeline
from mmpar_zoo.config import dicts, limit_rois, load_config
from mmpar_zoo.needs import Needs

#: ImVoxelNet's volumes wider than this (KITTI's 216 x 248 x 12 voxels, about 30 times
#: SUN RGB-D's) are made 4 times coarser along x and y: the same code on a smaller grid.
VOXELS_XY = 64
#: Model parts built on MinkowskiEngine (FCAF3D), which mmdet3d does not install.
MINKOWSKI = ("MinkResNet", "FCAF3DHead", "MinkSingleStage3DDetector")


def is_2d(cfg: Any) -> bool:
    """An mmdet model (nuImages): its train pipeline ends in mmdet's ``Collect``."""
    types = {t.get("type") for t in dicts(pipeline(cfg, "train"))}
    return "Collect3D" not in types and "Collect" in types


def _needs_minkowski(cfg: Any) -> None:
    """Raise the ImportError that makes the run a SKIP where MinkowskiEngine is missing."""
    import importlib.util

    if importlib.util.find_spec("MinkowskiEngine") is not None:
        return
    if any(n.get("type") in MINKOWSKI for n in dicts(cfg.model)):
        raise ImportError("No module named 'MinkowskiEngine'", name="MinkowskiEngine")


class MMDet3D(Codebase):
    """mmdet3d 1.0 (``mmdet3d.models.build_model``, mmdet's builder for 2D types)."""

    name = "mmdet3d"
    package = "mmdet3d"
    distribution = "mmdet3d"
    install = "python -m mmpar.compat.install --mmcv 1.7.0 --target DIR mmdet3d"
    modules = ("mmdet3d.models", "mmdet3d.core", "mmdet.models")
    optional = ("MinkowskiEngine",)

    def load_config(self, path: Path) -> Any:
        cfg = load_config(path)
        return mmdet_compat(cfg) if is_2d(cfg) else cfg

    def prepare_config(self, cfg: Any, config_rois: bool) -> None:
        """Fewer RoIs (unless ``config_rois``), and ImVoxelNet's LiDAR volume coarser."""
        _needs_minkowski(cfg)
        if not config_rois:
            limit_rois(cfg)
        voxels = cfg.model.get("n_voxels")
        if cfg.model.get("type") == "ImVoxelNet" and voxels and voxels[0] > VOXELS_XY:
            cfg.model.n_voxels = [voxels[0] // 4, voxels[1] // 4, *voxels[2:]]

    def builder(self, cfg: Any) -> Any:
        from mmdet3d.models import build_model

        return build_model(cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg"))

    def make_batches(self, cfg: Any, seed: int) -> Tuple[Any, Any, Any]:
        if is_2d(cfg):
            needs = Needs(cfg)
            return (*detection_batches(needs, seed), needs)
        scene = Scene(cfg)
        return (*samples.make_batches(scene, seed), scene)

    def check_result(self, output: Any, expect: Any, data: Any) -> None:
        """mmdet's form for 2D models; else one dict per sample: 3D boxes with scores and
        labels (maybe under ``pts_bbox`` or ``img_bbox``), or a point ``semantic_mask``."""
        if isinstance(expect, Needs):
            check_detection(output, expect, data)
            return
        if not isinstance(output, list) or len(output) != 1:
            raise StageError(f"expected a list of 1 result (one sample), got {form(output)}")
        entry = output[0]
        if isinstance(entry, list):  # ImVoteNet's image branch alone: mmdet's per-class boxes
            check_detection(output, _flat_needs(expect), data)
            return
        if not isinstance(entry, dict):
            raise StageError(f"expected a dict result, got {form(entry)}")
        for key in ("pts_bbox", "img_bbox"):
            if key in entry:
                entry = entry[key]
                break
        if "semantic_mask" in entry:
            _check_mask(entry["semantic_mask"], expect, data)
        else:
            _check_boxes(entry, expect)


def _flat_needs(scene: Scene) -> Any:
    """What mmdet's check needs of a model that answers 2D boxes: the class count."""

    class Flat:
        things = scene.classes
        rotated = False

    return Flat()


def _check_boxes(entry: dict, scene: Scene) -> None:
    from mmdet3d.core.bbox import BaseInstance3DBoxes

    missing = {"boxes_3d", "scores_3d", "labels_3d"} - set(entry)
    if missing:
        raise StageError(f"a result without {sorted(missing)}: keys {sorted(entry)}")
    found, scores, labels = entry["boxes_3d"], entry["scores_3d"], entry["labels_3d"]
    if not isinstance(found, BaseInstance3DBoxes) or found.tensor.shape[-1] < 7:
        raise StageError(f"boxes_3d is not 3D boxes of 7 or more values: {form(found)}")
    count = len(found)
    if tuple(scores.shape) != (count,) or tuple(labels.shape) != (count,):
        raise StageError(f"{count} boxes, scores {form(scores)}, labels {form(labels)}")
    if count and (int(labels.min()) < 0 or int(labels.max()) >= scene.classes):
        raise StageError(f"labels outside 0..{scene.classes - 1}")


def _check_mask(mask: Any, scene: Scene, data: Any) -> None:
    points = data["points"][0].data[0][0] if scene.test_augs else data["points"].data[0][0]
    if tuple(mask.shape) != (len(points),):
        raise StageError(f"expected a label per point ({len(points)}), got {form(mask)}")
    if int(mask.min()) < 0 or int(mask.max()) >= scene.classes:
        raise StageError(f"labels outside 0..{scene.classes - 1}")
