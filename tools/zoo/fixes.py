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


#: Fix name -> (the codebases it applies to, what applies it).
FIXES: Dict[str, Any] = {
    "prior-device": (("mmdet", "mmrotate", "mmocr"), _prior_device),
}


def apply_fixes(codebase: str) -> List[str]:
    """Apply the fixes of ``codebase``; the names of the fixes applied."""
    applied = []
    for name, (codebases, apply) in FIXES.items():
        if codebase in codebases:
            apply()
            applied.append(name)
    return applied
