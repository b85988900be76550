"""What the zoo runs on for each OpenMMLab codebase, and the steps every codebase shares.

A :class:`Codebase` says where the codebase's configs are, what to import once in
the parent process, which packages some configs need that installing the codebase
does not install, how to build a model, the small batches its model takes, how a
training step and a test batch run, and what the test result must look like. The
subclasses (one module each, under ``codebases/``) change only what differs;
:func:`get_codebase` finds one by its ``--codebase`` name without importing the others.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Dict, Tuple

from mmpar_zoo.config import load_config, strip_pretrained

#: ``--codebase`` name -> the module under ``codebases/`` and its class.
CODEBASES: Dict[str, Tuple[str, str]] = {
    "mmdet": ("det", "MMDet"),
    "mmseg": ("seg", "MMSeg"),
    "mmrotate": ("rotate", "MMRotate"),
    "mmocr": ("ocr", "MMOCR"),
    "mmedit": ("edit", "MMEdit"),
    "mmaction2": ("action", "MMAction2"),
    "mmpose": ("build_only", "MMPose"),
    "mmcls": ("build_only", "MMCls"),
    "mmtrack": ("build_only", "MMTrack"),
    "mmdet3d": ("det3d", "MMDet3D"),
}


class StageError(Exception):
    """A check of a stage that did not hold (the message says which)."""


class Codebase:
    """One codebase's parts of the zoo: the defaults suit mmdet-like codebases.

    Attributes:
        name: The ``--codebase`` name (``mmaction2``).
        package: The import name (``mmaction``).
        distribution: The pip name, for messages (``mmaction2``).
        install: How to install it, for the message where it is missing.
        modules: Imported once in the parent, so that forked children share them.
        optional: Packages some configs need that installing the codebase does not
            install: such configs are skipped and not counted.
        build_only: Whether a config only builds (no batches, no steps).
        init_weights: Whether the codebase's train script calls ``init_weights`` after
            building (mmpose's models initialize themselves, and some have no such method).
        loss_networks: Types whose ``pretrained`` names a loss's fixed network, which they
            load whatever the config says (mmedit's PerceptualLoss): it stays, and every
            checkpoint load answers an empty state dict (the network keeps random
            weights; a strict load fails), where other codebases refuse any load.
    """

    name = ""
    package = ""
    distribution = ""
    install = ""
    modules: Tuple[str, ...] = ()
    optional: Tuple[str, ...] = ()
    build_only = False
    init_weights = True
    loss_networks: Tuple[str, ...] = ()

    def load_config(self, path: Path) -> Any:
        """The config, custom imports not yet made."""
        return load_config(path)

    def build_model(self, cfg: Any, configs_root: Path, config_rois: bool) -> Any:
        """The config's model without pretrained weights, its weights initialized.

        Args:
            cfg: The config, changed in place (pretrained weights and
                ``load_from``/``resume_from`` dropped, and what :meth:`prepare_config`
                changes).
            configs_root: The folder of model directories (for teachers' configs).
            config_rois: Keep the config's numbers of RoIs, proposals and detections.
        """
        self.prepare_config(cfg, config_rois)
        strip_pretrained(cfg.model, configs_root, keep=self.loss_networks)
        cfg.load_from = None
        cfg.resume_from = None
        model = self.builder(cfg)
        if self.init_weights:
            model.init_weights()
        return model

    def prepare_config(self, cfg: Any, config_rois: bool) -> None:
        """Change the config, in place, before the model is built (default: nothing)."""

    def builder(self, cfg: Any) -> Any:
        """The codebase's own builder called on ``cfg.model``."""
        raise NotImplementedError

    def make_batches(self, cfg: Any, seed: int) -> Tuple[Any, Any, Any]:
        """(train batch, test batch, what :meth:`check_result` needs), collated by mmpar."""
        raise NotImplementedError

    def train_step(self, model: Any, data: Any, cfg: Any) -> None:
        """One training step through ``mmpar.MMDataParallel``: forward, losses, backward.

        Raises:
            StageError: The loss is not finite, or no parameter got a non-zero gradient.
        """
        model.train()
        outputs = wrap(model).train_step(data, optimizer=None)
        backward(model, outputs)

    def test_step(self, model: Any, data: Any) -> Any:
        """The model's output for the test batch (``return_loss=False, rescale=True``)."""
        import torch

        model.eval()
        with torch.no_grad():
            return wrap(model)(return_loss=False, rescale=True, **data)

    def check_result(self, output: Any, expect: Any, data: Any) -> None:
        """Check the test output has the codebase's form.

        Raises:
            StageError: naming what differs.
        """
        raise NotImplementedError


def get_codebase(name: str) -> Codebase:
    """The codebase of a ``--codebase`` name (one of :data:`CODEBASES`)."""
    module, cls = CODEBASES[name]
    return getattr(importlib.import_module(f"mmpar_zoo.codebases.{module}"), cls)()


def wrap(model: Any) -> Any:
    """``model`` in ``mmpar.MMDataParallel`` on the CPU."""
    from mmpar import MMDataParallel

    return MMDataParallel(model, device_ids=["cpu"])


def backward(model: Any, outputs: Dict[str, Any]) -> None:
    """Backward from a train step's ``loss``, checked: finite, some gradient non-zero.

    Raises:
        StageError: The loss is not finite, or no parameter got a non-zero gradient.
    """
    import torch

    loss = outputs["loss"]
    if not isinstance(loss, torch.Tensor) or not bool(torch.isfinite(loss).all()):
        raise StageError(f"the loss is not finite: {outputs.get('log_vars')}")
    loss.backward()
    check_gradients(model)


def check_gradients(model: Any) -> None:
    """Raise :class:`StageError` when no parameter of ``model`` has a non-zero gradient."""
    if not any(p.grad is not None and bool(p.grad.any()) for p in model.parameters()):
        raise StageError("no parameter got a non-zero gradient")


def form(value: Any) -> str:
    """A short description of a value's form, for a check's message."""
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    if hasattr(value, "shape"):
        return f"{type(value).__name__} of shape {tuple(value.shape)}"
    return type(value).__name__
