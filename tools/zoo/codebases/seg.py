"""mmseg 0.x: segmentors trained on semantic maps, tested to one label map per image."""

from __future__ import annotations

from typing import Any, Tuple

from mmpar_zoo.codebase import Codebase, StageError, form
from mmpar_zoo.config import dicts
from mmpar_zoo.images import image, image_meta

#: (height, width) of the training crop (both images; the second's content is smaller
#: and padded with the ignored label, as mmseg's Pad leaves a small image), and of the
#: test image. Divisible by 32, as UNet and the ViT heads want.
CROP = (64, 96)
CONTENT = (48, 80)
#: Backbones made for one input size (relative position tables): built for :data:`CROP`.
FIXED_SIZE = ("BEiT", "MAE")
#: Heads that need larger inputs -> (crop, content): LRASPP pools 49x49 features at 1/8.
LARGER = {"LRASPPHead": ((416, 416), (400, 384))}
#: The label mmseg's pipelines pad the maps with, and its losses ignore.
IGNORE = 255


def classes(model: Any) -> int:
    """The number of classes of the decode head (the first, where there are several)."""
    for node in dicts(model.get("decode_head")):
        if isinstance(node.get("num_classes"), int):
            return int(node["num_classes"])
    raise ValueError("the model config has no decode_head with num_classes")


class MMSeg(Codebase):
    """mmseg 0.x (``build_segmentor``)."""

    name = "mmseg"
    package = "mmseg"
    distribution = "mmsegmentation"
    install = "pip install 'mmsegmentation<1'"
    modules = ("mmseg.models",)
    optional = ("mmcls", "timm")

    def prepare_config(self, cfg: Any, config_rois: bool) -> None:
        """Backbones made for one input size (:data:`FIXED_SIZE`) are made for :data:`CROP`."""
        backbone = cfg.model.get("backbone") or {}
        if backbone.get("type") in FIXED_SIZE:
            backbone["img_size"] = CROP

    def builder(self, cfg: Any) -> Any:
        from mmseg.models import build_segmentor

        return build_segmentor(
            cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg")
        )

    def make_batches(self, cfg: Any, seed: int) -> Tuple[Any, Any, Any]:
        """Two crops with maps (the second partly padding), one test image; the class count."""
        import numpy as np
        import torch

        from mmpar import DataContainer as DC
        from mmpar import collate

        rng = np.random.default_rng(seed)
        count = classes(cfg.model)
        types = {node.get("type") for node in dicts(cfg.model)}
        crop, content = next((LARGER[t] for t in LARGER if t in types), (CROP, CONTENT))
        samples = []
        for index, shape in enumerate((crop, content)):
            seg = np.full(crop, IGNORE, dtype=np.int64)
            seg[: shape[0], : shape[1]] = rng.integers(0, count, shape)
            samples.append(
                dict(
                    img=DC(image(rng, shape, crop), stack=True),
                    gt_semantic_seg=DC(torch.from_numpy(seg[None]), stack=True),
                    img_metas=DC(image_meta(index, shape, crop, 1.0), cpu_only=True),
                )
            )
        train = collate(samples, samples_per_gpu=len(samples))
        test_sample = dict(
            img=[image(rng, crop, crop)],
            img_metas=[DC(image_meta(0, crop, crop, 0.8), cpu_only=True)],
        )
        return train, collate([test_sample], samples_per_gpu=1), count

    def check_result(self, output: Any, expect: Any, data: Any) -> None:
        """One integer label map of ``ori_shape`` per image, labels below the class count."""
        if not isinstance(output, list) or len(output) != 1:
            raise StageError(f"expected a list of 1 label map (one image), got {form(output)}")
        ori = tuple(data["img_metas"][0].data[0][0]["ori_shape"][:2])
        labels = output[0]
        if not hasattr(labels, "shape") or tuple(labels.shape) != ori:
            raise StageError(f"expected a label map of shape {ori}, got {form(labels)}")
        import numpy as np

        if not np.issubdtype(labels.dtype, np.integer):
            raise StageError(f"expected integer labels, got {labels.dtype}")
        low, high, limit = int(labels.min()), int(labels.max()), max(expect, 2)
        if low < 0 or high >= limit:
            raise StageError(f"labels {low}..{high} outside 0..{limit - 1}")
