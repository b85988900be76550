"""The sampling ops' rows of the 3D ops section (``tools/bench/ops3d.py``).

:func:`rows` times mmpar's ``furthest_point_sample``, ``furthest_point_sample_with_dist``,
``gather_points``, ``assign_score_withk`` and ``Correlation`` with the section's
``compare`` (alternating rounds, one thread, median of the per-round ratios). mmcv-full
1.7.2 has CUDA kernels only for these ops, so each reference is plain torch doing the same
work, written directly:

* ``furthest_point_sample``: PointNet++'s sizes, ``B`` clouds of ``N`` points uniform in
  ``[-1, 1]^3``, ``B, N -> M = 8, 16384 -> 4096`` (``quick``: ``2, 4096 -> 1024``); the
  reference is the textbook step loop on ``(B, N, 3)``: the squared distances to the last
  sample summed over the last dim, ``torch.minimum`` into the kept distances, ``argmax``.
* ``furthest_point_sample_with_dist``: 3DSSD's F-FPS on a ``(B, N, N)`` matrix, ``B, N ->
  M = 4, 4096 -> 1024`` (``quick``: ``2, 1024 -> 256``); the reference reads the last
  sample's row by advanced indexing, then ``minimum`` and ``argmax``.
* ``gather_points``: ``(B, C, N)`` features at ``M`` sampled points, forward and forward +
  backward, against ``torch.gather`` on the expanded indices.
* ``assign_score_withk``: PAConv's score assignment (``B`` clouds of ``N`` points, ``npoint``
  centres of ``K`` neighbours, ``M`` weight matrices, ``out_dim`` channels), forward and
  forward + backward, against advanced indexing of the neighbours' features and a
  ``matmul`` with the scores, autograd for the backward.
* ``Correlation``: PWC-Net's (``max_displacement=4``) and FlowNetC's (``10``,
  ``dilation_patch=2``) correlation, forward and forward + backward, against the plain
  loop over the displacements: ``input2`` zero-padded, one shifted product summed over
  channels per displacement, autograd for the backward.
"""

from __future__ import annotations

from typing import Callable, List, Tuple

import ops3d_common as common
import torch
import torch.nn.functional as F
from torch import Tensor

#: ``(op, case, reference, ours_s, reference_s, ratio, target)``, as ``ops.py``'s rows.
Row = Tuple[str, str, str, float, float, float, str]
TARGET = "<= 3x"


def ref_fps(xyz: Tensor, m: int) -> Tensor:
    b, n, _ = xyz.shape
    kept = torch.full((b, n), 1e10)
    out = torch.zeros(b, m, dtype=torch.long)
    batch = torch.arange(b)
    for step in range(1, m):
        last = xyz[batch, out[:, step - 1]]
        kept = torch.minimum(kept, ((xyz - last[:, None]) ** 2).sum(-1))
        out[:, step] = kept.argmax(1)
    return out.int()


def ref_fps_dist(dist: Tensor, m: int) -> Tensor:
    b, n, _ = dist.shape
    kept = torch.full((b, n), 1e10)
    out = torch.zeros(b, m, dtype=torch.long)
    batch = torch.arange(b)
    for step in range(1, m):
        kept = torch.minimum(kept, dist[batch, out[:, step - 1]])
        out[:, step] = kept.argmax(1)
    return out.int()


def ref_gather(features: Tensor, idx: Tensor) -> Tensor:
    return features.gather(2, idx.long()[:, None].expand(-1, features.shape[1], -1))


def ref_correlation(x1: Tensor, x2: Tensor, md: int, dp: int) -> Tensor:
    p, r = 2 * md + 1, md * dp
    h, w = x1.shape[2:]
    padded = F.pad(x2, (r, r, r, r))
    out = [
        (x1 * padded[:, :, i * dp : i * dp + h, j * dp : j * dp + w]).sum(1)
        for i in range(p)
        for j in range(p)
    ]
    return torch.stack(out, 1).unflatten(1, (p, p))


def ref_assign_scores(scores: Tensor, points: Tensor, centers: Tensor, knn: Tensor) -> Tensor:
    batch = torch.arange(points.shape[0])[:, None, None]
    diff = points[batch, knn] - centers[batch, knn[..., :1]]  # (B, npoint, K, M, out_dim)
    return (scores[..., None, :] @ diff)[..., 0, :].permute(0, 3, 1, 2)


def _backward(fn: Callable[[], Tensor]) -> Callable[[], None]:
    return lambda: fn().sum().backward()


