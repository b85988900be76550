"""mmpar.compat.shapely_multipart: multi-part geometries iterate as under shapely 1.x.

Checked in a fresh interpreter (the mend changes shapely's classes for the process):
shapely 2 refuses ``for part in multipolygon``, which UniAD's copy of nuScenes-devkit's
``map_api`` does when it draws map masks; after ``patch_mmcv()`` it yields ``geoms``,
while numpy still takes a geometry as one object.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.compat._mmcv_env import child_env, requires_mmcv

shapely = pytest.importorskip("shapely")

CHECK = """
import numpy as np
import shapely
from shapely.geometry import GeometryCollection, LineString, MultiLineString, MultiPolygon, box

squares = MultiPolygon([box(0, 0, 1, 1), box(2, 0, 3, 1)])
try:
    iter(squares)
except TypeError:
    before = "refused"
else:
    before = "iterates"
{mend}
assert [p.bounds for p in squares] == [p.bounds for p in squares.geoms]
lines = MultiLineString([[(0, 0), (1, 1)], [(2, 2), (3, 3)]])
assert [line.length for line in lines] == [line.length for line in lines.geoms]
mixed = GeometryCollection([box(0, 0, 1, 1), LineString([(0, 0), (1, 0)])])
assert [g.geom_type for g in mixed] == ["Polygon", "LineString"]
# numpy still holds each geometry as one object, and the vectorised functions work
held = np.array([squares, squares])
assert held.shape == (2,) and held.dtype == object
assert shapely.area(held).tolist() == [2.0, 2.0]
print(before)
"""

DIRECT = """
import shapely.geometry.base as base
from mmpar.compat.shapely_multipart import iterate_parts, mend_shapely_multipart
mend_shapely_multipart()
assert iterate_parts(base) is False  # done once
"""

PATCHED = """
from mmpar.compat import patch_mmcv
patch_mmcv()
"""


def _run(mend: str) -> str:
    code = "import mmpar.compat.shapely_multipart\n" + textwrap.dedent(CHECK).format(
        mend=textwrap.dedent(mend)
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_env()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_multipart_geometries_iterate_over_their_parts() -> None:
    before = _run(DIRECT)
    major = int(shapely.__version__.split(".")[0])
    assert before == ("refused" if major >= 2 else "iterates")


@requires_mmcv
def test_patch_mmcv_makes_them_iterate() -> None:
    _run(PATCHED)
