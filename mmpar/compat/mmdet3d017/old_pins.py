"""The mmdet and mmseg releases that mmdet3d 0.17's users pin (mmdet 2.14.0, mmseg 0.14.1),
mended where today's torch stops them (not an mmdet or mmseg module).

Their feature pyramids add the upsampled coarser level into each lateral in place
(``laterals[i - 1] += F.interpolate(...)``): mmdet's ``FPN`` and ``PAFPN``, mmseg's
``FPN`` and ``UPerHead``. Where the lateral convolutions end in an activation (the
nuScenes and Lyft PointPillars configs' FPN has ``act_cfg=dict(type='ReLU')``; UPerHead's
always does), the lateral is a ReLU's output, which autograd keeps for the ReLU's
gradient, and the backward pass fails ("modified by an inplace operation"); later
releases write ``laterals[i - 1] = laterals[i - 1] + ...``. For a class whose ``forward``
still adds in place, each lateral convolution of an instance hands its output on as a
copy (a forward hook), so the sum is made in the copy: the same values and gradients.
A class that no longer adds in place (mmdet >= 2.18, mmseg >= 0.17) is left alone.

mmdet 2.14's ``FusedSemanticHead`` (HTC's semantic branch, mmdet3d 0.17's nuImages
HTC configs) adds each level into its fusion level's lateral, a ReLU's output, the
same way (``x += self.lateral_convs[i](feat)``), and is mended the same way.
"""

from __future__ import annotations

import functools
import inspect
from types import ModuleType
from typing import Any, Dict, Tuple

from mmpar.compat.import_hook import on_import

__all__ = ["IN_PLACE_PYRAMIDS", "adds_in_place", "mend_old_pins"]

#: module -> the classes whose ``forward`` may add into the laterals in place.
IN_PLACE_PYRAMIDS: Dict[str, Tuple[str, ...]] = {
    "mmdet.models.necks.fpn": ("FPN",),
    "mmdet.models.necks.pafpn": ("PAFPN",),
    "mmseg.models.necks.fpn": ("FPN",),
    "mmseg.models.decode_heads.uper_head": ("UPerHead",),
    "mmdet.models.roi_heads.mask_heads.fused_semantic_head": ("FusedSemanticHead",),
}
#: The in-place sums into a lateral's output, as the classes' sources write them.
_MARKS = ("laterals[i - 1] +=", "x += self.lateral_convs[i]")


def adds_in_place(cls: type) -> bool:
    """Whether ``cls.forward``'s source adds into a lateral's output in place."""
    try:
        source = inspect.getsource(inspect.unwrap(cls.forward))
    except (OSError, TypeError):
        return False
    return any(mark in source for mark in _MARKS)


def _copy_output(module: Any, inputs: Any, output: Any) -> Any:
    return output.clone()


def _mend_class(cls: type) -> None:
    forward = cls.forward
    if getattr(forward, "__mmpar_mended__", False) or not adds_in_place(cls):
        return

    @functools.wraps(forward)
    def mended(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "__mmpar_copies__", False):
            for conv in self.lateral_convs:
                conv.register_forward_hook(_copy_output)
            self.__mmpar_copies__ = True
        return forward(self, *args, **kwargs)

    mended.__mmpar_mended__ = True  # type: ignore[attr-defined]
    cls.forward = mended


def _mend_module(module: ModuleType) -> None:
    for name in IN_PLACE_PYRAMIDS[module.__name__]:
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            _mend_class(cls)


def mend_old_pins() -> None:
    """Mend the in-place pyramids when (or if already) their modules are imported."""
    for name in IN_PLACE_PYRAMIDS:
        on_import(name, _mend_module)
