"""mmdet_train section: mmdet 2.x's Faster R-CNN R-50-FPN training on mmpar, in steps/s.

The model is mmdet 2.28.2's own ``faster_rcnn/faster_rcnn_r50_fpn_1x_coco.py``, built
without pretrained weights on the ``mmcv.ops`` that ``mmpar.compat.patch_mmcv`` supplies
(mmpar's, on torchvision, where mmcv-full's compiled ops do not load). Each step is what
mmdet's runner does with mmpar's parts: ``MMDataParallel.train_step`` scatters a collated
batch (2 images per GPU, 800x1333 and 800x1199, padded together to 800x1344, 1-8 boxes
each, as mmdet's pipeline leaves them), the detector computes its losses, and mmpar's
:class:`~mmpar.runner.optim_step.OptimizerStepper` runs the backward pass and an SGD step
(lr 0.02, momentum 0.9, weight decay 1e-4: the config's optimizer).

Variants, each its own model from the same seed:

- ``float32``;
- ``float16 AMP``: float16 autocast with a dynamic loss scale (mmdet's ``fp16`` configs);
- ``bfloat16 AMP``: bfloat16 autocast, no loss scale.

Every variant first runs untimed warm-up steps (cudnn autotunes the padded shape and
autocast's kernels). Then the variants alternate, a round of ``steps_per_round`` steps
each, until each has ``steps`` timed steps (20 by default); every step is synchronized.
Figures: median step time, steps/s and images/s from it, and each variant's ratio to
float32 as the median of the per-round ratios. The last loss of each variant is printed
so that a diverging variant shows.

Needs mmcv 1.x, mmdet 2.x and torchvision (``pip install -e ".[mmcv-ops]"``). It runs on
CUDA; without CUDA it is skipped, except with ``--quick``, which runs it on the CPU on
small images with 64 RoIs per image (float32 and bfloat16, one timed step each) as a
check that it works.

Run directly (``python tools/bench/mmdet_train.py [--quick] [--steps N]``) or through
``python tools/benchmark.py mmdet_train``.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "faster_rcnn/faster_rcnn_r50_fpn_1x_coco.py"
#: (height, width) of the two images of a batch: mmdet's Resize((1333, 800)) of a 4:3 and
#: a 3:2 image; the batch pads them to 800x1344 (size_divisor 32).
FULL_SIZES = ((800, 1333), (800, 1199))
QUICK_SIZES = ((64, 96), (64, 80))
#: Proposals kept and RoIs sampled per image in the quick run (the config: 1000 and 512).
QUICK_ROIS = 64
REQUIRED = ("mmcv", "mmdet", "torchvision")


class Variant:
    """One precision: its own model, optimizer and stepper, and the times of its steps.

    (A plain class: benchmark.py loads sections without registering them as modules,
    which dataclasses need.)
    """

    def __init__(self, name: str, stepper: Any) -> None:
        self.name, self.stepper = name, stepper
        self.times: List[float] = []
        self.rounds: List[float] = []
        self.last_loss = float("nan")


def missing_packages() -> List[str]:
    """The packages of :data:`REQUIRED` that are not installed."""
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def mmdet_config_path(relative: str = CONFIG) -> Path:
    """The path of a config that mmdet's wheel ships (``mmdet/.mim/configs/...``)."""
    import mmdet

    path = Path(mmdet.__file__).parent / ".mim" / "configs" / relative
    if not path.is_file():
        raise FileNotFoundError(f"mmdet {mmdet.__version__} ships no config {relative}")
    return path


def build_detector(
    device: torch.device, seed: int = 0, rois: Optional[int] = None
) -> torch.nn.Module:
    """Faster R-CNN R-50-FPN from mmdet's config, randomly initialized, in train mode.

    Args:
        device: Where the model goes.
        seed: Seeds the initial weights.
        rois: None keeps the config's RoIs (1000 proposals, 512 sampled per image);
            a number sets both (the quick CPU run's small images need few).
    """
    from mmcv import Config
    from mmdet.models import build_detector as mmdet_build

    cfg = Config.fromfile(str(mmdet_config_path()))
    cfg.model.backbone.init_cfg = None  # no pretrained weights: nothing is downloaded
    if rois is not None:
        cfg.model.train_cfg.rpn_proposal.max_per_img = rois
        cfg.model.train_cfg.rcnn.sampler.num = rois
    torch.manual_seed(seed)
    model = mmdet_build(cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg"))
    logger = logging.getLogger("mmcv")
    level = logger.level
    logger.setLevel(logging.WARNING)  # init_weights logs every parameter's initializer
    try:
        model.init_weights()
    finally:
        logger.setLevel(level)
    return model.to(device).train()


def make_batch(sizes: Sequence[Tuple[int, int]], seed: int = 0) -> Dict[str, Any]:
    """One collated training batch as mmdet's pipeline and ``collate`` give it.

    Args:
        sizes: ``(H, W)`` of each image (one GPU's share: all of them).
        seed: Seeds the pixels and boxes.

    Returns:
        ``img`` (a stacked container of shape ``(N, 3, Hp, Wp)``, float32, normalized
        values), ``img_metas`` (cpu_only), ``gt_bboxes`` (``(k_i, 4)`` float32 per image)
        and ``gt_labels`` (``(k_i,)`` int64 per image, COCO's 80 classes).
    """
    from mmpar import DataContainer, collate

    g = torch.Generator().manual_seed(seed)
    samples = []
    for h, w in sizes:
        k = int(torch.randint(1, 9, (1,), generator=g))
        xy = torch.rand(k, 2, generator=g) * torch.tensor([w * 0.7, h * 0.7])
        wh = (torch.rand(k, 2, generator=g) * 0.25 + 0.05) * torch.tensor([w, h])
        boxes = torch.cat([xy, xy + wh], dim=1)
        pad_h, pad_w = -(-h // 32) * 32, -(-w // 32) * 32
        meta = dict(
            filename=f"synthetic_{h}x{w}.jpg",
            ori_shape=(h, w, 3),
            img_shape=(h, w, 3),
            pad_shape=(pad_h, pad_w, 3),
            scale_factor=np.ones(4, dtype=np.float32),
            flip=False,
            flip_direction=None,
            img_norm_cfg=dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]),
        )
        samples.append(
            dict(
                img=DataContainer(torch.randn(3, h, w, generator=g), stack=True, size_divisor=32),
                img_metas=DataContainer(meta, cpu_only=True),
                gt_bboxes=DataContainer(boxes),
                gt_labels=DataContainer(torch.randint(0, 80, (k,), generator=g)),
            )
        )
    return collate(samples, samples_per_gpu=len(samples))


