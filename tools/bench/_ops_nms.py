"""The nms family's rows of the ops section: mmpar's op against a reference, one thread.

Not a section of its own: ``tools/bench/ops.py`` calls :func:`rows`. Each row
times mmpar's op and its reference alternately over several rounds (so that the
noise of a shared machine hits both alike) and gives the median of the per-round
ratios, mmpar / reference.

The boxes, 10,000 in a 1333 x 800 image, scores uniform:

* ``sparse``: anywhere, 10-70 px: each box overlaps a few others;
* ``crowded``: 80% jittered copies of 1,000 objects of 8-64 px, 20% anywhere;
* ``clustered``: 80% jittered copies of 10 objects of 32-400 px (an RPN's
  proposals over a few objects: hundreds of boxes per object), 20% anywhere.

soft_nms (mmcv's default ``linear``, ``iou_threshold=0.3``) is timed against
``torchvision.ops.nms`` at the same threshold: torchvision keeps a box and drops
its overlaps in one pass, soft_nms rescores them and goes on, so the ratio grows
with the boxes each box overlaps. batched_nms (80 classes, ``split_thr`` at its
default, so class by class as in mmcv) against ``torchvision.ops.batched_nms``
(class by class too, above 4,000 boxes on the CPU).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable, List, Tuple

import torch

Row = Tuple[str, str, float, str]

WIDTH, HEIGHT = 1333, 800


def boxes(kind: str, n: int = 10_000, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``n`` boxes ``(x1, y1, x2, y2)`` and scores of one of the distributions above."""
    g = torch.Generator().manual_seed(seed)
    size = torch.tensor([WIDTH, HEIGHT])
    if kind == "sparse":
        xy = torch.rand(n, 2, generator=g) * size
        wh = torch.rand(n, 2, generator=g) * 60 + 10
        return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=g)
    objects, low, high = {"crowded": (1000, 8, 64), "clustered": (10, 32, 400)}[kind]
    extent = torch.empty(objects, 2).uniform_(math.log(low), math.log(high), generator=g).exp()
    centre = torch.rand(objects, 2, generator=g) * size
    near = int(n * 0.8)
    pick = torch.randint(0, objects, (near,), generator=g)
    ctr = centre[pick] + torch.randn(near, 2, generator=g) * extent[pick] * 0.15
    wh = extent[pick] * torch.exp(torch.randn(near, 2, generator=g) * 0.15)
    far = n - near
    ctr = torch.cat([ctr, torch.rand(far, 2, generator=g) * size])
    lo, hi = math.log(low / 2), math.log(high * 0.75)
    wh = torch.cat([wh, torch.empty(far, 2).uniform_(lo, hi, generator=g).exp()])
    return torch.cat([ctr - wh / 2, ctr + wh / 2], 1), torch.rand(n, generator=g)


def ratio(ours: Callable[[], object], ref: Callable[[], object], rounds: int) -> Tuple[float, str]:
    """Median of the per-round time ratios ours / ref, and the median times."""
    ours(), ref()  # warm up
    times: List[Tuple[float, float]] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ref()
        t1 = time.perf_counter()
        ours()
        t2 = time.perf_counter()
        times.append((t2 - t1, t1 - t0))
    median = statistics.median(a / b for a, b in times)
    mine = statistics.median(a for a, _ in times)
    theirs = statistics.median(b for _, b in times)
    return median, f"{mine * 1e3:.0f} ms against {theirs * 1e3:.0f} ms"


def rows(quick: bool) -> List[Row]:
    """``(op, reference, ratio, detail)`` for soft_nms and batched_nms, one thread."""
    import torchvision

    from mmpar.compat.ops.nms import batched_nms, soft_nms

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rounds = 3 if quick else 7
        out: List[Row] = []
        kinds = ("sparse", "crowded") if quick else ("sparse", "crowded", "clustered")
        for kind in kinds:
            b, s = boxes(kind)
            kept = torchvision.ops.nms(b, s, 0.3).numel()
            r, detail = ratio(
                lambda: soft_nms(b, s, 0.3), lambda: torchvision.ops.nms(b, s, 0.3), rounds
            )
            out.append(
                (
                    f"soft_nms, 10k boxes, {kind}",
                    "torchvision.ops.nms",
                    r,
                    f"{detail}; torchvision keeps {kept}",
                )
            )
        b, s = boxes("sparse")
        r, detail = ratio(
            lambda: soft_nms(b, s, 0.3, method="gaussian"),
            lambda: torchvision.ops.nms(b, s, 0.3),
            rounds,
        )
        out.append(("soft_nms gaussian, 10k boxes, sparse", "torchvision.ops.nms", r, detail))
        b, s = boxes("crowded")
        idxs = torch.randint(0, 80, (b.shape[0],), generator=torch.Generator().manual_seed(1))
        cfg = dict(iou_threshold=0.5)
        r, detail = ratio(
            lambda: batched_nms(b, s, idxs, cfg),
            lambda: torchvision.ops.batched_nms(b, s, idxs, 0.5),
            3 * rounds,
        )
        out.append(("batched_nms, 10k boxes, 80 classes", "torchvision.ops.batched_nms", r, detail))
        return out
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    for row in rows(quick=False):
        print(f"| `{row[0]}` | `{row[1]}` | {row[2]:.2f}x | {row[3]} |")