def _fps_rows(quick: bool, add: Callable) -> None:
    from mmpar.compat.ops import furthest_point_sample, furthest_point_sample_with_dist

    gen = torch.Generator().manual_seed(0)
    b, n, m = (2, 4096, 1024) if quick else (8, 16384, 4096)
    xyz = torch.rand(b, n, 3, generator=gen) * 2 - 1
    add("furthest_point_sample", f"B={b}, N={n} -> {m}", "step loop: sum, minimum, argmax",
        lambda: furthest_point_sample(xyz, m), lambda: ref_fps(xyz, m))  # fmt: skip
    b, n, m = (2, 1024, 256) if quick else (4, 4096, 1024)
    pts = torch.rand(b, n, 3, generator=gen) * 2 - 1
    dist = torch.cdist(pts, pts).square()
    add("furthest_point_sample_with_dist", f"B={b}, (N, N)={n}^2 -> {m}",
        "step loop: row, minimum, argmax",
        lambda: furthest_point_sample_with_dist(dist, m),
        lambda: ref_fps_dist(dist, m))  # fmt: skip


def _gather_rows(quick: bool, add: Callable) -> None:
    from mmpar.compat.ops import gather_points

    gen = torch.Generator().manual_seed(1)
    b, c, n, m = (2, 64, 4096, 1024) if quick else (8, 128, 16384, 4096)
    features = torch.randn(b, c, n, generator=gen, requires_grad=True)
    idx = torch.randint(0, n, (b, m), generator=gen, dtype=torch.int32)
    case = f"B={b}, C={c}, N={n} -> {m}"
    add("gather_points", case, "torch.gather",
        lambda: gather_points(features.detach(), idx),
        lambda: ref_gather(features.detach(), idx))  # fmt: skip
    add("gather_points fwd+bwd", case, "torch.gather, autograd",
        _backward(lambda: gather_points(features, idx)),
        _backward(lambda: ref_gather(features, idx)))  # fmt: skip


def _assign_rows(quick: bool, add: Callable) -> None:
    from mmpar.compat.ops import assign_score_withk

    gen = torch.Generator().manual_seed(3)
    b, n, npoint, k, m, o = (1, 1024, 256, 16, 8, 32) if quick else (2, 4096, 1024, 32, 8, 64)
    scores = torch.rand(b, npoint, k, m, generator=gen).requires_grad_()
    points = torch.randn(b, n, m, o, generator=gen, requires_grad=True)
    centers = torch.randn(b, n, m, o, generator=gen, requires_grad=True)
    knn = torch.randint(0, n, (b, npoint, k), generator=gen)
    case = f"B={b}, N={n}, npoint={npoint}, K={k}, M={m}, out_dim={o}"
    args = (scores, points, centers, knn)
    with torch.no_grad():
        add("assign_score_withk", case, "indexing + matmul",
            lambda: assign_score_withk(*args), lambda: ref_assign_scores(*args))  # fmt: skip
    add("assign_score_withk fwd+bwd", case, "indexing + matmul, autograd",
        _backward(lambda: assign_score_withk(*args)),
        _backward(lambda: ref_assign_scores(*args)))  # fmt: skip


def _correlation_rows(quick: bool, add: Callable) -> None:
    from mmpar.compat.ops import Correlation

    gen = torch.Generator().manual_seed(2)
    cases = [("PWC-Net", 4, 1, (4, 64, 48, 64)), ("FlowNetC", 10, 2, (2, 256, 48, 64))]
    for name, md, dp, shape in cases:
        if quick:
            shape = (1, shape[1] // 4, 24, 32)
        x1 = torch.randn(shape, generator=gen, requires_grad=True)
        x2 = torch.randn(shape, generator=gen, requires_grad=True)
        layer = Correlation(max_displacement=md, dilation_patch=dp)
        case = f"{name}: B={shape[0]}, C={shape[1]}, {shape[2]}x{shape[3]}, md {md}, dp {dp}"
        with torch.no_grad():
            add("Correlation", case, "loop over displacements",
                lambda: layer(x1, x2), lambda: ref_correlation(x1, x2, md, dp))  # fmt: skip
        add("Correlation fwd+bwd", case, "loop over displacements, autograd",
            _backward(lambda: layer(x1, x2)),
            _backward(lambda: ref_correlation(x1, x2, md, dp)))  # fmt: skip


def rows(quick: bool) -> List[Row]:
    """The rows, timed on one thread."""
    compare = common.ops().compare
    rounds = 2 if quick else 3
    out: List[Row] = []

    def add(op: str, case: str, ref_name: str, ours: Callable, ref: Callable) -> None:
        ours_s, ref_s, ratio = compare(ours, ref, rounds)
        out.append((op, case, ref_name, ours_s, ref_s, ratio, TARGET))

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _fps_rows(quick, add)
        _gather_rows(quick, add)
        _assign_rows(quick, add)
        _correlation_rows(quick, add)
    finally:
        torch.set_num_threads(threads)
    return out
