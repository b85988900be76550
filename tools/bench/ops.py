"""Ops section: mmpar's ``mmcv.ops`` stand-ins against a kernel doing the same work (issue 30).

Each row times one op of :mod:`mmpar.compat.ops` and a reference in the same run, on the
CPU, on one thread (``torch.set_num_threads(1)``): both warmed up once, then alternated
round by round; the figures are medians, the ratio the median of the per-round ratios
(each round runs both, seconds apart, under the same load).

* ``RoIPool`` (7 x 7, 128 rois of 32-512 pixels on a stride-16 map of an 800 x 1088
  image, 256 channels) against ``torchvision.ops.roi_pool`` (which rounds the boxes,
  mmcv does not: the same work, other bins);
* ``RoIAlign`` max against ``RoIAlign`` avg (torchvision's kernel), the same sampling;
* ``DeformRoIPool`` with offsets (128 rois of 100-400 pixels on a stride-8 map),
  forward and forward + backward, against ``RoIAlign`` avg with the same sampling;
* ``soft_nms`` (10,000 boxes: sparse, crowded, clustered; ``linear`` and ``gaussian``)
  against ``torchvision.ops.nms`` at the same threshold, and ``batched_nms`` (10,000
  boxes, 80 classes; and mmdet's per-image soft_nms call, 1,000 boxes) against
  ``torchvision.ops.batched_nms``: the rows of ``tools/bench/ops_nms.py`` (its
  docstring describes the boxes);
* ``box_iou_rotated`` (2000 x 2000) and ``nms_rotated`` (10,000 boxes) against
  torchvision's ``box_iou`` and ``nms`` on the boxes' axis-aligned counterparts (the
  same centres and sizes): what the rotation costs;
* ``multi_scale_deformable_attn`` (BEVFormer's spatial cross-attention over one camera),
  forward and forward + backward, against the textbook per-level ``grid_sample`` with
  autograd, and the bytes each keeps for the backward: ``tools/bench/ops_attention.py``.

``--quick``: fewer rois and channels, 500-1,000 boxes, two rounds (seconds; a smoke run).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Callable, List, Tuple

import torch

BENCH_DIR = Path(__file__).resolve().parent

#: ``(op, case, reference, ours_s, reference_s, ratio, target)``; ``target`` "" for none.
Row = Tuple[str, str, str, float, float, float, str]


def _load_sibling(name: str) -> ModuleType:
    """Load the helper ``tools/bench/<name>.py``, registered in sys.modules."""
    spec = importlib.util.spec_from_file_location(f"mmpar_bench_{name}", BENCH_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ops_nms = _load_sibling("ops_nms")
ops_attention = _load_sibling("ops_attention")


def compare(ours: Callable[[], object], reference: Callable[[], object], rounds: int) -> tuple:
    """``(ours_s, reference_s, ratio)``: medians over ``rounds`` alternating rounds (after
    one warm-up call of each), the ratio the median of the per-round ratios."""
    ours()
    reference()
    times: Tuple[List[float], List[float]] = ([], [])
    for i in range(rounds):
        pair = (ours, reference) if i % 2 else (reference, ours)  # who goes first alternates
        for fn in pair:
            start = time.perf_counter()
            fn()
            times[fn is reference].append(time.perf_counter() - start)
    ratios = [o / r for o, r in zip(*times)]
    return statistics.median(times[0]), statistics.median(times[1]), statistics.median(ratios)


def _rois(
    count: int, sizes: Tuple[float, float], image: Tuple[int, int], seed: int
) -> torch.Tensor:
    """``(count, 5)`` boxes on image 0: sides uniform in ``sizes``, inside ``image`` (h, w)."""
    gen = torch.Generator().manual_seed(seed)
    wh = torch.rand(count, 2, generator=gen) * (sizes[1] - sizes[0]) + sizes[0]
    room = (torch.tensor([image[1], image[0]]) - wh).clamp(min=1)
    xy = torch.rand(count, 2, generator=gen) * room
    return torch.cat([torch.zeros(count, 1), xy, xy + wh], 1)


def roi_rows(quick: bool) -> List[Row]:
    """RoIPool, RoIAlign max and DeformRoIPool against torchvision's kernels."""
    import torchvision.ops as tv

    from mmpar.compat.ops import deform_roi_pool, roi_align, roi_pool

    rounds = 2 if quick else 9
    channels, count = (32, 16) if quick else (256, 128)
    gen = torch.Generator().manual_seed(0)
    image = (800, 1088)
    feat16 = torch.randn(1, channels, image[0] // 16, image[1] // 16, generator=gen)
    rois16 = _rois(count, (32.0, 512.0), image, seed=1)
    case16 = f"7x7, {count} rois of 32-512 px, stride 16, {channels} ch"
    rows: List[Row] = []
    ours, ref, ratio = compare(
        lambda: roi_pool(feat16, rois16, 7, 1 / 16),
        lambda: tv.roi_pool(feat16, rois16, 7, 1 / 16),
        rounds,
    )
    rows.append(("RoIPool", case16, "torchvision roi_pool", ours, ref, ratio, "<= 2x"))
    for ratio_ in (2, 0):
        ours, ref, ratio = compare(
            lambda: roi_align(feat16, rois16, 7, 1 / 16, ratio_, "max"),
            lambda: roi_align(feat16, rois16, 7, 1 / 16, ratio_, "avg"),
            rounds,
        )
        case = f"{case16}, sampling_ratio {ratio_}"
        rows.append(("RoIAlign max", case, "RoIAlign avg", ours, ref, ratio, "<= 3x"))
    feat8 = torch.randn(1, channels, image[0] // 8, image[1] // 8, generator=gen)
    rois8 = _rois(count, (100.0, 400.0), image, seed=2)
    offset = torch.randn(count, 2, 7, 7, generator=gen) * 0.1
    case8 = f"7x7, {count} rois of 100-400 px, stride 8, {channels} ch, offsets"
    for ratio_ in (2, 0):
        ours, ref, ratio = compare(
            lambda: deform_roi_pool(feat8, rois8, offset, 7, 1 / 8, ratio_),
            lambda: roi_align(feat8, rois8, 7, 1 / 8, ratio_, "avg"),
            rounds,
        )
        case = f"{case8}, sampling_ratio {ratio_}"
        rows.append(("DeformRoIPool", case, "RoIAlign avg", ours, ref, ratio, "<= 3x"))
    x = feat8.clone().requires_grad_()
    off = offset.clone().requires_grad_()
    grad = torch.randn(count, channels, 7, 7, generator=gen)
    for ratio_ in (2, 0):
        ours, ref, ratio = compare(
            lambda: deform_roi_pool(x, rois8, off, 7, 1 / 8, ratio_).backward(grad),
            lambda: roi_align(x, rois8, 7, 1 / 8, ratio_, "avg").backward(grad),
            rounds,
        )
        case = f"{case8}, sampling_ratio {ratio_}"
        rows.append(
            ("DeformRoIPool fwd+bwd", case, "RoIAlign avg fwd+bwd", ours, ref, ratio, "<= 3x")
        )
    return rows


def _boxes(count: int, seed: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``count`` boxes of 10-100 pixels in a 1000 x 1000 image: ``(x1, y1, x2, y2)``, their
    scores, and ``(cx, cy, w, h, angle)`` rotated boxes of the same centres and sizes."""
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(count, 2, generator=gen) * 1000
    wh = torch.rand(count, 2, generator=gen) * 90 + 10
    scores = torch.rand(count, generator=gen)
    angle = (torch.rand(count, 1, generator=gen) - 0.5) * torch.pi
    return torch.cat([xy, xy + wh], 1), scores, torch.cat([xy + wh / 2, wh, angle], 1)


def nms_rows(quick: bool) -> List[Row]:
    """soft_nms and batched_nms against torchvision: :func:`ops_nms.rows`."""
    return ops_nms.rows(quick, compare)


def attention_rows(quick: bool) -> List[Row]:
    """Multi-scale deformable attention against the textbook: :func:`ops_attention.rows`."""
    return ops_attention.rows(quick, compare)


def rotated_rows(quick: bool) -> List[Row]:
    """box_iou_rotated and nms_rotated against torchvision on axis-aligned boxes."""
    import torchvision.ops as tv

    from mmpar.compat.ops import box_iou_rotated, nms_rotated

    rounds = 2 if quick else 5
    side = 200 if quick else 2000
    boxes, _, rotated = _boxes(side, seed=5)
    ours, ref, ratio = compare(
        lambda: box_iou_rotated(rotated, rotated), lambda: tv.box_iou(boxes, boxes), rounds
    )
    rows = [("box_iou_rotated", f"{side} x {side}", "torchvision box_iou (axis-aligned)", ours,
             ref, ratio, "")]  # fmt: skip
    count = 500 if quick else 10000
    boxes, scores, rotated = _boxes(count, seed=6)
    ours, ref, ratio = compare(
        lambda: nms_rotated(rotated, scores, 0.5),
        lambda: tv.nms(boxes, scores, 0.5),
        rounds,
    )
    rows.append(("nms_rotated", f"{count} boxes", "torchvision nms (axis-aligned)", ours, ref,
                 ratio, "seconds (issue 27)"))  # fmt: skip
    return rows


def pooling_rows(quick: bool) -> List[Row]:
    """prroi_pool and border_align (no mmdet 2.x model uses them; no target): forward and
    backward against RoIAlign avg's, on the same map and rois or as many samples."""
    from mmpar.compat.ops import border_align, prroi_pool, roi_align

    rounds = 2 if quick else 9
    channels, count = (32, 16) if quick else (256, 128)
    gen = torch.Generator().manual_seed(3)
    image = (800, 1088)
    x = torch.randn(1, channels, image[0] // 16, image[1] // 16, generator=gen)
    x.requires_grad_()
    rois = _rois(count, (32.0, 512.0), image, seed=4)
    grad = torch.randn(count, channels, 7, 7, generator=gen)
    ours, ref, ratio = compare(
        lambda: prroi_pool(x, rois, 7, 1 / 16).backward(grad),
        lambda: roi_align(x, rois, 7, 1 / 16, 0, "avg").backward(grad),
        rounds,
    )
    case = f"7x7, {count} rois of 32-512 px, stride 16, {channels} ch, input gradient"
    rows: List[Row] = [
        ("prroi_pool fwd+bwd", case, "RoIAlign avg fwd+bwd, sampling_ratio 0", ours, ref, ratio, "")
    ]
    # BorderDet's head: one box per pixel of a stride-8 map, 11 points per border; the
    # reference reads as many bilinear samples: each box as a roi of (1, 11) bins over all
    # 4C channels, one sample a bin.
    side, pool = (8, 10) if quick else (32, 10)
    feat = torch.randn(1, 4 * (channels // 4), side, side, generator=gen).requires_grad_()
    centre = torch.rand(side * side, 2, generator=gen) * side
    half = torch.rand(side * side, 2, generator=gen) * 6
    boxes = torch.cat([centre - half, centre + half], 1)[None]
    box_rois = torch.cat([torch.zeros(side * side, 1), boxes[0]], 1)
    ours, ref, ratio = compare(
        lambda: border_align(feat, boxes, pool).sum().backward(),
        lambda: roi_align(feat, box_rois, (1, pool + 1), 1.0, 1, "avg", True).sum().backward(),
        rounds,
    )
    case = f"{side}x{side} map, one box a pixel, pool_size {pool}, {channels} ch"
    rows.append(
        (
            "border_align fwd+bwd",
            case,
            "RoIAlign avg fwd+bwd, as many samples",
            ours,
            ref,
            ratio,
            "",
        )
    )
    return rows


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _format(row: Row) -> str:
    op, case, reference, ours, ref, ratio, target = row
    return (
        f"| {op} | {case} | {reference} | {ours * 1e3:,.1f} | {ref * 1e3:,.1f} "
        f"| {ratio:.2f}x | {target} |"
    )


def run(quick: bool = False) -> str:
    title = "## Ops: mmcv.ops stand-ins against a kernel (issue 30)"
    if importlib.util.find_spec("torchvision") is None:
        return f"{title}\n\nSkipped: torchvision is not installed (the mmcv-ops extra).\n"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = roi_rows(quick) + pooling_rows(quick) + nms_rows(quick) + rotated_rows(quick)
        rows += attention_rows(quick)
    finally:
        torch.set_num_threads(threads)
    return render(title, rows, quick, "ops")


def render(title: str, rows: List[Row], quick: bool, section: str) -> str:
    """The section's Markdown: its settings once, then one table row per :data:`Row`."""
    import torchvision

    lines = [
        title,
        "",
        f"CPU, one thread: {_cpu()} ({os.cpu_count()} cores), torch {torch.__version__}, "
        f"torchvision {torchvision.__version__}; command: `python tools/benchmark.py {section}"
        f"{' --quick' if quick else ''}`. Each row: both warmed up, then alternated "
        f"over {2 if quick else '5-9'} rounds; median times, and the median of the "
        "per-round ratios.",
        "",
        "| op | case | reference | ours (ms) | reference (ms) | ours / reference | target |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    lines += [_format(row) for row in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
