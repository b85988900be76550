"""mmdet 2.x: detectors trained on boxes, labels, masks, proposals or semantic maps."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Tuple

from mmpar_zoo.batch import make_batches
from mmpar_zoo.checks import check_result
from mmpar_zoo.codebase import Codebase
from mmpar_zoo.config import limit_rois, load_config
from mmpar_zoo.needs import Needs


def mmdet_compat(cfg: Any) -> Any:
    """The config with mmdet's own compatibility passes (``replace_cfg_vals``, ``compat_cfg``)."""
    try:
        from mmdet.utils import compat_cfg, replace_cfg_vals
    except ImportError:  # older mmdet 2.x
        return cfg
    cfg = replace_cfg_vals(cfg)
    if "data" in cfg:  # compat_cfg reads it
        cfg = compat_cfg(cfg)
    return cfg


class MMDet(Codebase):
    """mmdet 2.x (``build_detector``); R-CNN heads on fewer RoIs unless ``--config-rois``."""

    name = "mmdet"
    package = "mmdet"
    distribution = "mmdet"
    install = "pip install 'mmdet<3'"
    modules = ("mmdet.models", "mmdet.core", "mmdet.utils")
    optional = ("mmcls", "timm", "sklearn")

    def load_config(self, path: Path) -> Any:
        return mmdet_compat(load_config(path))

    def prepare_config(self, cfg: Any, config_rois: bool) -> None:
        if not config_rois:
            limit_rois(cfg)

    def builder(self, cfg: Any) -> Any:
        from mmdet.models import build_detector

        return build_detector(
            cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg")
        )

    def make_batches(self, cfg: Any, seed: int) -> Tuple[Any, Any, Any]:
        needs = Needs(cfg)
        return (*make_batches(needs, seed), needs)

    def check_result(self, output: Any, expect: Any, data: Any) -> None:
        check_result(output, expect, data)
