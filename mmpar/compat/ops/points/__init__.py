"""Point-cloud neighbourhood machinery shared by mmpar's point ops (tests only import faces).

mmcv 1.7.2's point kernels (``ball_query``, ``knn``, ``three_nn``, ``furthest_point_sample``
...) each loop over the points of a cloud for every query point and compare a squared
distance computed in the inputs' dtype as ``dx*dx + dy*dy + dz*dz``. This package holds
what their stand-ins share:

``pairwise_sq_dist(centers, points) -> Tensor``
    ``(B, M, N)`` squared distances, each operation rounded in the inputs' dtype in the
    kernels' order (differences, squares, then the sum left to right), so that a test
    against a radius decides as mmcv's kernel does.

``sq_dist_chunks(centers, points, max_elements) -> iterator of (start, stop, Tensor)``
    The same by slices of the centres, each ``(B, stop - start, N)`` of at most about
    ``max_elements`` elements: what bounds the memory of an ``(M, N)`` search.
"""

from mmpar.compat.ops.points.distance import CHUNK_ELEMENTS, pairwise_sq_dist, sq_dist_chunks

__all__ = ["CHUNK_ELEMENTS", "pairwise_sq_dist", "sq_dist_chunks"]
