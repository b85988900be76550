"""Point-cloud neighbourhood machinery shared by mmpar's point ops.

mmcv 1.7.2's point kernels (``ball_query``, ``knn``, ``three_nn``, ``furthest_point_sample``
...) loop over the points of a cloud for every query point and compare a squared distance
computed in the inputs' dtype as ``dx*dx + dy*dy + dz*dz``. This package holds what their
stand-ins share:

``pairwise_sq_dist(centers, points) -> Tensor``
    ``(B, M, N)`` squared distances, each operation rounded in the inputs' dtype in the
    kernels' order (differences, squares, then the sum left to right), so that a test
    against a radius decides as mmcv's kernel does. Differentiable.

``sq_dist_chunks(centers, points, max_elements) -> iterator of (start, stop, Tensor)``
    The same by slices of the centres, each ``(B, stop - start, N)`` of at most about
    ``max_elements`` elements (``search_chunk(device)`` for a search), without autograd:
    what bounds the memory of an ``(M, N)`` search.

``float32_square(r) -> float``, ``at_least(value, dtype) -> float``
    A radius squared as a kernel's ``float r * r``, and the threshold that makes a
    comparison in a tensor's own dtype decide as the kernel's comparison with a float.

``first_true(mask, k) -> (index, count)``
    The first ``k`` True positions of each row, in index order (a radius search's "first
    points found"), and how many each row has.

``k_smallest(values, k, limit) -> (values, index)``
    The ``k`` smallest entries of each row below ``limit``, ascending, equal values by
    ascending index; missing slots ``limit`` and index 0 (the kernels' start values).

``uniform_resample(idx) -> (idx, unique_cnt)`` (``points.resample``)
    ``QueryAndGroup``'s ``uniform_sample``: each group's distinct points, then uniform draws.

``mmpar.compat.ops.points.checks`` holds their argument checks (one-line errors naming the
op and the parameter).
"""

from mmpar.compat.ops.points.distance import (
    CHUNK_ELEMENTS,
    at_least,
    float32_square,
    pairwise_sq_dist,
    search_chunk,
    sq_dist_chunks,
)
from mmpar.compat.ops.points.ranking import first_true, k_smallest

__all__ = [
    "CHUNK_ELEMENTS",
    "at_least",
    "first_true",
    "float32_square",
    "k_smallest",
    "pairwise_sq_dist",
    "search_chunk",
    "sq_dist_chunks",
]
