"""GPU section: host-to-GPU transfers and the input pipeline against their ideals.

Skipped without CUDA.

1. A pinned detection batch (16 float32 images 3x800x1333, about 205 MB, with boxes,
   labels and metas) moved by ``scatter_kwargs(..., [0])``, against one raw pinned
   ``non_blocking`` copy of the image tensor: share of the raw copy's bandwidth.
2. 256 small per-image box tensors (1 to 100 boxes): ``mmpar.scatter`` and
   ``to_device_batched`` against a per-tensor ``.to(device, non_blocking=True)`` loop.
3. The input pipeline as a user trains on one GPU: ``build_dataloader`` (8 workers,
   ``samples_per_gpu=16``) over 3x(600-800)x(900-1333) images, scattered by
   ``MMDataParallel``, feeding a ResNet-50 bf16 training step (torchvision's, else a
   comparable conv net), against the ideal (the batch already on the GPU); and the
   example config's own path (TinyDet on SyntheticShapes) against its ideal.

Every timing synchronizes the device; variants alternate, and medians are reported.
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from mmpar import DataContainer, MMDataParallel, scatter, scatter_kwargs
from mmpar.data import build_dataloader
from mmpar.data.transforms import Compose
from mmpar.transfer import to_device_batched

IMAGENET_MEAN = [123.675, 116.28, 103.53]
IMAGENET_STD = [58.395, 57.12, 57.375]


def _time(fn: Callable[[], Any], reps: int) -> List[float]:
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - start)
    return out


def _alternate(fns: Dict[str, Callable[[], Any]], reps: int, warmup: int = 3) -> Dict[str, float]:
    """Median seconds of each function, the functions interleaved round by round."""
    times: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(warmup):
        for fn in fns.values():
            _time(fn, 1)
    for _ in range(reps):
        for name, fn in fns.items():
            times[name] += _time(fn, 1)
    return {k: statistics.median(v) for k, v in times.items()}


def big_batch(quick: bool) -> List[str]:
    n = 4 if quick else 16
    g = torch.Generator().manual_seed(0)
    img = torch.rand(n, 3, 800, 1333, generator=g).pin_memory()
    boxes = [
        torch.rand(int(k), 4, generator=g).pin_memory()
        for k in torch.randint(1, 101, (n,), generator=g)
    ]
    labels = [torch.randint(0, 80, (b.shape[0],), generator=g).pin_memory() for b in boxes]
    metas = [dict(img_shape=(800, 1333, 3), pad_shape=(800, 1344, 3), idx=i) for i in range(n)]
    batch = dict(
        img=DataContainer([img], stack=True),
        gt_bboxes=DataContainer([boxes]),
        gt_labels=DataContainer([labels]),
        img_metas=DataContainer([metas], cpu_only=True),
    )
    dev = torch.device("cuda", 0)
    t = _alternate(
        {
            "raw": lambda: img.to(dev, non_blocking=True),
            "images only": lambda: scatter_kwargs((), dict(img=batch["img"]), [0]),
            "scatter": lambda: scatter_kwargs((), batch, [0]),
        },
        reps=5 if quick else 30,
    )
    gbs = img.numel() * 4 / 1e9
    return [
        "### A pinned detection batch to the GPU",
        "",
        f"{n} float32 images 3x800x1333 ({img.numel() * 4 / 1e6:.0f} MB, pinned) with boxes, "
        "labels and metas; median of alternating rounds.",
        "",
        "| method | time | GB/s | share of the raw copy's bandwidth |",
        "|---|---:|---:|---:|",
        f"| raw pinned `img.to(cuda, non_blocking=True)` | {t['raw'] * 1e3:.2f} ms | "
        f"{gbs / t['raw']:.1f} | 100% |",
        f"| `scatter_kwargs` of the images alone | {t['images only'] * 1e3:.2f} ms | "
        f"{gbs / t['images only']:.1f} | {t['raw'] / t['images only']:.1%} |",
        f"| `scatter_kwargs` of the whole batch | {t['scatter'] * 1e3:.2f} ms | "
        f"{gbs / t['scatter']:.1f} | **{t['raw'] / t['scatter']:.1%}** |",
        "",
    ]


def small_tensors(quick: bool) -> List[str]:
    g = torch.Generator().manual_seed(1)
    boxes = [torch.rand(int(k), 4, generator=g) for k in torch.randint(1, 101, (256,), generator=g)]
    dev = torch.device("cuda", 0)
    batch = dict(gt_bboxes=DataContainer([boxes]))
    pinned = [b.pin_memory() for b in boxes]
    fns = {
        "loop": lambda: [b.to(dev, non_blocking=True) for b in boxes],
        "loop (pinned)": lambda: [b.to(dev, non_blocking=True) for b in pinned],
        "scatter": lambda: scatter(batch, [0]),
        "to_device_batched": lambda: to_device_batched(boxes, dev),
        "cat + one copy": lambda: torch.cat(boxes).to(dev, non_blocking=True),
    }
    t = _alternate(fns, reps=20 if quick else 200)
    lines = [
        "### 256 small tensors to the GPU",
        "",
        "256 per-image box tensors of 1 to 100 boxes (float32, pageable unless said); median of "
        "alternating rounds.",
        "",
        "| method | time | speed-up over the per-tensor loop |",
        "|---|---:|---:|",
    ]
    names = {
        "loop": "per-tensor `.to(cuda, non_blocking=True)` loop",
        "loop (pinned)": "the same loop, pinned sources",
        "scatter": "`mmpar.scatter(..., [0])`",
        "to_device_batched": "`to_device_batched`",
        "cat + one copy": "`torch.cat` + one copy (no views back)",
    }
    for k, label in names.items():
        speed = t["loop"] / t[k]
        lines.append(
            f"| {label} | {t[k] * 1e3:.3f} ms | {'**' if k == 'scatter' else ''}{speed:.2f}x"
            f"{'**' if k == 'scatter' else ''} |"
        )
    return lines + [""]


class _BigImages(torch.utils.data.Dataset):
    """Images 3x(600-800)x(900-1333), 1-20 boxes each: Normalize, format, collect.

    The workers do not pad: ``DefaultFormatBundle(size_divisor=32)`` has collate pad each
    image once, into the batch, as the datasets' default pipelines do.
    """

    def __init__(self, n: int, on_device: bool) -> None:
        self.n = n
        rng = np.random.default_rng(0)
        self.pool = [rng.integers(0, 256, (800, 1333, 3), dtype=np.uint8) for _ in range(4)]
        self.pipeline = Compose(
            [
                dict(
                    type="Normalize",
                    mean=IMAGENET_MEAN,
                    std=IMAGENET_STD,
                    to_rgb=True,
                    on_device=on_device,
                ),
                dict(type="DefaultFormatBundle", size_divisor=32),
                dict(
                    type="Collect",
                    keys=["img", "gt_bboxes", "gt_labels"],
                    meta_keys=["img_shape", "pad_shape", "img_norm_cfg"],
                ),
            ]
        )

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        rng = np.random.default_rng(i)
        h, w = int(rng.integers(600, 801)), int(rng.integers(900, 1334))
        img = self.pool[i % len(self.pool)][:h, :w]
        k = int(rng.integers(1, 21))
        boxes = rng.uniform(0, min(h, w), (k, 4)).astype(np.float32)
        results = dict(
            img=np.ascontiguousarray(img),
            img_fields=["img"],
            img_shape=img.shape,
            ori_shape=img.shape,
            gt_bboxes=boxes,
            gt_labels=rng.integers(0, 80, k),
            bbox_fields=["gt_bboxes"],
        )
        return self.pipeline(results)


def _conv_net() -> nn.Module:
    try:
        from torchvision.models import resnet50

        return resnet50(num_classes=80)
    except ImportError:  # a ResNet-like stack of our own
        layers: List[nn.Module] = [
            nn.Conv2d(3, 64, 7, 2, 3),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]
        cin = 64
        for cout in (256, 512, 1024, 2048):
            layers += [
                nn.Conv2d(cin, cout, 3, 2, 1),
                nn.BatchNorm2d(cout),
                nn.ReLU(),
                nn.Conv2d(cout, cout, 3, 1, 1),
                nn.BatchNorm2d(cout),
                nn.ReLU(),
            ]
            cin = cout
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 80))


class _Classifier(nn.Module):
    """A detector-shaped training step: images in, a loss out, bf16 autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _conv_net().to(memory_format=torch.channels_last)

    def train_step(self, data: dict, optimizer: Optional[torch.optim.Optimizer] = None) -> dict:
        img = data["img"].contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = self.net(img)
        target = torch.stack([lbl[0] for lbl in data["gt_labels"]])
        loss = nn.functional.cross_entropy(logits.float(), target)
        return dict(loss=loss, num_samples=img.shape[0])


