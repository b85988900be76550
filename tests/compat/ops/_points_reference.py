"""References for the tests of the point ops (ball_query, knn, three_nn, ...; tests only).

Plain loops written from mmcv 1.7.2's kernels, one query point at a time, in NumPy scalars
of the inputs' dtype (each operation rounded in it, as the kernels' arithmetic):

``sq_dist(center, point, dtype)``
    The kernels' ``(cx - x) * (cx - x) + (cy - y) * (cy - y) + (cz - z) * (cz - z)``.

``ref_ball_query``, ``ref_stack_ball_query``, ``ref_knn_heap``, ``ref_knn``, ``ref_three_nn``
    Each kernel's loop as written (``ref_knn_heap``: mmcv's heap, ``ref_knn``: mmpar's rule
    for equal distances, ascending index).

``MMCV_XYZ``, ``MMCV_CENTERS``
    The clouds and centres of mmcv's own ball_query, knn and group tests.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np
import torch

Cloud = Sequence[Sequence[float]]

MMCV_CENTERS = [
    [
        [-0.0740, 1.3147, -1.3625],
        [-2.2769, 2.7817, -0.2334],
        [-0.4003, 2.4666, -0.5116],
        [-0.0740, 1.3147, -1.3625],
        [-0.0740, 1.3147, -1.3625],
    ],
    [
        [-2.0289, 2.4952, -0.1708],
        [-2.0668, 6.0278, -0.4875],
        [0.4066, 1.4211, -0.2947],
        [-2.0289, 2.4952, -0.1708],
        [-2.0289, 2.4952, -0.1708],
    ],
]
MMCV_XYZ = [
    [
        [-0.0740, 1.3147, -1.3625],
        [0.5555, 1.0399, -1.3634],
        [-0.4003, 2.4666, -0.5116],
        [-0.5251, 2.4379, -0.8466],
        [-0.9691, 1.1418, -1.3733],
        [-0.2232, 0.9561, -1.3626],
        [-2.2769, 2.7817, -0.2334],
        [-0.2822, 1.3192, -1.3645],
        [0.1533, 1.5024, -1.0432],
        [0.4917, 1.1529, -1.3496],
    ],
    [
        [-2.0289, 2.4952, -0.1708],
        [-0.7188, 0.9956, -0.5096],
        [-2.0668, 6.0278, -0.4875],
        [-1.9304, 3.3092, 0.6610],
        [0.0949, 1.4332, 0.3140],
        [-1.2879, 2.0008, -0.7791],
        [-0.7252, 0.9611, -0.6371],
        [0.4066, 1.4211, -0.2947],
        [0.3220, 1.4447, 0.3548],
        [-0.9744, 2.3856, -1.2000],
    ],
]

_NUMPY = {
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
}


def scalar_type(dtype: torch.dtype) -> type:
    """The NumPy scalar type of ``dtype`` (float16, float32 or float64)."""
    return _NUMPY[dtype]


def sq_dist(center: Sequence[float], point: Sequence[float], dtype: torch.dtype) -> float:
    t = _NUMPY[dtype]
    with np.errstate(all="ignore"):
        total = None
        for a, b in zip(center, point):
            d = t(a) - t(b)
            total = d * d if total is None else total + d * d
    return float(total)


def _radius2(r: float) -> float:
    with np.errstate(all="ignore"):
        return float(np.float32(r) * np.float32(r))


def ref_ball_query(
    min_r: float, max_r: float, k: int, xyz: Cloud, centers: Cloud, dtype: torch.dtype
) -> List[List[int]]:
    """One cloud's ``(M, k)`` indices, as ``ball_query_forward_cuda_kernel``."""
    lo, hi = _radius2(min_r), _radius2(max_r)
    out = []
    for c in centers:
        idx, cnt = [0] * k, 0
        for i, p in enumerate(xyz):
            d2 = sq_dist(c, p, dtype)
            if d2 == 0 or (d2 >= lo and d2 < hi):
                if cnt == 0:
                    idx = [i] * k
                idx[cnt] = i
                cnt += 1
                if cnt >= k:
                    break
        out.append(idx)
    return out


def ref_stack_ball_query(
    max_r: float, k: int, xyz: Cloud, centers: Cloud, dtype: torch.dtype
) -> List[List[int]]:
    """One cloud's ``(M, k)`` indices, as ``stack_ball_query_forward_cuda_kernel``."""
    hi = _radius2(max_r)
    out = []
    for c in centers:
        idx, cnt = [0] * k, 0
        for i, p in enumerate(xyz):
            if sq_dist(c, p, dtype) < hi:
                if cnt == 0:
                    idx = [i] * k
                idx[cnt] = i
                cnt += 1
                if cnt >= k:
                    break
        if cnt == 0:
            idx[0] = -1
        out.append(idx)
    return out


def _reheap(dist: List[float], idx: List[int], k: int) -> None:
    root, child = 0, 1
    while child < k:
        if child + 1 < k and dist[child + 1] > dist[child]:
            child += 1
        if dist[root] > dist[child]:
            return
        dist[root], dist[child] = dist[child], dist[root]
        idx[root], idx[child] = idx[child], idx[root]
        root, child = child, 2 * child + 1


def ref_knn_heap(k: int, xyz: Cloud, center: Sequence[float], dtype: torch.dtype) -> List[int]:
    """One centre's ``k`` indices, as mmcv's ``knn_forward_cuda_kernel`` (its heap)."""
    dist, idx = [1e10] * k, [0] * k
    for i, p in enumerate(xyz):
        d2 = sq_dist(center, p, dtype)
        if d2 < dist[0]:
            dist[0], idx[0] = d2, i
            _reheap(dist, idx, k)
    for last in range(k - 1, 0, -1):
        dist[0], dist[last] = dist[last], dist[0]
        idx[0], idx[last] = idx[last], idx[0]
        _reheap(dist, idx, last)
    return idx


def ref_knn(k: int, xyz: Cloud, center: Sequence[float], dtype: torch.dtype) -> List[int]:
    """One centre's ``k`` indices, mmpar's rule: below 1e10, ascending, ties by index."""
    found = sorted((d2, i) for i, p in enumerate(xyz) if (d2 := sq_dist(center, p, dtype)) < 1e10)[
        :k
    ]
    return [i for _, i in found] + [0] * (k - len(found))


def ref_three_nn(
    xyz: Cloud, target: Sequence[float], dtype: torch.dtype
) -> Tuple[List[float], List[int]]:
    """One target point's squared distances and indices, as ``three_nn_forward_cuda_kernel``."""
    best, besti = [1e40] * 3, [0] * 3
    for i, p in enumerate(xyz):
        d = sq_dist(target, p, dtype)
        for slot in range(3):
            if d < best[slot]:
                best[slot + 1 :] = best[slot:2]
                besti[slot + 1 :] = besti[slot:2]
                best[slot], besti[slot] = d, i
                break
    return best, besti
