"""mmdet3d 1.0.0rc6 on mmpar: its packages import after ``patch_mmcv()``, its numba code
compiles on today's numba, and its sparse convolutions are ``mmcv.ops``' (mmpar's).

mmdet3d asks for mmcv <= 1.7.0: CI installs it into ``MMCV_170_DIR`` (``python -m
mmpar.compat.install --mmcv 1.7.0 --target DIR mmdet3d``, see ``.ci/run``), and one
child process with that folder first on ``PYTHONPATH`` runs every check, one line
each. Without it these tests skip, except the one of the spconv mend, which runs on a
made-up ``mmdet3d`` package.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict

import pytest

from tests.compat._mmcv_env import (
    MMCV_170_DIR,
    REPO_ROOT,
    child_env,
    mmcv170_env,
    requires_mmcv170,
    requires_torchvision,
)

requires_mmdet3d = pytest.mark.skipif(
    not (MMCV_170_DIR / "mmdet3d" / "__init__.py").is_file(),
    reason=f"needs mmdet3d in {MMCV_170_DIR}: python -m mmpar.compat.install --mmcv 1.7.0 "
    "--target DIR mmdet3d (.ci/run does)",
)

MODULES = ("mmdet3d", "mmdet3d.core", "mmdet3d.models", "mmdet3d.apis", "mmdet3d.datasets")

CHILD = textwrap.dedent(
    """
    import importlib, sys, warnings
    warnings.simplefilter("ignore")
    from mmpar.compat import patch_mmcv

    patch_mmcv()

    def report(kind, name, fn):
        try:
            value = fn()
        except Exception as exc:
            line = str(exc).splitlines()[0] if str(exc) else ""
            print(kind, name, type(exc).__name__, line, sep="\\t", flush=True)
        else:
            print(kind, name, "ok", value, sep="\\t", flush=True)

    for name in sys.argv[1:]:
        report("IMPORT", name, lambda: importlib.import_module(name) and "")

    def spconv():
        from mmdet3d.ops.spconv import IS_SPCONV2_AVAILABLE
        return IS_SPCONV2_AVAILABLE

    def numba_iou():
        import numpy as np
        from mmdet3d.core.bbox import box_np_ops

        boxes = np.array([[0, 0, 2, 2], [1, 1, 3, 3]], dtype=np.float32)
        return box_np_ops.iou_jit(boxes, boxes)[0, 1]

    def mended():
        from mmdet3d.models.backbones.multi_backbone import MultiBackbone
        from mmdet3d.models.dense_heads.free_anchor3d_head import FreeAnchor3DHead
        from mmdet3d.models.roi_heads.bbox_heads.h3d_bbox_head import H3DBboxHead

        return (
            MultiBackbone.forward.__name__,
            H3DBboxHead.forward.__mmpar_mended__,
            FreeAnchor3DHead.loss.__mmpar_mended__,
        )

    report("CHECK", "spconv2", spconv)
    report("CHECK", "numba", numba_iou)
    report("CHECK", "mended", mended)
    """
)


@pytest.fixture(scope="module")
def child() -> Dict[str, list]:
    """(kind, name) -> [status, detail] of each line of one child's checks."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *MODULES],
        cwd=REPO_ROOT,
        env=mmcv170_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line.split("\t") for line in proc.stdout.splitlines()]
    found = {(p[0], p[1]): p[2:] for p in lines if len(p) == 4 and p[0] in ("IMPORT", "CHECK")}
    assert proc.returncode == 0 and found, proc.stderr[-3000:]
    return found


def outcome(child: Dict[str, list], kind: str, name: str) -> str:
    """The check's detail where it passed; else it fails, naming the error."""
    status, detail = child[(kind, name)]
    assert status == "ok", f"{name}: {status}: {detail}"
    return detail


@requires_mmdet3d
@requires_mmcv170
@requires_torchvision
@pytest.mark.parametrize("module", MODULES)
def test_mmdet3d_imports_after_patch_mmcv(child, module: str) -> None:
    outcome(child, "IMPORT", module)


@requires_mmdet3d
@requires_mmcv170
@requires_torchvision
def test_mmdet3d_builds_its_sparse_layers_from_mmcv_ops(child) -> None:
    assert outcome(child, "CHECK", "spconv2") == "False"


@requires_mmdet3d
@requires_mmcv170
@requires_torchvision
def test_mmdet3d_parts_that_stop_on_todays_python_and_torch_are_mended(child) -> None:
    """MultiBackbone.forward (Python >= 3.8), H3DBboxHead.forward and FreeAnchor3DHead.loss
    (today's autograd)."""
    assert outcome(child, "CHECK", "mended") == "('multi_backbone_forward', True, True)"


def test_tensors_iterate_by_index_only_inside_the_mended_free_anchor_loss() -> None:
    import torch

    from mmpar.compat import mmdet3d_fixes

    batch = torch.zeros(2, 3, requires_grad=True) * 1
    with mmdet3d_fixes._rows_by_index():
        for row in batch:
            row[0] = 5.0  # an unbind view refuses this write
    assert batch[:, 0].tolist() == [5.0, 5.0]
    with pytest.raises(RuntimeError, match="modified inplace"):
        for row in batch:
            row[1] = 1.0


@requires_mmdet3d
@requires_mmcv170
@requires_torchvision
def test_mmdet3d_numba_code_compiles(child) -> None:
    """box_np_ops.iou_jit (``numba.jit(nopython=True)``): two 2x2 boxes overlapping by 1."""
    assert float(outcome(child, "CHECK", "numba")) == pytest.approx(1 / 7)


FAKE_REGISTER = """
registered = []
def register_spconv2():
    registered.append(1)
    return True
"""

SPCONV_CHILD = """
import os, sys
from mmpar.compat import mmcv_ops
from mmpar.compat.mmdet3d_fixes import mend_mmdet3d

mmcv_ops._state["in_use"] = sys.argv[1]
mend_mmdet3d()
from mmdet3d.ops.spconv.overwrite_spconv import write_spconv2 as m
print(m.register_spconv2(), len(m.registered), m.register_spconv2.__name__)
"""


@pytest.mark.parametrize(
    "ops, env, expect",
    [("mmpar", "", "False 0"), ("mmcv", "", "True 1"), ("mmpar", "1", "True 1")],
)
def test_spconv2_is_chosen_only_where_mmpar_ops_do_not_serve(
    tmp_path: Path, ops: str, env: str, expect: str
) -> None:
    """A made-up mmdet3d whose ``register_spconv2`` would register spconv 2's layers."""
    folder = tmp_path / "mmdet3d" / "ops" / "spconv" / "overwrite_spconv"
    folder.mkdir(parents=True)
    for parent in [folder, *list(folder.parents)[:3]]:
        (parent / "__init__.py").write_text("")
    (folder / "write_spconv2.py").write_text(FAKE_REGISTER)
    base = child_env(MMPAR_MMDET3D_SPCONV=env)
    base["PYTHONPATH"] = f"{tmp_path}:{base['PYTHONPATH']}"
    proc = subprocess.run(
        [sys.executable, "-c", SPCONV_CHILD, ops],
        cwd=REPO_ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [*expect.split(), "register_spconv2"]
