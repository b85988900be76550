"""Pipeline section: the per-image cost of mmdet 2.x's detection training pipeline.

Generated JPEG files (quality 90, 640x480 and 427x640 alternating, photo-like
content, 1-8 boxes each; 16 files, quick: 4), written with Pillow into a temporary
folder, go through mmdet 2.x's standard training pipeline (LoadImageFromFile,
LoadAnnotations, Resize to (1333, 800) keeping the ratio, RandomFlip, Normalize,
Pad to 32, DefaultFormatBundle, Collect), one config for every variant:

* ``mmdet``: mmdet's own transforms (mmcv, OpenCV), batched by ``mmcv.parallel.collate``;
* ``mmpar float``: mmpar's transforms, normalizing in the worker, ``mmpar.collate``;
* ``mmpar uint8``: the same with ``Normalize(on_device=True)``: the batch stays
  uint8 and is normalized on the device after scatter (that work is not counted).

Every other file is flipped, decided in the input dict, so that all variants do
the same work. One thread (torch, OpenCV, OMP/MKL). After one untimed pass of
every variant, each round runs every variant over all files, the order rotating
round by round (15 rounds, quick: 2): a pass of the composed pipeline (per image:
its time / files), the collate of the pass's samples as one batch of
``samples_per_gpu=16`` (its time / files: mmpar may move work from the pipeline
into collate, so pipeline + collate is the fair figure), and a pass calling the
steps one by one, each timed. Figures are medians over rounds; ratios to mmdet
are medians of the per-round (loaders: per-epoch) ratios. Last, images/s of a
2-worker DataLoader per variant (batches of 16, each of one orientation as mmdet's
``GroupSampler`` makes them, 192 samples per epoch cycling over the files, quick:
16; one untimed epoch each, then 5 epochs each, quick: 1, the loaders alternating).
Without mmdet (or mmcv) only mmpar's variants are measured.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Callable, Dict, List, NamedTuple, Sequence

from torch.utils.data import DataLoader

import mmpar
from mmpar.data.transforms import Compose


def _load_sibling(name: str) -> ModuleType:
    """Load ``tools/bench/<name>.py``, registered in sys.modules (forked workers see it)."""
    spec = importlib.util.spec_from_file_location(
        f"mmpar_bench_{name}", Path(__file__).resolve().with_name(f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


data = _load_sibling("_pipeline_data")

BATCH = 16
WORKERS = 2
MMDET, FLOAT, UINT8 = "mmdet", "mmpar float", "mmpar uint8"
NORM = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
#: The issue's targets: mmpar / mmdet per-image cost (pipeline + collate), and loader speed-up.
TARGET_FLOAT, TARGET_UINT8, TARGET_LOADER = 0.67, 0.5, 1.5


def pipeline_config(on_device: bool = False) -> List[dict]:
    """mmdet 2.x's standard detection training pipeline, as config dicts."""
    norm = dict(NORM, on_device=True) if on_device else dict(NORM)
    return [
        dict(type="LoadImageFromFile"),
        dict(type="LoadAnnotations", with_bbox=True),
        dict(type="Resize", img_scale=(1333, 800), keep_ratio=True),
        dict(type="RandomFlip", flip_ratio=0.5),
        dict(type="Normalize", **norm),
        dict(type="Pad", size_divisor=32),
        dict(type="DefaultFormatBundle"),
        dict(type="Collect", keys=["img", "gt_bboxes", "gt_labels"]),
    ]


class Variant(NamedTuple):
    """One side: its composed pipeline, its collate, its input dicts, its image libraries."""

    pipeline: Callable[[dict], dict]
    collate: Callable[[list], dict]
    inputs: List[dict]
    libraries: str


def median_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    """The median of the paired ratios ``num[i] / den[i]`` (one pair per round)."""
    if len(num) != len(den) or not num:
        raise ValueError(f"median_ratio: need equal, non-empty lists, got {len(num)}, {len(den)}")
    return statistics.median(n / d for n, d in zip(num, den))


def rotated(names: Sequence[str], turn: int) -> List[str]:
    """``names`` started at ``turn`` (modulo its length): the order of one round."""
    k = turn % len(names)
    return list(names[k:]) + list(names[:k])


def _libraries(pipeline: Callable, decode_default: str = "n/a") -> str:
    steps = {type(s).__name__: s for s in pipeline.transforms}
    load = getattr(steps.get("LoadImageFromFile"), "backend", decode_default)
    resize = getattr(steps.get("Resize"), "backend", "n/a")
    return f"decode `{load}`, resize `{resize}`"