def _rate(
    wrapped: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Any,
    iters: int,
    direct: bool = False,
) -> float:
    """Images/s of ``iters`` steps over ``batches`` (an iterable), after 3 warm-up steps."""
    it = iter(batches)
    step = wrapped.module.train_step if direct else wrapped.train_step

    def one() -> int:
        data = next(it)
        out = step(data, optimizer)
        optimizer.zero_grad(set_to_none=True)
        out["loss"].backward()
        optimizer.step()
        return int(out["num_samples"])

    for _ in range(3):
        one()
    torch.cuda.synchronize()
    start, images = time.perf_counter(), 0
    for _ in range(iters):
        images += one()
    torch.cuda.synchronize()
    return images / (time.perf_counter() - start)


def _loader_rate(loader: Any, iters: int) -> float:
    """Images/s of the loader with nothing consuming its batches (after 3 warm-up batches)."""
    it = iter(loader)
    for _ in range(3):
        next(it)
    start, images = time.perf_counter(), 0
    for _ in range(iters):
        images += next(it)["img"].data[0].shape[0]
    return images / (time.perf_counter() - start)


def _cycle(items: Sequence[Any]) -> Any:
    while True:
        yield from items


def pipeline(quick: bool) -> List[str]:
    iters = 4 if quick else 40
    n = (iters + 3) * 16
    model = _Classifier().cuda(0)
    wrapped = MMDataParallel(model, device_ids=[0])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    rows = []
    variants = [
        ("float32, normalized in the workers", False, None),
        ("float32, normalized in the workers", False, False),
        ("uint8, normalized on the GPU after scatter", True, None),
    ]
    ideal_rates = []

    def make_loader(on_device: bool, pin: Optional[bool]) -> Any:
        return build_dataloader(
            _BigImages(n, on_device),
            16,
            8,
            shuffle=False,
            seed=0,
            pin_memory=pin,
            persistent_workers=False,
        )

    # One untimed pass of every variant over the same batches first: cudnn autotunes
    # each new padded shape once, and whichever variant met them first would pay it.
    for _, on_device, pin in variants:
        _rate(wrapped, optimizer, make_loader(on_device, pin), iters)
    for label, on_device, pin in variants:
        loader = make_loader(on_device, pin)
        rate = _rate(wrapped, optimizer, loader, iters)
        alone = _loader_rate(
            build_dataloader(
                _BigImages(n, on_device), 16, 8, shuffle=False, seed=0, pin_memory=pin
            ),
            iters,
        )
        if not ideal_rates:  # the ideal: the same batches, already on the GPU, normalized
            cached = [wrapped.scatter((b,), {}, [0])[0][0][0] for b in itertools.islice(loader, 4)]
            ideal_rates.append(_rate(wrapped, optimizer, _cycle(cached), iters, direct=True))
        pin_label = "default (pinned with CUDA)" if pin is None else str(pin)
        rows.append((label, pin_label, rate, alone))
    ideal = ideal_rates[0]
    net = (
        "torchvision ResNet-50"
        if "resnet" in type(model.net).__name__.lower()
        else "own ResNet-like net"
    )
    lines = [
        f"### Input pipeline vs ideal: {net}, bf16 autocast, SGD",
        "",
        "`build_dataloader(samples_per_gpu=16, workers_per_gpu=8)` over 3x(600-800)x(900-1333) "
        "images "
        "(Normalize, format with size_divisor 32 so that collate pads once, collect), "
        f"`MMDataParallel.train_step`; {iters} steps after "
        f"3 warm-up steps. Ideal: the batch already on the GPU: **{ideal:.0f} images/s**.",
        "",
        "| images in the loader | pin_memory | images/s | share of ideal | the loader alone, "
        "images/s |",
        "|---|---|---:|---:|---:|",
    ]
    for label, pin_label, rate, alone in rows:
        lines.append(
            f"| {label} | {pin_label} | {rate:.0f} | **{rate / ideal:.2f}** | {alone:.0f} |"
        )
    return lines + [""]


