"""The nms family's rows of the ops section (``tools/bench/ops.py``): a helper, not a section.

:func:`rows` times mmpar's op against a reference with the section's ``compare``
(alternating rounds, one thread, median of the per-round ratios). The boxes,
10,000 in a 1333 x 800 image (1,000 with ``quick``), scores uniform:

* ``sparse``: anywhere, 10-70 px: each box overlaps a few others;
* ``crowded``: 80% jittered copies of 1,000 objects of 8-64 px, 20% anywhere;
* ``clustered``: 80% jittered copies of 10 objects of 32-400 px (an RPN's
  proposals over a few objects: hundreds of boxes per object), 20% anywhere.

soft_nms (``iou_threshold=0.3``; mmcv's default ``linear``, and ``gaussian``) is timed
against ``torchvision.ops.nms`` at the same threshold: torchvision keeps a box and
drops its overlaps in one pass, soft_nms rescores them and goes on, so the ratio
grows with the boxes each box overlaps. ``gaussian`` rescores every overlap (IoU
above 0), whatever the threshold. batched_nms (80 classes, ``split_thr`` at its
default, so class by class as in mmcv) against ``torchvision.ops.batched_nms``
(class by class too, above 4,000 boxes on the CPU).

A soft_nms row with one score for every box times the kernel's order among equal
scores (its slots), which the other rows rarely reach; no target either.

One more row is what mmdet 2.x runs per image at test time with a ``soft_nms``
config: ``batched_nms`` of 1,000 crowded boxes of 80 classes (each class moved
apart, one soft_nms call), against torchvision's ``batched_nms`` of the same
boxes. Its target is left blank: the issue sets none, and it shows the cost of a
call of that size (rounds, pairs found), not of a kernel's inner loop.
"""

from __future__ import annotations

import math
from typing import Callable, List, Tuple

import torch

#: ``(op, case, reference, ours_s, reference_s, ratio, target)``, as ``ops.py``'s rows.
Row = Tuple[str, str, str, float, float, float, str]
#: ``compare(ours, reference, rounds) -> (ours_s, reference_s, ratio)``
Compare = Callable[[Callable[[], object], Callable[[], object], int], tuple]

WIDTH, HEIGHT = 1333, 800
KINDS = ("sparse", "crowded", "clustered")
#: soft_nms's cases: (method, box distribution).
SOFT_NMS_CASES = (
    ("linear", "sparse"),
    ("linear", "crowded"),
    ("linear", "clustered"),
    ("gaussian", "sparse"),
    ("gaussian", "clustered"),  # the costlier of crowded and clustered
)
SOFT_NMS_TARGET = "<= 3x"
BATCHED_NMS_TARGET = "<= 1.2x"


def boxes(kind: str, n: int = 10_000, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``n`` boxes ``(x1, y1, x2, y2)`` and scores of one of the distributions above."""
    if kind not in KINDS:
        raise ValueError(f"boxes: kind must be one of {KINDS}, got {kind!r}")
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


def rows(quick: bool, compare: Compare) -> List[Row]:
    """soft_nms's :data:`SOFT_NMS_CASES` and batched_nms, each against torchvision.

    Args:
        quick: 1,000 boxes and 2 rounds (a smoke run), else 10,000 boxes and 7 rounds.
        compare: The ops section's timing function.
    """
    import torchvision.ops as tv

    from mmpar.compat.ops.nms import batched_nms, soft_nms

    n, rounds = (1000, 2) if quick else (10_000, 7)
    count = f"{n // 1000}k boxes"
    out: List[Row] = []
    for method, kind in SOFT_NMS_CASES:
        b, s = boxes(kind, n)
        ours, ref, ratio = compare(
            lambda: soft_nms(b, s, 0.3, method=method), lambda: tv.nms(b, s, 0.3), rounds
        )
        case = f"{count}, {kind}, {method}, iou_threshold 0.3"
        out.append(("soft_nms", case, "torchvision nms", ours, ref, ratio, SOFT_NMS_TARGET))
    b, s = boxes("sparse", n)
    s = torch.full_like(s, 0.5)
    ours, ref, ratio = compare(lambda: soft_nms(b, s, 0.3), lambda: tv.nms(b, s, 0.3), rounds)
    case = f"{count}, sparse, linear, iou_threshold 0.3, one score for all"
    out.append(("soft_nms", case, "torchvision nms", ours, ref, ratio, ""))
    b, s = boxes("crowded", n)
    idxs = torch.randint(0, 80, (n,), generator=torch.Generator().manual_seed(1))
    cfg = dict(iou_threshold=0.5)
    ours, ref, ratio = compare(
        lambda: batched_nms(b, s, idxs, cfg), lambda: tv.batched_nms(b, s, idxs, 0.5), 3 * rounds
    )
    case = f"{count}, crowded, 80 classes"
    out.append(
        ("batched_nms", case, "torchvision batched_nms", ours, ref, ratio, BATCHED_NMS_TARGET)
    )
    n_image = 100 if quick else 1000
    b, s, idxs = b[:n_image], s[:n_image], idxs[:n_image]
    cfg = dict(type="soft_nms", iou_threshold=0.3)
    ours, ref, ratio = compare(
        lambda: batched_nms(b, s, idxs, cfg), lambda: tv.batched_nms(b, s, idxs, 0.3), 3 * rounds
    )
    case = f"{n_image} boxes, crowded, 80 classes, soft_nms linear (mmdet's test-time call)"
    out.append(("batched_nms", case, "torchvision batched_nms", ours, ref, ratio, ""))
    return out