def build_variants(folder: str, files: list, mmdet: object) -> Dict[str, Variant]:
    """The variants measured: mmdet's (given ``mmdet``, a ``data.Mmdet``), mmpar float and uint8."""
    flips = [i % 2 == 1 for i in range(len(files))]
    ours = [data.mmpar_input(f, folder, flip) for f, flip in zip(files, flips)]
    ours_collate = partial(mmpar.collate, samples_per_gpu=BATCH)
    variants = {}
    if isinstance(mmdet, data.Mmdet):
        import mmcv.image.io

        theirs = mmdet.pipelines.Compose(pipeline_config())
        variants[MMDET] = Variant(
            theirs,
            partial(mmdet.collate, samples_per_gpu=BATCH),
            [data.mmdet_input(f, folder, flip) for f, flip in zip(files, flips)],
            _libraries(theirs, f"{mmcv.image.io.imread_backend} (mmcv)"),
        )
    for name, on_device in ((FLOAT, False), (UINT8, True)):
        pipeline = Compose(pipeline_config(on_device))
        variants[name] = Variant(pipeline, ours_collate, ours, _libraries(pipeline))
    return variants


def _pass(v: Variant) -> tuple:
    """Seconds of the composed pipeline over all files, and of collating its samples."""
    inputs = copy.deepcopy(v.inputs)
    start = time.perf_counter()
    samples = [v.pipeline(x) for x in inputs]
    mid = time.perf_counter()
    v.collate(samples)
    return mid - start, time.perf_counter() - mid


def _steps(v: Variant) -> Dict[str, float]:
    """Seconds of each step over all files, the steps called one by one."""
    seconds = {type(s).__name__: 0.0 for s in v.pipeline.transforms}
    for results in copy.deepcopy(v.inputs):
        for step in v.pipeline.transforms:
            start = time.perf_counter()
            results = step(results)
            seconds[type(step).__name__] += time.perf_counter() - start
    return seconds


def measure(variants: Dict[str, Variant], rounds: int) -> Dict[str, Dict[str, List[float]]]:
    """Per variant, per figure (pipeline, collate, total, each step): seconds/image per round."""
    n = len(next(iter(variants.values())).inputs)
    for v in variants.values():  # warm-up
        _pass(v)
        _steps(v)
    times: Dict[str, Dict[str, List[float]]] = {name: {} for name in variants}
    for r in range(rounds):
        for name in rotated(list(variants), r):
            pipe, coll = _pass(variants[name])
            figures = dict(_steps(variants[name]), pipeline=pipe, collate=coll, total=pipe + coll)
            for key, seconds in figures.items():
                times[name].setdefault(key, []).append(seconds / n)
    return times


def _epoch_rate(loader: DataLoader) -> float:
    images, start = 0, time.perf_counter()
    for batch in loader:
        images += batch["img"].data[0].shape[0]
    return images / (time.perf_counter() - start)


def loader_rates(variants: Dict[str, Variant], length: int, epochs: int) -> Dict[str, List[float]]:
    """Images/s per epoch of a 2-worker DataLoader per variant, the loaders alternating."""
    fork = "fork" if sys.platform.startswith("linux") else None
    loaders = {
        name: DataLoader(
            data.PipelineDataset(
                v.pipeline, data.orientation_batches(v.inputs, BATCH, length), length
            ),
            batch_size=BATCH,
            num_workers=WORKERS,
            collate_fn=v.collate,
            persistent_workers=True,
            multiprocessing_context=fork,
        )
        for name, v in variants.items()
    }
    for loader in loaders.values():  # start the workers
        _epoch_rate(loader)
    rates: Dict[str, List[float]] = {name: [] for name in loaders}
    for epoch in range(epochs):
        for name in rotated(list(loaders), epoch):
            rates[name].append(_epoch_rate(loaders[name]))
    return rates


def _ms(seconds: Sequence[float]) -> str:
    return f"{statistics.median(seconds) * 1e3:.2f}"


def _ratio(times: dict, name: str, key: str) -> str:
    if MMDET not in times:
        return "n/a"
    return f"{median_ratio(times[name][key], times[MMDET][key]):.2f}x"


