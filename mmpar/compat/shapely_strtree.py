"""shapely 1.x's ``STRtree.query`` (the geometries, not their indices) for map evaluations.

shapely 2.0's ``STRtree.query(geometry)`` returns the indices of the tree's
geometries that the query's envelope meets; shapely 1.x returned the geometries
themselves. The vector-map evaluation that MapTR wrote and VAD keeps
(``projects/mmdet3d_plugin/datasets/map_utils/tpfp_chamfer.py``) calls
``o.intersects(line) for o in tree.query(line)`` and looks ``o`` up by ``id``, so
on today's shapely its chamfer AP stops with "'numpy.int64' object has no attribute
'intersects'".

:func:`mend_shapely_strtree` (called by ``patch_mmcv()``) gives each module of
:data:`GEOMETRY_QUERY_MODULES`, on its import, an ``STRtree`` whose ``query`` of one
geometry returns the tree's own geometry objects (the very objects it was built from,
so lookups by ``id`` hold). shapely's own ``STRtree`` is not changed, and nothing is
changed under shapely 1.x.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from mmpar.compat.import_hook import on_import

__all__ = ["GEOMETRY_QUERY_MODULES", "geometry_query_tree", "mend_shapely_strtree"]

#: Modules written for shapely 1.x's ``STRtree.query``, which bind ``STRtree`` by name.
GEOMETRY_QUERY_MODULES = ("projects.mmdet3d_plugin.datasets.map_utils.tpfp_chamfer",)

_tree: list = []


@functools.lru_cache(maxsize=None)  # hooked once, however often patch_mmcv() runs
def mend_shapely_strtree() -> None:
    """Give the modules of :data:`GEOMETRY_QUERY_MODULES` a geometry-returning STRtree."""
    for name in GEOMETRY_QUERY_MODULES:
        on_import(name, _mend_module)


def geometry_query_tree() -> Any:
    """A subclass of shapely 2's ``STRtree`` whose ``query`` of one geometry gives geometries.

    Returns:
        The class, or shapely's own ``STRtree`` under shapely 1.x (which already does).
    """
    if _tree:
        return _tree[0]
    import numpy as np
    import shapely
    from shapely.strtree import STRtree

    if int(shapely.__version__.split(".")[0]) < 2:
        _tree.append(STRtree)
        return STRtree

    class GeometryQuerySTRtree(STRtree):
        """``query(geometry)`` returns the (K,) array of the tree's geometries it meets."""

        def query(self, geometry: Any, predicate: Any = None, distance: Any = None) -> Any:
            found = super().query(geometry, predicate=predicate, distance=distance)
            if np.ndim(found) != 1:  # an array of queries keeps shapely 2's (2, K) pairs
                return found
            return self.geometries.take(found)

    _tree.append(GeometryQuerySTRtree)
    return GeometryQuerySTRtree


def _mend_module(module: ModuleType) -> None:
    if "STRtree" in vars(module):
        module.STRtree = geometry_query_tree()
