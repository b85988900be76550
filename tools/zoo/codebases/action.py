"""mmaction2 0.x: recognizers of frames (2D), clips (3D), spectrograms and skeletons.

Each sample is what the config's pipeline ends in (``FormatShape``, then
``Collect`` of ``imgs``/``audios``/``keypoint`` and ``label``: tensors, no
DataContainers, no metas): the
frame and clip counts are the config's (``SampleFrames``), the frames small.
mmaction2 0.24 asks for mmcv <= 1.7.0 (see ``--pythonpath``).
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from mmpar_zoo.codebase import Codebase, StageError, form, wrap
from mmpar_zoo.config import dicts

#: Side of the frames (the configs crop 224).
SIDE = 64
#: Backbones made for one frame size: C3D's fully connected layers -> (side, clip length);
#: TimeSformer's position table is built for :data:`SIDE` instead (``prepare_config``).
FIXED_FRAMES = {"C3D": (112, 16)}
FIXED_SIZE = ("TimeSformer",)
#: Test clips of a 3D recognizer, at most (the configs test 10 or 30 views).
TEST_CLIPS = 2
#: Frames of a skeleton sequence, and the joints of each graph layout.
SKELETON_FRAMES = 32
JOINTS = {"coco": 17, "openpose": 18, "ntu-rgb+d": 25, "ntu_edge": 24}
#: What each recognizer takes: the input key.
INPUTS = {
    "Recognizer2D": "imgs",
    "Recognizer3D": "imgs",
    "AudioRecognizer": "audios",
    "SkeletonGCN": "keypoint",
}


def _transforms(cfg: Any, split: str) -> Dict[str, dict]:
    """Type -> the last transform of that type in a split's pipeline (wrappers included)."""
    data = cfg.get("data") or {}
    return {t["type"]: t for t in dicts(data.get(split)) if isinstance(t.get("type"), str)}


def _sampler(transforms: Dict[str, dict]) -> dict:
    """The frame sampler of a pipeline (``SampleFrames``, ``DenseSampleFrames``, ...)."""
    return next((t for k, t in transforms.items() if k.endswith("SampleFrames")), {})


def _clips(cfg: Any, split: str) -> Tuple[int, int, str, int]:
    """(clips, clip length, input format, persons) of a split's pipeline.

    A config without a train pipeline (X3D's: converted weights, test only) trains on
    its test pipeline's clips; a 3D recognizer on one at a time, as every 3D train
    pipeline samples.
    """
    found, test = _transforms(cfg, split), _transforms(cfg, "test")
    sample = _sampler(found)
    if not found:
        sample = _sampler(test)
        if cfg.model.get("type") == "Recognizer3D":
            sample = dict(sample, num_clips=1)
    shape = found.get("FormatShape") or test.get("FormatShape") or {}
    persons = found.get("FormatGCNInput") or test.get("FormatGCNInput") or {}
    return (
        int(sample.get("num_clips", 1)),
        int(sample.get("clip_len", 1)),
        str(shape.get("input_format", "NCHW")),
        int(persons.get("num_person", 2)),
    )


class MMAction2(Codebase):
    """mmaction2 0.x (``build_model``): Recognizer2D/3D, AudioRecognizer, SkeletonGCN."""

    name = "mmaction2"
    package = "mmaction"
    distribution = "mmaction2"
    install = "pip install 'mmaction2<1'"
    modules = ("mmaction.models",)
    optional = ("mmcls", "timm")
    init_weights = False  # as mmaction2's tools/train.py: its recognizers initialize themselves

    def prepare_config(self, cfg: Any, config_rois: bool) -> None:
        """Backbones made for one frame size (:data:`FIXED_SIZE`) are made for :data:`SIDE`."""
        backbone = cfg.model.get("backbone") or {}
        if backbone.get("type") in FIXED_SIZE:
            backbone["img_size"] = SIDE

    def builder(self, cfg: Any) -> Any:
        from mmaction.models import build_model

        return build_model(cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg"))

    def make_batches(self, cfg: Any, seed: int) -> Tuple[Any, Any, Any]:
        """Two samples with labels, one test sample; the class count.

        Raises:
            ValueError: The model is no recognizer (localizers, AVA's detectors).
        """
        import numpy as np
        import torch

        from mmpar import collate

        kind = cfg.model.get("type")
        if kind not in INPUTS:
            raise ValueError(f"the tool makes no batch for {kind} models (only recognizers)")
        rng = np.random.default_rng(seed)
        head = cfg.model.get("cls_head") or {}
        count = int(head.get("num_classes", 1))
        key = INPUTS[kind]
        samples = []
        for _ in range(2):
            sample = {key: self._input(cfg, rng, "train")}
            if head.get("multi_class"):  # multi-hot labels (HVU)
                label = (rng.random(count) < 0.2).astype(np.float32)
                label[rng.integers(count)] = 1
            else:
                label = rng.integers(0, count, 1)
            sample["label"] = torch.from_numpy(label)
            samples.append(sample)
        train = collate(samples, samples_per_gpu=len(samples))
        test = collate([{key: self._input(cfg, rng, "test")}], samples_per_gpu=1)
        return train, test, count

    def _input(self, cfg: Any, rng: Any, split: str) -> Any:
        """One sample's input tensor, as the split's pipeline formats it."""
        import numpy as np
        import torch

        kind = cfg.model["type"]
        backbone = cfg.model.get("backbone") or {}
        channels = int(backbone.get("in_channels", 3))
        clips, length, fmt, persons = _clips(cfg, split)
        if kind == "SkeletonGCN":
            layout = str((backbone.get("graph_cfg") or {}).get("layout", "coco"))
            shape: Tuple[int, ...] = (3, SKELETON_FRAMES, JOINTS.get(layout, 17), persons)
        elif kind == "AudioRecognizer":
            shape = (clips, 1, 128, 80)  # 128 frames of 80 mel bins, as the configs cut them
        else:
            side, length = FIXED_FRAMES.get(str(backbone.get("type")), (SIDE, length))
            if kind == "Recognizer3D":
                clips = clips if split == "train" else min(clips, TEST_CLIPS)
                shape = (clips, channels, length, side, side)
            elif fmt == "NCHW_Flow":  # each clip's flow frames stacked as channels
                shape = (clips, channels, side, side)
            else:
                shape = (clips * length, channels, side, side)
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))

    def test_step(self, model: Any, data: Any) -> Any:
        """The class scores of the test batch (``return_loss=False``: mmaction2 takes no
        ``rescale``)."""
        import torch

        model.eval()
        with torch.no_grad():
            return wrap(model)(return_loss=False, **data)

    def check_result(self, output: Any, expect: Any, data: Any) -> None:
        """One row of ``num_classes`` finite scores (one sample)."""
        import numpy as np

        if not isinstance(output, np.ndarray) or output.shape != (1, expect):
            raise StageError(f"expected scores of shape (1, {expect}), got {form(output)}")
        if not np.isfinite(output).all():
            raise StageError("the scores are not finite")
