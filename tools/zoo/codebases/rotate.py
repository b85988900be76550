"""mmrotate 0.x: detectors of rotated boxes (cx, cy, w, h, angle), mmdet's parts otherwise.

The training images have one size, as DOTA's are cut into patches of one size
(mmrotate's RepPoints heads count the padding of a smaller image as positives), and
are larger where an assigner takes the ``topk`` nearest priors of every level.
"""

from __future__ import annotations

import math
from typing import Any, Tuple

from mmpar_zoo.batch import make_batches
from mmpar_zoo.codebases.det import MMDet
from mmpar_zoo.config import dicts
from mmpar_zoo.needs import SHAPES, Needs


def topk_side(model: Any) -> int:
    """The image side at which the coarsest level has ``topk`` priors for every assigner
    that takes the ``topk`` nearest of each level (0 where none does).

    mmrotate's ATSS and SAS assigners take ``topk`` priors of each level without
    looking at how many it has.
    """
    topk = max(
        (int(n["topk"]) for n in dicts(model) if "Assigner" in str(n.get("type")) and "topk" in n),
        default=0,
    )
    if not topk:
        return 0
    strides = [
        s
        for n in dicts(model)
        for key in ("strides", "point_strides")
        for s in (n.get(key) or [])
        if isinstance(s, int)
    ]
    return max(strides, default=128) * math.ceil(math.sqrt(topk))


class MMRotate(MMDet):
    """mmrotate 0.x (its ``build_detector``): per-class ``(k, 6)`` results, boxes and score."""

    name = "mmrotate"
    package = "mmrotate"
    distribution = "mmrotate"
    install = "pip install 'mmrotate<1'"
    modules = ("mmrotate.models", "mmdet.models", "mmdet.core")
    optional = ("e2cnn",)

    def builder(self, cfg: Any) -> Any:
        from mmrotate.models import build_detector

        return build_detector(
            cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg")
        )

    def make_batches(self, cfg: Any, seed: int) -> Tuple[Any, Any, Any]:
        needs = Needs(cfg)
        needs.rotated = True
        needs.same_shape = needs.same_pad = True
        side = topk_side(cfg.model)
        if side > min(SHAPES[0]):
            needs.fixed_size = max(needs.fixed_size or 0, side)
        return (*make_batches(needs, seed), needs)