def example_config(quick: bool) -> List[str]:
    from pathlib import Path

    from mmpar.config import Config
    from mmpar.data import build_dataset
    from mmpar.models import build_model, build_optimizer
    from mmpar.runner.launch import wrap_model

    path = Path(__file__).resolve().parents[2] / "configs" / "tiny_det" / "tiny_det_synthetic.py"
    cfg = Config.fromfile(str(path))
    dataset = build_dataset(cfg.data.train)
    rows = []
    for workers in sorted({cfg.data.workers_per_gpu, 2}):
        torch.manual_seed(0)
        model = wrap_model(build_model(cfg.model), distributed=False)
        optimizer = build_optimizer(model, cfg.optimizer)
        loader = build_dataloader(
            dataset, cfg.data.samples_per_gpu, workers, seed=0, persistent_workers=workers > 0
        )
        iters = min(len(loader) - 3, 4 if quick else 13)
        rate = _rate(model, optimizer, loader, iters)
        cached = [model.scatter((b,), {}, [0])[0][0][0] for b in itertools.islice(loader, 4)]
        ideal = _rate(model, optimizer, _cycle(cached), iters * 3, direct=True)
        rows.append((workers, rate, ideal))
    lines = [
        "### The example config's own path",
        "",
        f"`{path.relative_to(path.parents[2])}` (TinyDet, SyntheticShapes 64-96 px, "
        "samples_per_gpu="
        f"{cfg.data.samples_per_gpu}, images uint8 normalized on the GPU): its loader "
        "(`build_dataloader` "
        "defaults) and `wrap_model` as `tools/train.py` builds them, against the same steps on "
        "batches already on the GPU.",
        "",
        "| workers_per_gpu | images/s | ideal images/s | share of ideal |",
        "|---:|---:|---:|---:|",
    ]
    for workers, rate, ideal in rows:
        mark = " (the config's)" if workers == cfg.data.workers_per_gpu else ""
        lines.append(f"| {workers}{mark} | {rate:.0f} | {ideal:.0f} | **{rate / ideal:.2f}** |")
    return lines + [""]


def run(quick: bool = False) -> str:
    if not torch.cuda.is_available():
        return "## GPU\n\nSkipped: CUDA is not available on this machine.\n"
    name = torch.cuda.get_device_name(0)
    lines = ["## GPU", "", f"{name}, torch {torch.__version__} (CUDA {torch.version.cuda}).", ""]
    for part in (big_batch, small_tensors, pipeline, example_config):
        start = time.perf_counter()
        try:
            lines += part(quick)
        except Exception as exc:  # one failing part must not hide the others' figures
            lines += [f"### {part.__name__}: failed: {type(exc).__name__}: {exc}", ""]
        print(f"<!-- {part.__name__}: {time.perf_counter() - start:.0f} s -->", flush=True)
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