def summary_table(times: Dict[str, Dict[str, List[float]]]) -> List[str]:
    lines = [
        "| variant | pipeline ms/image | ratio to mmdet | pipeline+collate ms/image | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, t in times.items():
        lines.append(
            f"| {name} | {_ms(t['pipeline'])} | {_ratio(times, name, 'pipeline')} | "
            f"{_ms(t['total'])} | {_ratio(times, name, 'total')} |"
        )
    return lines


def step_table(times: Dict[str, Dict[str, List[float]]], steps: List[str]) -> List[str]:
    names = list(times)
    lines = ["| step | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for step in steps + ["collate"]:
        label = "collate (per image)" if step == "collate" else step
        lines.append(f"| {label} | " + " | ".join(_ms(times[n][step]) for n in names) + " |")
    totals = [sum(statistics.median(times[n][s]) for s in steps + ["collate"]) for n in names]
    lines.append(
        "| total (sum of the rows) | " + " | ".join(f"{t * 1e3:.2f}" for t in totals) + " |"
    )
    return lines


def loader_table(rates: Dict[str, List[float]]) -> List[str]:
    lines = ["| loader | images/s | ratio to mmdet |", "|---|---:|---:|"]
    for name, r in rates.items():
        ratio = f"{median_ratio(r, rates[MMDET]):.2f}x" if MMDET in rates else "n/a"
        lines.append(f"| {name} | {statistics.median(r):.1f} | {ratio} |")
    return lines


def verdicts(times: Dict[str, Dict[str, List[float]]], rates: Dict[str, List[float]]) -> List[str]:
    """One line per target of the issue, met or not met (mmdet measured)."""
    ratios = {
        FLOAT: median_ratio(times[FLOAT]["total"], times[MMDET]["total"]),
        UINT8: median_ratio(times[UINT8]["total"], times[MMDET]["total"]),
        "loader": median_ratio(rates[FLOAT], rates[MMDET]),
    }
    lines = []
    for key, op, target, what in (
        (FLOAT, "<=", TARGET_FLOAT, f"pipeline+collate, {FLOAT} / mmdet"),
        (UINT8, "<=", TARGET_UINT8, f"pipeline+collate, {UINT8} / mmdet"),
        ("loader", ">=", TARGET_LOADER, f"{WORKERS}-worker loader images/s, {FLOAT} / mmdet"),
    ):
        value = ratios[key]
        met = value <= target if op == "<=" else value >= target
        lines.append(
            f"- target: {what} {op} {target}x: {value:.2f}x, {'met' if met else 'not met'}"
        )
    return lines


def run(quick: bool = False) -> str:
    n_files, rounds, length, epochs = (4, 2, 16, 1) if quick else (16, 15, 192, 5)
    with data.one_thread(), tempfile.TemporaryDirectory(prefix="mmpar_bench_jpeg_") as folder:
        files = data.write_images(folder, n_files)
        kb = statistics.mean(os.path.getsize(os.path.join(folder, f.name)) for f in files) / 1e3
        mmdet = data.import_mmdet()
        variants = build_variants(folder, files, mmdet)
        times = measure(variants, rounds)
        rates = loader_rates(variants, length, epochs)
    steps = [type(s).__name__ for s in next(iter(variants.values())).pipeline.transforms]
    lines = [
        "## Worker pipeline: per-image cost",
        "",
        f"{n_files} generated JPEG files (quality {data.QUALITY}, 640x480 and 427x640 "
        f"alternating, {kb:.0f} KB on average, 1-{data.MAX_BOXES} boxes each) through mmdet "
        "2.x's standard training pipeline (load, boxes, resize to (1333, 800) keeping the "
        "ratio, flip of every other file, normalize, pad to 32, format, collect), one config "
        f"for all: `{MMDET}` is mmdet's own transforms (mmcv, OpenCV) and `mmcv.parallel."
        f"collate`; `{FLOAT}` mmpar's transforms and `mmpar.collate`; `{UINT8}` the same "
        "with `Normalize(on_device=True)` (uint8 batches, normalized on the device after "
        f"scatter: not counted here). One thread; after a warm-up pass, {rounds} rounds, "
        "each running every variant over all files in an order rotating round by round; "
        "medians over rounds, ratios the medians of the per-round ratios. Collate: the "
        f"pass's samples as one batch (`samples_per_gpu={BATCH}`; both orientations, so "
        "padded to the largest height and width), its time per image. The step table's "
        "total is the sum of its rows.",
        "",
        "Libraries: " + "; ".join(f"{n}: {v.libraries}" for n, v in variants.items()) + ".",
        f"Versions: {data.versions(MMDET in variants)}.",
        "",
    ]
    if MMDET not in variants:
        lines += [f"{mmdet}: no comparison; mmpar's variants only.", ""]
    lines += summary_table(times) + ["", "Step by step (ms/image, medians):", ""]
    lines += step_table(times, steps) + [""]
    lines += [
        f"DataLoader, {WORKERS} workers, batches of {BATCH} (each of one orientation), "
        f"{length} samples per epoch; "
        f"median over {epochs} epoch(s) per loader, alternating:",
        "",
    ]
    lines += loader_table(rates)
    if MMDET in variants:
        lines += [""] + verdicts(times, rates)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
