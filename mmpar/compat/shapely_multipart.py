"""Iteration over shapely 2's multi-part geometries, as shapely 1.x allowed it.

shapely 2.0 stopped multi-part geometries (``MultiPolygon``, ``MultiLineString``,
``MultiPoint``, ``GeometryCollection``) from being iterated: their parts are
``geom.geoms``. The map code of the mmdet3d era iterates them directly: the copy of
nuScenes-devkit's ``map_api`` that UniAD's dataset uses draws its map masks with
``[poly.exterior.coords for poly in polygons]`` on a ``MultiPolygon``, so UniAD's
first training sample stops with "'MultiPolygon' object is not iterable".

:func:`mend_shapely_multipart` (called by ``patch_mmcv()``) gives their common base
class, on import of ``shapely.geometry.base``, an ``__iter__`` over ``geoms`` where it
has none. Only iteration comes back: no ``len()`` or indexing, so numpy still takes a
geometry as one object, as shapely 2's vectorised functions need.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Iterator

from mmpar.compat.import_hook import on_import

__all__ = ["iterate_parts", "mend_shapely_multipart"]


@functools.lru_cache(maxsize=None)  # hooked once, however often patch_mmcv() runs
def mend_shapely_multipart() -> None:
    """Make multi-part geometries iterable once ``shapely.geometry.base`` is imported."""
    on_import("shapely.geometry.base", iterate_parts)


def _parts(self: Any) -> Iterator[Any]:
    return iter(self.geoms)


def iterate_parts(base: ModuleType) -> bool:
    """Give ``base.BaseMultipartGeometry`` an ``__iter__`` over its parts where it lacks one.

    Args:
        base: the ``shapely.geometry.base`` module.

    Returns:
        Whether it was added now (False under shapely 1.x, or when done before).
    """
    cls = getattr(base, "BaseMultipartGeometry", None)
    if cls is None or hasattr(cls, "__iter__"):
        return False
    cls.__iter__ = _parts
    return True
