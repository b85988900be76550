"""The codebases whose models the zoo only builds: mmpose, mmcls, mmtrack."""

from __future__ import annotations

from typing import Any

from mmpar_zoo.codebase import Codebase


class MMPose(Codebase):
    """mmpose 0.x (``build_posenet``); it asks for mmcv <= 1.7.0 (see ``--pythonpath``)."""

    name = "mmpose"
    package = "mmpose"
    distribution = "mmpose"
    install = "pip install 'mmpose<1'"
    modules = ("mmpose.models",)
    optional = ("smplx",)
    build_only = True
    init_weights = False  # as mmpose's tools/train.py: its models initialize themselves

    def builder(self, cfg: Any) -> Any:
        from mmpose.models import build_posenet

        return build_posenet(cfg.model)


class MMCls(Codebase):
    """mmcls 0.x (``build_classifier``)."""

    name = "mmcls"
    package = "mmcls"
    distribution = "mmcls"
    install = "pip install 'mmcls<1'"
    modules = ("mmcls.models",)
    optional = ("timm",)
    build_only = True

    def builder(self, cfg: Any) -> Any:
        from mmcls.models import build_classifier

        return build_classifier(cfg.model)


class MMTrack(Codebase):
    """mmtrack 0.x, as its ``tools/train.py`` builds: mmdet's detectors for ``USE_MMDET``
    configs, a re-identification net for ``TRAIN_REID`` ones, else ``build_model``."""

    name = "mmtrack"
    package = "mmtrack"
    distribution = "mmtrack"
    install = "pip install 'mmtrack<1'"
    modules = ("mmtrack.models",)
    build_only = True

    def builder(self, cfg: Any) -> Any:
        if cfg.get("USE_MMDET", False):
            from mmdet.models import build_detector as build

            model = cfg.model.get("detector", cfg.model)
        elif cfg.get("TRAIN_REID", False):
            from mmtrack.models import build_reid as build

            model = cfg.model.get("reid", cfg.model)
        else:
            from mmtrack.models import build_model as build

            model = cfg.model
        if cfg.get("train_cfg"):
            return build(model, train_cfg=cfg.train_cfg, test_cfg=cfg.get("test_cfg"))
        return build(model)
