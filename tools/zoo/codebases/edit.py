"""mmedit 0.x: image and video restorers (GLEAN's StyleGAN2 among them), image-to-image
translation, and frame interpolation.

mmedit's models step their optimizers in ``train_step`` (GANs alternate generator
and discriminator): the training step builds the config's ``optimizers`` and
passes them, and checks the logged losses. Samples are what mmedit's ``Collect``
emits: tensors under the config's keys and ``meta`` (a DataContainer). The test
result is a dict: ``eval_result`` (the config's metrics against ``gt``) or the
output images.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from mmpar_zoo.codebase import Codebase, StageError, check_gradients, form, wrap
from mmpar_zoo.config import dicts

#: Model type -> the kind of batch it takes.
KINDS = {
    **dict.fromkeys(("BasicRestorer", "SRGAN", "ESRGAN", "GLEAN", "RealESRGAN", "TTSR"), "image"),
    **dict.fromkeys(("BasicVSR", "RealBasicVSR", "EDVR", "TDAN"), "video"),
    **dict.fromkeys(("Pix2Pix", "CycleGAN"), "translation"),
    **dict.fromkeys(("BasicInterpolator", "CAIN", "FLAVR"), "interpolation"),
}
#: Video restorers whose ``gt`` is the centre frame only.
CENTRE_FRAME = ("EDVR", "TDAN")
#: Side of a low-quality input (image, video frame: BasicVSR's flow wants 64); of a
#: translated image; frames of a video restorer, at most (a model made for a number of
#: frames keeps it).
LQ_SIDE = {"image": 16, "video": 64}
TRANSLATION_SIDE = 64
FRAMES = 4
#: Generators that take their input at the output's size (upsampled beforehand).
SAME_SIZE = ("TOFlow",)
#: The output side GLEAN is built for here (its configs: 256 and 1024), its ratio kept:
#: the same StyleGAN2 blocks, fewer of them.
GLEAN_OUT = 64


def _collect(cfg: Any, split: str) -> dict:
    found = [t for t in dicts((cfg.get("data") or {}).get(split)) if t.get("type") == "Collect"]
    return found[0] if found else dict(keys=["lq", "gt"], meta_keys=[])


def _scale(cfg: Any) -> int:
    """The upscaling factor: GLEAN's sizes, else the datasets' ``scale``."""
    generator = cfg.model.get("generator") or {}
    if generator.get("in_size") and generator.get("out_size"):
        return int(generator["out_size"]) // int(generator["in_size"])
    for node in dicts(cfg.get("data")):
        if isinstance(node.get("scale"), int) and "Dataset" in str(node.get("type")):
            return int(node["scale"])
    return 4


def _sizes(cfg: Any, what: str) -> Tuple[int, int]:
    """(low-quality side, ground-truth side) of a restorer's samples."""
    generator = cfg.model.get("generator") or {}
    discriminator = cfg.model.get("discriminator") or {}
    scale = _scale(cfg)
    if generator.get("in_size") and generator.get("out_size"):  # GLEAN's StyleGAN2
        return int(generator["in_size"]), int(generator["out_size"])
    if generator.get("type") in SAME_SIZE:
        return LQ_SIDE[what], LQ_SIDE[what]
    if generator.get("is_low_res_input") is False:  # BasicVSR++ downsamples 4x first
        return 256, 256
    if discriminator.get("in_size"):  # ModifiedVGG's fully connected layer
        side = int(discriminator["in_size"])
        return side // scale, side
    return LQ_SIDE[what], LQ_SIDE[what] * scale


def _frames(cfg: Any) -> int:
    """A video restorer's input frames: its generator's, else its datasets'."""
    generator = cfg.model.get("generator") or {}
    for key in ("num_frames", "num_input_frames"):
        if isinstance(generator.get(key), int):
            return int(generator[key])
    for node in dicts(cfg.get("data")):
        if isinstance(node.get("num_input_frames"), int):
            return int(node["num_input_frames"])
    return FRAMES


