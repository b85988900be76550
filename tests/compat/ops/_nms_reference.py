"""References for the tests of nms, soft_nms, batched_nms and nms_match (tests only).

Plain loops written from mmcv's kernels (``nms_cpu``, ``softnms_cpu``,
``nms_match_cpu``), with mmpar's rules for what the kernels leave open:

* equal scores: ``nms`` and ``nms_match`` visit them in input order; ``soft_nms``
  takes the one its array holds first after the kernel's swaps and refills;
* a NaN score ranks as ``-inf``; soft_nms counts a NaN IoU as 0 (weight 1).

API: ``MMCV_BOXES``, ``MMCV_SCORES`` (mmcv's own test case), ``ref_nms``,
``ref_soft_nms``, ``ref_nms_match``, ``random_boxes``.
"""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

import numpy as np
import torch

from tests.compat.ops._reference import box_overlap

# mmcv's own test case (tests/test_ops/test_nms.py) and the numbers its kernels give.
MMCV_BOXES = np.array(
    [[6.0, 3.0, 8.0, 7.0], [3.0, 6.0, 9.0, 11.0], [3.0, 7.0, 10.0, 12.0], [1.0, 4.0, 13.0, 7.0]],
    dtype=np.float32,
)
MMCV_SCORES = np.array([0.6, 0.9, 0.7, 0.2], dtype=np.float32)


def rank(score: float) -> float:
    """The value a score ranks by: NaN as ``-inf``."""
    return -math.inf if math.isnan(score) else score


def ref_nms(boxes: Sequence[Sequence[float]], scores: Sequence[float], thr: float) -> List[int]:
    """Greedy NMS; equal scores in input order (Python's sort is stable)."""
    order = sorted(range(len(scores)), key=lambda i: -rank(scores[i]))
    keep: List[int] = []
    for i in order:
        if all(not box_overlap(boxes[k], boxes[i]) > thr for k in keep):
            keep.append(i)
    return keep


def ref_soft_nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    thr: float,
    sigma: float,
    min_score: float,
    method: str,
    offset: int = 0,
) -> Tuple[List[int], List[float]]:
    """mmcv's softnms_cpu, one box at a time, in float32, with its swaps and refills."""
    f = np.float32
    x = [[f(v) for v in row] for row in boxes]
    sc = [f(v) for v in scores]
    ar = [(b[2] - b[0] + f(offset)) * (b[3] - b[1] + f(offset)) for b in x]
    ind = list(range(len(x)))
    n, i = len(x), 0
    taken: List[float] = []
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        while i < n:
            best = i
            for p in range(i + 1, n):
                if rank(sc[best]) < rank(sc[p]):
                    best = p
            for arr in (x, sc, ar, ind):
                arr[i], arr[best] = arr[best], arr[i]
            taken.append(float(sc[i]))
            p = i + 1
            while p < n:
                w = max(f(0), min(x[i][2], x[p][2]) - max(x[i][0], x[p][0]) + f(offset))
                h = max(f(0), min(x[i][3], x[p][3]) - max(x[i][1], x[p][1]) + f(offset))
                inter = w * h
                ovr = inter / (ar[i] + ar[p] - inter)
                weight = f(1)
                if method == "naive" and ovr >= f(thr):
                    weight = f(0)
                elif method == "linear" and ovr >= f(thr):
                    weight = f(1) - ovr
                elif method == "gaussian" and not math.isnan(ovr):
                    weight = f(math.exp(-float(ovr * ovr) / sigma))
                sc[p] = sc[p] * weight
                if sc[p] < f(min_score):
                    for arr in (x, sc, ar, ind):
                        arr[p] = arr[n - 1]
                    n -= 1
                    p -= 1
                p += 1
            i += 1
    return ind[:n], taken[:n]


def ref_nms_match(dets: Sequence[Sequence[float]], thr: float) -> List[List[int]]:
    """nms_match_cpu's groups: each kept box, then those it suppresses (IoU >= thr)."""
    order = sorted(range(len(dets)), key=lambda i: -rank(dets[i][4]))
    suppressed = set()
    groups = []
    for pos, i in enumerate(order):
        if i in suppressed:
            continue
        group = [i]
        for j in order[pos + 1 :]:
            if j not in suppressed and box_overlap(dets[i], dets[j]) >= thr:
                suppressed.add(j)
                group.append(j)
        groups.append(group)
    return groups


def random_boxes(n: int, seed: int, size: float = 50.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``n`` clustered boxes (many overlaps) and distinct scores."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.rand(max(n // 4, 1), 2, generator=g) * size
    xy = centers[torch.randint(0, centers.shape[0], (n,), generator=g)]
    xy = xy + torch.randn(n, 2, generator=g) * 2
    wh = torch.rand(n, 2, generator=g) * 10 + 2
    boxes = torch.cat([xy, xy + wh], 1)
    scores = torch.rand(n, generator=g)
    return boxes, scores
