"""The point neighbourhood ops' rows of the 3D ops section (``tools/bench/ops3d.py``).

:func:`rows` times mmpar's ``ball_query``, ``knn``, ``three_nn``, ``three_interpolate``
and ``grouping_operation`` with the section's ``compare`` (alternating rounds, one thread,
median of the per-round ratios) at PointNet++'s sizes: ``B`` clouds of ``N`` points
uniform in ``[-1, 1]^3``, ``M`` centres (the first ``M`` points, as furthest point sampling
would give points of the cloud); ``B, N, M = 8, 16384, 4096`` (``quick``: ``2, 4096,
1024``). mmcv-full has no CPU kernel for these ops, so each reference is plain torch doing
the same work by brute force, by the same blocks of 256 centres where a ``(M, N)`` matrix
is involved:

* ``ball_query``: ``torch.cdist``, the radius test, the first ``nsample`` indices by a
  ``topk`` of the in-ball indices;
* ``knn`` and ``three_nn``: ``torch.cdist`` and ``topk``;
* ``three_interpolate``: a ``gather`` of the three features and a weighted ``sum``;
* ``grouping_operation``: advanced indexing of the ``(B * N, C)`` features, made
  ``(B, C, npoint, nsample)`` contiguous as mmcv's output.
"""

from __future__ import annotations

from typing import Callable, List, Tuple

import ops3d_common as common
import torch
from torch import Tensor

#: ``(op, case, reference, ours_s, reference_s, ratio, target)``, as ``ops.py``'s rows.
Row = Tuple[str, str, str, float, float, float, str]
TARGET = "<= 3x"
BLOCK = 256  # centres per block of the references' (B, block, N) distances


def _blocks(centers: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    return torch.cat([fn(centers[:, s : s + BLOCK]) for s in range(0, centers.shape[1], BLOCK)], 1)


def ref_ball_query(radius: float, nsample: int, xyz: Tensor, centers: Tensor) -> Tensor:
    n = xyz.shape[1]
    order = torch.arange(n, dtype=torch.int32)

    def block(c: Tensor) -> Tensor:
        inside = torch.cdist(c, xyz) < radius
        first = torch.where(inside, order, n).topk(nsample, -1, largest=False).values
        return torch.where(first < n, first, first[..., :1]) % n

    return _blocks(centers, block)


def ref_knn(k: int, xyz: Tensor, centers: Tensor) -> Tensor:
    return _blocks(centers, lambda c: torch.cdist(c, xyz).topk(k, -1, largest=False).indices)


def ref_three_nn(target: Tensor, source: Tensor) -> Tuple[Tensor, Tensor]:
    def block(t: Tensor) -> Tensor:
        dist, idx = torch.cdist(t, source).topk(3, -1, largest=False)
        return torch.cat([dist, idx.to(dist.dtype)], -1)

    found = _blocks(target, block)
    return found[..., :3], found[..., 3:].long()


def ref_three_interpolate(features: Tensor, idx: Tensor, weight: Tensor) -> Tensor:
    b, c, _ = features.shape
    n = idx.shape[1]
    picked = features.gather(2, idx.reshape(b, 1, n * 3).expand(b, c, n * 3).long())
    return (picked.view(b, c, n, 3) * weight[:, None]).sum(-1)


def ref_group(features: Tensor, idx: Tensor) -> Tensor:
    b, c, n = features.shape
    rows = idx.long() + torch.arange(b)[:, None, None] * n
    return features.transpose(1, 2).reshape(b * n, c)[rows].permute(0, 3, 1, 2).contiguous()


def _backward(fn: Callable[[], Tensor]) -> Callable[[], None]:
    return lambda: fn().sum().backward()


def rows(quick: bool) -> List[Row]:
    """The rows, timed on one thread."""
    from mmpar.compat.ops import ball_query, grouping_operation, knn, three_interpolate, three_nn

    compare = common.ops().compare
    b, n, m = (2, 4096, 1024) if quick else (8, 16384, 4096)
    rounds = 2 if quick else 3
    gen = torch.Generator().manual_seed(0)
    xyz = torch.rand(b, n, 3, generator=gen) * 2 - 1
    centers = xyz[:, :m].contiguous()
    cloud = f"B={b}, N={n}, M={m}"
    out: List[Row] = []

    def add(op: str, case: str, ref_name: str, ours: Callable, ref: Callable) -> None:
        ours_s, ref_s, ratio = compare(ours, ref, rounds)
        out.append(
            (op, f"{cloud}, {case}" if case else cloud, ref_name, ours_s, ref_s, ratio, TARGET)
        )

    with torch.no_grad():
        for radius, nsample in ((0.2, 16), (0.4, 32)):
            add(
                "ball_query",
                f"radius {radius}, nsample {nsample}",
                "cdist + radius test + topk",
                lambda: ball_query(0, radius, nsample, xyz, centers),
                lambda: ref_ball_query(radius, nsample, xyz, centers),
            )
        add("knn", "k 16", "cdist + topk", lambda: knn(16, xyz, centers),
            lambda: ref_knn(16, xyz, centers))  # fmt: skip
        add("three_nn", f"{n} targets, {m} sources", "cdist + topk",
            lambda: three_nn(xyz, centers), lambda: ref_three_nn(xyz, centers))  # fmt: skip
    channels = 64 if quick else 128
    features = torch.randn(b, channels, m, generator=gen, requires_grad=True)
    dist, idx = three_nn(xyz, centers)
    weight = 1 / (dist + 1e-8)
    weight = weight / weight.sum(-1, keepdim=True)
    case = f"C={channels}, {m} -> {n} points"
    add("three_interpolate", case, "gather + weighted sum",
        lambda: three_interpolate(features.detach(), idx, weight),
        lambda: ref_three_interpolate(features.detach(), idx, weight))  # fmt: skip
    add("three_interpolate fwd+bwd", case, "gather + weighted sum, autograd",
        _backward(lambda: three_interpolate(features, idx, weight)),
        _backward(lambda: ref_three_interpolate(features, idx, weight)))  # fmt: skip
    channels = 32 if quick else 64
    group_features = torch.randn(b, channels, n, generator=gen, requires_grad=True)
    with torch.no_grad():
        groups = ball_query(0, 0.4, 32, xyz, centers)
    case = f"C={channels}, {m} groups of 32"
    add("grouping_operation", case, "advanced indexing",
        lambda: grouping_operation(group_features.detach(), groups),
        lambda: ref_group(group_features.detach(), groups))  # fmt: skip
    add("grouping_operation fwd+bwd", case, "advanced indexing, autograd",
        _backward(lambda: grouping_operation(group_features, groups)),
        _backward(lambda: ref_group(group_features, groups)))  # fmt: skip
    return out