class MMEdit(Codebase):
    """mmedit 0.x (``build_model``): the kinds of :data:`KINDS`."""

    name = "mmedit"
    package = "mmedit"
    distribution = "mmedit"
    install = "pip install 'mmedit<1'"
    modules = ("mmedit.models", "mmedit.core")
    init_weights = False  # as mmedit's tools/train.py: its models initialize themselves
    loss_networks = ("PerceptualLoss",)

    def prepare_config(self, cfg: Any, config_rois: bool) -> None:
        """GLEAN is built for :data:`GLEAN_OUT` (its discriminator too), its ratio kept."""
        generator = cfg.model.get("generator") or {}
        if generator.get("type") != "GLEANStyleGANv2" or generator["out_size"] <= GLEAN_OUT:
            return
        ratio = generator["out_size"] // generator["in_size"]
        generator.update(out_size=GLEAN_OUT, in_size=GLEAN_OUT // ratio)
        discriminator = cfg.model.get("discriminator") or {}
        if "in_size" in discriminator:
            discriminator["in_size"] = GLEAN_OUT

    def builder(self, cfg: Any) -> Any:
        from mmedit.models import build_model

        return build_model(cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg"))

    def make_batches(self, cfg: Any, seed: int) -> Tuple[Any, Any, Any]:
        """Two training samples and one test sample of the model's kind.

        Raises:
            ValueError: The model is of no kind of :data:`KINDS` (inpainting, matting).
        """
        import numpy as np

        from mmpar import collate

        model = cfg.model.get("type")
        if model not in KINDS:
            raise ValueError(
                f"the tool makes no batch for {model} (only restorers, translation, interpolation)"
            )
        rng = np.random.default_rng(seed)
        train_collect, test_collect = _collect(cfg, "train"), _collect(cfg, "test")
        shapes = self._shapes(cfg, KINDS[model])
        train = [self._sample(rng, shapes, train_collect) for _ in range(2)]
        test = self._sample(rng, shapes, test_collect)
        return collate(train, samples_per_gpu=2), collate([test], samples_per_gpu=1), None

    def _shapes(self, cfg: Any, what: str) -> Dict[str, Tuple[int, ...]]:
        """Key -> the shape of its tensor, for the model's kind."""
        model = cfg.model["type"]
        generator = cfg.model.get("generator") or {}
        if what == "translation":
            side = 256 if "Unet" in str(generator.get("type")) else TRANSLATION_SIDE
            return dict(img_a=(3, side, side), img_b=(3, side, side))
        if what == "interpolation":
            count = int(generator.get("num_input_frames", 2))
            return dict(inputs=(count, 3, 64, 64), target=(3, 64, 64))
        low, high = _sizes(cfg, what)
        frame, big = (3, low, low), (3, high, high)
        if what == "video":
            count = _frames(cfg)
            count = count if model in CENTRE_FRAME else min(count, FRAMES if low < 256 else 2)
            gt = big if model in CENTRE_FRAME else (count,) + big
            return dict(lq=(count,) + frame, gt=gt, gt_unsharp=gt)
        return dict(lq=frame, gt=big, gt_unsharp=big, lq_up=big, ref=big, ref_downup=big)

    @staticmethod
    def _sample(rng: Any, shapes: Dict[str, Tuple[int, ...]], collect: dict) -> dict:
        """One sample as mmedit's Collect emits it: tensors in [0, 1], and ``meta``."""
        import numpy as np
        import torch

        from mmpar import DataContainer as DC

        sample: Dict[str, Any] = {}
        for key in collect.get("keys", []):
            if key not in shapes:
                raise ValueError(f"the pipeline collects {key!r}, which the tool cannot make")
            sample[key] = torch.from_numpy(rng.random(shapes[key]).astype(np.float32))
        meta = {key: f"zoo_{key}.png" for key in collect.get("meta_keys", [])}
        sample["meta"] = DC(meta, cpu_only=True)
        return sample

    def train_step(self, model: Any, data: Any, cfg: Any) -> None:
        """One step of the model's own ``train_step``, with the config's optimizers.

        Raises:
            StageError: A logged loss is not finite, or no parameter got a gradient.
        """
        import math

        from mmedit.core import build_optimizers

        model.train()
        # A test-only config (converted weights) names no optimizers: Adam for each part.
        parts = [n for n in ("generator", "discriminator") if hasattr(model, n)]
        optimizers = cfg.get("optimizers") or {n: dict(type="Adam", lr=1e-4) for n in parts}
        outputs = wrap(model).train_step(data, build_optimizers(model, optimizers))
        bad = {k: v for k, v in outputs["log_vars"].items() if not math.isfinite(float(v))}
        if bad:
            raise StageError(f"losses not finite: {bad}")
        check_gradients(model)

    def test_step(self, model: Any, data: Any) -> Any:
        """The model's test output (``test_mode=True``, as mmedit's test loop calls it)."""
        import torch

        model.eval()
        with torch.no_grad():
            return wrap(model)(test_mode=True, **data)

    def check_result(self, output: Any, expect: Any, data: Any) -> None:
        """A dict: ``eval_result`` of finite numbers, or finite output images."""
        import math

        import torch

        if not isinstance(output, dict):
            raise StageError(f"expected a dict, got {form(output)}")
        if "eval_result" in output:
            bad = {k: v for k, v in output["eval_result"].items() if not math.isfinite(float(v))}
            if bad:
                raise StageError(f"metrics not finite: {bad}")
            return
        images = [v for v in output.values() if isinstance(v, torch.Tensor)]
        if not images or not all(bool(torch.isfinite(v).all()) for v in images):
            raise StageError(f"expected finite output images, got keys {sorted(output)}")
