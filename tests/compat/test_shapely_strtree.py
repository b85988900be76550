"""mmpar.compat.shapely_strtree: a map evaluation written for shapely 1.x's STRtree.query.

A small ``projects`` package written by the test stands in for MapTR's and VAD's
``map_utils/tpfp_chamfer.py`` with the calling pattern the mend is for: it builds an
``STRtree`` of buffered predicted lines, queries it with each ground-truth line and
looks each answer up by ``id``. Run in a fresh interpreter (patching hooks imports).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.compat._mmcv_env import child_env, requires_mmcv

shapely = pytest.importorskip("shapely")

TPFP = """\
from shapely.geometry import LineString
from shapely.strtree import STRtree


def overlapping_pairs(pred_lines, gt_lines):
    preds = [LineString(p).buffer(0.5) for p in pred_lines]
    tree = STRtree(preds)
    index_by_id = dict((id(p), i) for i, p in enumerate(preds))
    pairs = []
    for j, gt in enumerate(gt_lines):
        line = LineString(gt).buffer(0.5)
        for o in tree.query(line):
            if o.intersects(line):
                pairs.append((index_by_id[id(o)], j))
    return sorted(pairs)
"""

CHECK = """
import shapely
from shapely.geometry import box
from shapely.strtree import STRtree
{prelude}
from projects.mmdet3d_plugin.datasets.map_utils.tpfp_chamfer import overlapping_pairs

preds = [[(0, 0), (10, 0)], [(0, 5), (10, 5)], [(0, 20), (10, 20)]]
gts = [[(0, 0.2), (10, 0.2)], [(0, 19.8), (10, 19.8)], [(50, 50), (60, 50)]]
try:
    print(overlapping_pairs(preds, gts))
except AttributeError as err:
    print("refused:", err)
# shapely's own STRtree is unchanged: indices, as shapely 2 code expects
tree = STRtree([box(0, 0, 1, 1), box(2, 2, 3, 3)])
print(tree.query(box(0.5, 0.5, 0.6, 0.6)).tolist())
"""

PATCHED = """
from mmpar.compat import patch_mmcv
patch_mmcv()
"""


def _run(tmp_path: Path, prelude: str) -> list:
    module = tmp_path / "projects" / "mmdet3d_plugin" / "datasets" / "map_utils"
    module.mkdir(parents=True)
    for folder in [module, *module.parents][:4]:
        (folder / "__init__.py").write_text("")
    (module / "tpfp_chamfer.py").write_text(TPFP)
    env = child_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    code = textwrap.dedent(CHECK).format(prelude=textwrap.dedent(prelude))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


@requires_mmcv
def test_map_evaluation_gets_geometries_from_its_tree(tmp_path: Path) -> None:
    pairs, own = _run(tmp_path, PATCHED)
    assert pairs == "[(0, 0), (2, 1)]"
    assert own == "[0]"


def test_shapely_2_alone_gives_indices(tmp_path: Path) -> None:
    if int(shapely.__version__.split(".")[0]) < 2:
        pytest.skip("shapely 1.x returns geometries itself")
    refused, own = _run(tmp_path, "")
    assert refused.startswith("refused:") and "intersects" in refused
    assert own == "[0]"
