"""PAConv's score assignment entry points of ``mmcv._ext`` on
:func:`mmpar.compat.ops.assign_score_withk.assign_score_withk`.

mmcv-full 1.7.2's pybind signatures: ``assign_score_withk_forward(points, centers, scores,
knn_idx, output, B, N0, N1, M, K, O, aggregate)`` writes ``output`` ``(B, O, N1, K)``;
``assign_score_withk_backward(grad_out, points, centers, scores, knn_idx, grad_points,
grad_centers, grad_scores, B, N0, N1, M, K, O, aggregate)`` adds the gradients into
``grad_points``, ``grad_centers`` and ``grad_scores`` (the kernels' atomic adds; mmcv's
wrapper passes zeros). ``aggregate``: 0 sum, 1 avg, 2 max. The size arguments must match
the tensors (a ``ValueError`` here). NaN/inf: as mmpar's op. Differences from
mmcv-full: runs on any device.
"""

from __future__ import annotations

from typing import Callable, Dict

from torch import Tensor

from mmpar.compat.mmcv_ext.calls import check_sizes, grads_of, where, write
from mmpar.compat.ops.assign_score_withk import assign_score_withk

__all__ = ["ENTRY_POINTS", "assign_score_withk_backward", "assign_score_withk_forward"]

_AGGREGATES = {0: "sum", 1: "avg", 2: "max"}


def _aggregate(function: str, aggregate: int) -> str:
    if aggregate not in _AGGREGATES:
        raise ValueError(f"{where(function)}: aggregate must be 0, 1 or 2, got {aggregate!r}")
    return _AGGREGATES[aggregate]


def _check_assign(function: str, points: Tensor, scores: Tensor, sizes: tuple) -> None:
    big_b, n0, n1, m, k, o = sizes
    check_sizes(
        function,
        B=(big_b, points.shape[0]),
        N0=(n0, points.shape[1]),
        N1=(n1, scores.shape[1]),
        M=(m, points.shape[2]),
        K=(k, scores.shape[2]),
        O=(o, points.shape[3]),
    )


def assign_score_withk_forward(
    points: Tensor,
    centers: Tensor,
    scores: Tensor,
    knn_idx: Tensor,
    output: Tensor,
    B: int,  # noqa: N803
    N0: int,  # noqa: N803
    N1: int,  # noqa: N803
    M: int,  # noqa: N803
    K: int,  # noqa: N803
    O: int,  # noqa: E741, N803
    aggregate: int,
) -> None:
    """``output`` ``(B, O, N1, K)`` <- PAConv's score assignment, as
    :func:`mmpar.compat.ops.assign_score_withk.assign_score_withk` (points and centers
    ``(B, N0, M, O)``, scores ``(B, N1, K, M)``, knn_idx ``(B, N1, K)``)."""
    _check_assign("assign_score_withk_forward", points, scores, (B, N0, N1, M, K, O))
    agg = _aggregate("assign_score_withk_forward", aggregate)
    write(
        "assign_score_withk_forward",
        "output",
        output,
        assign_score_withk(scores, points, centers, knn_idx, agg).detach(),
    )


def assign_score_withk_backward(
    grad_out: Tensor,
    points: Tensor,
    centers: Tensor,
    scores: Tensor,
    knn_idx: Tensor,
    grad_points: Tensor,
    grad_centers: Tensor,
    grad_scores: Tensor,
    B: int,  # noqa: N803
    N0: int,  # noqa: N803
    N1: int,  # noqa: N803
    M: int,  # noqa: N803
    K: int,  # noqa: N803
    O: int,  # noqa: E741, N803
    aggregate: int,
) -> None:
    """``grad_points``, ``grad_centers`` and ``grad_scores`` += the gradients for
    ``grad_out`` ``(B, O, N1, K)``."""
    _check_assign("assign_score_withk_backward", points, scores, (B, N0, N1, M, K, O))
    agg = _aggregate("assign_score_withk_backward", aggregate)

    def assign(p: Tensor, c: Tensor, s: Tensor, idx: Tensor) -> Tensor:
        return assign_score_withk(s, p, c, idx, agg)

    grads = grads_of(assign, (points, centers, scores, knn_idx), grad_out, (0, 1, 2))
    for name, target, grad in zip(
        ("grad_points", "grad_centers", "grad_scores"),
        (grad_points, grad_centers, grad_scores),
        grads,
    ):
        write("assign_score_withk_backward", name, target, grad, add=True)


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "assign_score_withk_backward": assign_score_withk_backward,
    "assign_score_withk_forward": assign_score_withk_forward,
}