def build_variant(name: str, device: torch.device, rois: Optional[int] = None) -> Variant:
    """A model, its SGD optimizer and an :class:`OptimizerStepper` in ``name``'s precision."""
    from mmpar import MMDataParallel
    from mmpar.runner.optim_step import build_stepper

    model = build_detector(device, rois=rois)
    wrapped = MMDataParallel(model, device_ids=[0] if device.type == "cuda" else ["cpu"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
    amp = {"float32": None, "float16 AMP": "float16", "bfloat16 AMP": "bfloat16"}[name]
    cfg: Dict[str, Any] = {} if amp is None else {"amp": dict(dtype=amp)}
    # mmdet's Faster R-CNN config clips no gradients; the loss scale is dynamic.
    return Variant(name, build_stepper(cfg, wrapped, optimizer, device))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_steps(v: Variant, batch: Dict[str, Any], n: int, device: torch.device) -> List[float]:
    """Run ``n`` synchronized training steps; return their times in seconds."""
    out = []
    for _ in range(n):
        _sync(device)
        start = time.perf_counter()
        outputs = v.stepper.train_iter(batch, 0, 1)
        _sync(device)
        out.append(time.perf_counter() - start)
        v.last_loss = float(outputs["loss"].detach())
    return out


def measure(
    variants: List[Variant],
    batch: Dict[str, Any],
    device: torch.device,
    steps: int,
    steps_per_round: int,
    warmup: int,
) -> None:
    """Warm every variant up, then alternate rounds until each has ``steps`` timed steps."""
    for v in variants:
        train_steps(v, batch, warmup, device)
    turn = 0
    while len(variants[0].times) < steps:
        n = min(steps_per_round, steps - len(variants[0].times))
        order = variants[turn % len(variants) :] + variants[: turn % len(variants)]
        for v in order:
            times = train_steps(v, batch, n, device)
            v.times += times
            v.rounds.append(statistics.median(times))
        turn += 1


def table(variants: List[Variant], images_per_step: int) -> List[str]:
    """Markdown rows: median step, steps/s, images/s, ratio to the first variant, last loss."""
    base = variants[0]
    rows = [
        "| precision | median step (ms) | steps/s | images/s | speed vs float32 | last loss |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for v in variants:
        step = statistics.median(v.times)
        ratio = statistics.median(b / t for b, t in zip(base.rounds, v.rounds))
        rows.append(
            f"| {v.name} | {step * 1e3:.1f} | {1 / step:.2f} | {images_per_step / step:.1f} "
            f"| {ratio:.2f}x | {v.last_loss:.3f} |"
        )
    return rows


def _device_line(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}"
    return f"CPU, {torch.get_num_threads()} threads"


def run(quick: bool = False, steps: Optional[int] = None) -> str:
    """The section's Markdown (a one-line skip where it cannot run)."""
    title = "## mmdet 2.x Faster R-CNN R-50-FPN training on mmpar (`mmdet_train`)\n"
    missing = missing_packages()
    if missing:
        return title + f'\nskipped: needs {", ".join(missing)} (pip install -e ".[mmcv-ops]")\n'
    cuda = torch.cuda.is_available()
    if not cuda and not quick:
        return title + "\nskipped: needs CUDA (`--quick` runs it on the CPU on small images)\n"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    from mmpar.compat import ops_in_use, patch_mmcv

    patch_mmcv()

    names = ["float32", "float16 AMP", "bfloat16 AMP"] if cuda else ["float32", "bfloat16 AMP"]
    sizes = QUICK_SIZES if quick else FULL_SIZES
    steps = steps or (1 if quick else 20)
    warmup, per_round = (1, 1) if quick else (3, 5)
    if cuda:
        torch.backends.cudnn.benchmark = True
    rois = QUICK_ROIS if quick else None
    variants = [build_variant(name, device, rois) for name in names]
    batch = make_batch(sizes)
    measure(variants, batch, device, steps, per_round, warmup)
    shape = tuple(batch["img"].data[0].shape)
    roi_text = "the config's" if rois is None else str(rois)
    lines = [
        title,
        f"<!-- {_device_line(device)}; mmcv.ops: {ops_in_use()}; batch {shape} "
        f"({' and '.join(f'{h}x{w}' for h, w in sizes)}); "
        f"{roi_text} RoIs per image; "
        f"{warmup} warm-up steps each, then "
        f"{steps} timed steps each in rounds of {per_round}, alternating -->\n",
        *table(variants, len(sizes)),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small images, one step each")
    parser.add_argument("--steps", type=int, help="timed steps per variant (default 20)")
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps: expected a positive number of steps, got {args.steps}")
    print(run(quick=args.quick, steps=args.steps))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
