"""Mends of the codebases' own bugs that stop a run on a machine without a GPU.

Applied in the parent process after the codebase's modules are imported (forked
children inherit them), unless ``--no-fixes``; each says what it mends and why, and
the docs count what each one lets pass. None of them touches mmpar or mmcv.ops.

* ``prior-device``: mmdet's prior generators (``AnchorGenerator``,
  ``MlvlPointGenerator``) default to ``device='cuda'``, and some heads call them
  without a device (mmdet's ``RepPointsHead.get_points``, mmrotate's RepPoints
  heads' ``valid_flags``) or with the device where the dtype goes (mmrotate 0.3.4's
  ``grid_priors(featmap_sizes, device)``, written against mmdet's older order of
  arguments). Where no GPU is visible, a ``'cuda'`` device there means the CPU,
  and a device given as the dtype is taken as the device. (``patch_mmcv()`` mends
  the last for mmrotate's ``RotatedAnchorGenerator`` itself, see
  ``mmpar.compat.cpu_dist``; the ``'cuda'`` defaults stay to the tool.)
* ``prior-device-3d``: the same ``'cuda'`` defaults in mmdet3d's 3D anchor generators
  (``Anchor3DRangeGenerator``, ``AlignedAnchor3DRangeGenerator``) and
  ``Anchor3DHead.get_anchors``, which ``FreeAnchor3DHead.loss`` calls without a device.
* ``focal-background``: mmdet's ``FocalLoss`` (sigmoid) takes class labels from 0 to
  ``num_classes``, the last for background. On CUDA it calls mmcv's kernel, which
  counts any label outside ``0..num_classes - 1`` as background; on the CPU it
  one-hot encodes the labels in torch, which refuses a negative one. mmdet3d's
  ImVoxelNet head labels its background -1: on the CPU, a label below 0 is taken as
  ``num_classes`` (background), as the kernel takes it.
* ``rpn-old-keys``: mmdet3d 0.17's nuImages configs give their RPNs the keys of mmdet
  before 2.12 (``nms_thr``, ``max_num``), which the ``RPNHead`` of mmdet 2.14 (the one
  mmdet3d 0.17 asks for) no longer reads: it fails on ``cfg.nms``. An RPN config
  without ``nms`` gets ``nms=dict(type='nms', iou_threshold=nms_thr)`` and
  ``max_per_img=max_num``, the translation mmdet 2.14's own ``GARPNHead`` makes.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, List

#: The methods of mmdet's prior generators that take ``dtype`` and ``device``.
PRIOR_METHODS = ("grid_priors", "valid_flags", "grid_anchors", "sparse_priors")


def _on_this_machine(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` with its ``device`` (and a device given as ``dtype``) mended."""
    import torch

    signature = inspect.signature(method)

    @functools.wraps(method)
    def mended(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments
        dtype = given.get("dtype")
        if dtype is not None and not isinstance(dtype, torch.dtype):
            given["device"] = dtype
            del given["dtype"]
        if "device" in signature.parameters and not torch.cuda.is_available():
            device = given.get("device", signature.parameters["device"].default)
            if str(device).startswith("cuda"):
                given["device"] = "cpu"
        return method(*bound.args, **bound.kwargs)

    mended.__mmpar_zoo_fix__ = True  # type: ignore[attr-defined]
    return mended


def _prior_device() -> List[str]:
    from mmdet.core.anchor import AnchorGenerator, MlvlPointGenerator

    mended = []
    for cls in (AnchorGenerator, MlvlPointGenerator):
        for name in PRIOR_METHODS:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "__mmpar_zoo_fix__", False):
                setattr(cls, name, _on_this_machine(method))
                mended.append(f"{cls.__name__}.{name}")
    return mended


def _prior_device_3d() -> List[str]:
    from mmdet3d.core.anchor import AlignedAnchor3DRangeGenerator, Anchor3DRangeGenerator
    from mmdet3d.models.dense_heads import Anchor3DHead

    mended = []
    methods = ("grid_anchors", "single_level_grid_anchors", "anchors_single_range")
    for cls, names in (
        (Anchor3DRangeGenerator, methods),
        (AlignedAnchor3DRangeGenerator, methods),
        (Anchor3DHead, ("get_anchors",)),
    ):
        for name in names:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "__mmpar_zoo_fix__", False):
                setattr(cls, name, _on_this_machine(method))
                mended.append(f"{cls.__name__}.{name}")
    return mended


def _background_label(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``FocalLoss.forward`` with the labels below 0 of a CPU prediction made background."""

    @functools.wraps(forward)
    def mended(self: Any, pred: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        if not pred.is_cuda and target.dim() == 1 and pred.dim() == 2 and len(target):
            target = target.masked_fill(target < 0, pred.size(1))
        return forward(self, pred, target, *args, **kwargs)

    mended.__mmpar_zoo_fix__ = True  # type: ignore[attr-defined]
    return mended


def _focal_background() -> List[str]:
    from mmdet.models.losses import FocalLoss

    if not getattr(FocalLoss.forward, "__mmpar_zoo_fix__", False):
        FocalLoss.forward = _background_label(FocalLoss.forward)
    return ["FocalLoss.forward"]


def _new_rpn_keys(cfg: Any) -> Any:
    """A copy of an RPN config in the old keys with ``nms`` and ``max_per_img``; else ``cfg``."""
    import copy

    if not isinstance(cfg, dict) or "nms" in cfg or "nms_thr" not in cfg:
        return cfg
    cfg = copy.deepcopy(cfg)
    cfg["nms"] = type(cfg)(type="nms", iou_threshold=cfg.pop("nms_thr"))
    if "max_num" in cfg:
        cfg.setdefault("max_per_img", cfg.pop("max_num"))
    return cfg


def _read_old_keys(method: Callable[..., Any]) -> Callable[..., Any]:
    """``RPNHead._get_bboxes_single`` with its ``cfg`` (or its ``test_cfg``) in the new keys."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def mended(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        cfg = bound.arguments.get("cfg")
        bound.arguments["cfg"] = _new_rpn_keys(self.test_cfg if cfg is None else cfg)
        return method(*bound.args, **bound.kwargs)

    mended.__mmpar_zoo_fix__ = True  # type: ignore[attr-defined]
    return mended


def _rpn_old_keys() -> List[str]:
    from mmdet.models.dense_heads import RPNHead

    method = RPNHead.__dict__.get("_get_bboxes_single")
    if method is None or "cfg" not in inspect.signature(method).parameters:
        return []
    if not getattr(method, "__mmpar_zoo_fix__", False):
        RPNHead._get_bboxes_single = _read_old_keys(method)
    return ["RPNHead._get_bboxes_single"]


#: Fix name -> (the codebases it applies to, what applies it).
FIXES: Dict[str, Any] = {
    "prior-device": (("mmdet", "mmrotate", "mmocr", "mmdet3d"), _prior_device),
    "prior-device-3d": (("mmdet3d",), _prior_device_3d),
    "focal-background": (("mmdet3d",), _focal_background),
    "rpn-old-keys": (("mmdet3d",), _rpn_old_keys),
}


def apply_fixes(codebase: str) -> List[str]:
    """Apply the fixes of ``codebase``; the names of the fixes applied."""
    applied = []
    for name, (codebases, apply) in FIXES.items():
        if codebase in codebases:
            apply()
            applied.append(name)
    return applied
