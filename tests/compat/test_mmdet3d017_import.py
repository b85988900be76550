"""mmdet3d 0.17.1 on mmpar: it imports after ``patch_mmcv()`` with mmcv 1.4.0, mmdet 2.14.0
and mmseg 0.14.1, its compiled modules are mmpar's stand-ins, its sparse convolutions
are its own, and its ops run on the CPU.

mmdet3d 0.17.1 asks for mmcv <= 1.4.0: ``python -m mmpar.compat.install --target DIR
mmdet3d==0.17.1`` installs it into a folder of its own (``MMCV_140_DIR``,
``$MMPAR_MMCV_140_DIR``, default ``~/.cache/mmpar/mmcv-1.4.0``). One child process with
that folder first on ``PYTHONPATH`` runs every check, one line each. Without it these
tests skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Dict

import pytest

from tests.compat._mmcv_env import REPO_ROOT, child_env

#: The folder holding mmcv 1.4.0 and mmdet3d 0.17.1 (and what they need beyond the main env).
MMCV_140_DIR = Path(
    os.environ.get("MMPAR_MMCV_140_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mmpar" / "mmcv-1.4.0"
)


def _installed() -> bool:
    found = metadata.distributions(name="mmdet3d", path=[str(MMCV_140_DIR)])
    return any(dist.version == "0.17.1" for dist in found)


pytestmark = pytest.mark.skipif(
    not _installed(),
    reason=f"needs mmdet3d 0.17.1 in {MMCV_140_DIR} ($MMPAR_MMCV_140_DIR): python -m "
    "mmpar.compat.install --target DIR mmdet3d==0.17.1 installs it",
)

MODULES = (
    "mmdet3d",
    "mmdet3d.ops",
    "mmdet3d.core",
    "mmdet3d.models",
    "mmdet3d.datasets",
    "mmdet3d.apis",
)

CHILD = textwrap.dedent(
    """
    import importlib, sys, warnings
    warnings.simplefilter("ignore")
    from mmpar.compat import patch_mmcv

    patch_mmcv()
    import torch

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

    def versions():
        import mmcv, mmdet, mmseg, mmdet3d
        found = (mmcv, mmdet, mmseg, mmdet3d)
        return " ".join(m.__version__ for m in found)

    def stand_ins():
        from mmdet3d.ops.spconv import sparse_conv_ext
        from mmdet3d.ops.iou3d import iou3d_cuda
        return sum(bool(getattr(m, "__mmpar_ops__", False)) for m in (sparse_conv_ext, iou3d_cuda))

    def registered():
        from mmcv.cnn.bricks.registry import CONV_LAYERS
        return CONV_LAYERS.get("SubMConv3d").__module__

    def numba_errors():
        from numba.errors import NumbaPerformanceWarning
        return NumbaPerformanceWarning.__name__

    def pointnet():
        from mmdet3d.models import build_backbone
        torch.manual_seed(0)
        net = build_backbone(dict(
            type="PointNet2SASSG", in_channels=4, num_points=(32, 16, 8, 4),
            radius=(0.2, 0.4, 0.8, 1.2), num_samples=(8, 8, 8, 8),
            sa_channels=((8, 8, 16), (16, 16, 16), (16, 16, 16), (16, 16, 16)),
            fp_channels=((16, 16), (16, 16))))
        out = net(torch.rand(2, 100, 4))
        out["fp_features"][-1].sum().backward()
        return tuple(out["fp_features"][-1].shape)

    def sparse_encoder():
        from mmdet3d.models import build_middle_encoder
        enc = build_middle_encoder(dict(
            type="SparseEncoder", in_channels=4, sparse_shape=[41, 64, 64],
            order=("conv", "norm", "act")))
        coors = torch.unique(torch.randint(0, 40, (200, 3)), dim=0).int()
        coors = torch.cat([coors.new_zeros(len(coors), 1), coors], 1)
        out = enc(torch.rand(len(coors), 4), coors, 1)
        out.sum().backward()
        return tuple(out.shape)

    def nms():
        from mmdet3d.core.post_processing import box3d_multiclass_nms
        from mmdet3d.ops.iou3d.iou3d_utils import nms_gpu
        boxes = torch.tensor([[0., 0, 2, 2, 0], [0.1, 0, 2.1, 2, 0], [5, 5, 6, 6, 0.3]])
        return nms_gpu(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist()

    def points_in_boxes():
        from mmdet3d.ops import points_in_boxes_gpu, points_in_boxes_batch
        boxes = torch.tensor([[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.3]]])
        pts = torch.tensor([[[1, 2, 3.3], [6, 7, 8]]])
        return points_in_boxes_gpu(pts, boxes).tolist(), points_in_boxes_batch(pts, boxes).tolist()

    def box_overlaps():
        from mmdet3d.core.bbox import LiDARInstance3DBoxes
        a = LiDARInstance3DBoxes(torch.tensor([[0.0, 0, 0, 2, 2, 2, 0], [5, 5, 0, 1, 1, 1, 0]]))
        b = LiDARInstance3DBoxes(torch.tensor([[1.0, 0, 0, 2, 2, 2, 0]]))
        return [round(v, 4) for v in LiDARInstance3DBoxes.overlaps(a, b).flatten().tolist()]

    def naive_sync_bn():
        from mmcv.cnn import build_norm_layer
        norm = build_norm_layer(dict(type="naiveSyncBN2d"), 4)[1]
        return tuple(norm(torch.rand(2, 4, 3, 3)).shape)

    def pyramids():
        from mmdet.models import build_neck
        from mmseg.models import build_head
        xs = [torch.rand(2, 8, 16, 16, requires_grad=True), torch.rand(2, 16, 8, 8)]
        fpn = build_neck(dict(type="FPN", in_channels=[8, 16], out_channels=8, num_outs=3,
                              act_cfg=dict(type="ReLU")))
        sum(o.sum() for o in fpn(xs)).backward()
        head = build_head(dict(type="UPerHead", in_channels=[8, 16], in_index=[0, 1],
                               pool_scales=(1, 2), channels=8, num_classes=3))
        head(xs).sum().backward()
        return tuple(xs[0].grad.shape)

    def semantic_head():
        from mmdet.models import build_head as build_mmdet_head
        feats = [torch.rand(2, 8, 16, 16, requires_grad=True), torch.rand(2, 8, 8, 8)]
        head = build_mmdet_head(dict(type="FusedSemanticHead", num_ins=2, fusion_level=1,
                                     num_convs=1, in_channels=8, conv_out_channels=8,
                                     num_classes=3))
        pred, embedding = head(feats)
        (pred.sum() + embedding.sum()).backward()
        return tuple(pred.shape), tuple(feats[0].grad.shape)

    for name, fn in [("pyramids", pyramids), ("semantic_head", semantic_head),
                     ("box_overlaps", box_overlaps),
                     ("naive_sync_bn", naive_sync_bn),
                     ("versions", versions), ("stand_ins", stand_ins), ("registered", registered),
                     ("numba_errors", numba_errors), ("pointnet", pointnet),
                     ("sparse_encoder", sparse_encoder), ("nms", nms),
                     ("points_in_boxes", points_in_boxes)]:
        report("CHECK", name, fn)
    """
)


@pytest.fixture(scope="module")
def child() -> Dict[str, Dict[str, str]]:
    env = child_env()
    root, *rest = env["PYTHONPATH"].split(os.pathsep)
    env["PYTHONPATH"] = os.pathsep.join([root, str(MMCV_140_DIR), *rest])
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *MODULES],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    found: Dict[str, Dict[str, str]] = {"IMPORT": {}, "CHECK": {}}
    for line in proc.stdout.splitlines():
        kind, name, status, *rest = line.split("\t") + [""]
        if kind in found:
            found[kind][name] = status if status != "ok" else f"ok {rest[0]}".strip()
    assert proc.returncode == 0 or found["CHECK"], proc.stderr[-3000:]
    return found


@pytest.mark.parametrize("module", MODULES)
def test_imports(child, module) -> None:
    assert child["IMPORT"].get(module) == "ok", child["IMPORT"]


@pytest.mark.parametrize(
    "check, expected",
    [
        ("versions", "ok 1.4.0 2.14.0 0.14.1 0.17.1"),
        ("stand_ins", "ok 2"),
        ("registered", "ok mmdet3d.ops.spconv.conv"),
        ("numba_errors", "ok NumbaPerformanceWarning"),
        ("pointnet", "ok (2, 16, 16)"),
        ("sparse_encoder", "ok (1, 256, 8, 8)"),
        ("nms", "ok [0, 2]"),
        ("points_in_boxes", "ok ([[0, -1]], [[[1], [0]]])"),
        ("box_overlaps", "ok [0.3333, 0.0]"),
        ("naive_sync_bn", "ok (2, 4, 3, 3)"),
        ("pyramids", "ok (2, 8, 16, 16)"),
        # HTC's FusedSemanticHead adds into its ReLU lateral in place
        ("semantic_head", "ok ((2, 3, 8, 8), (2, 8, 16, 16))"),
    ],
)
def test_checks(child, check, expected) -> None:
    assert child["CHECK"].get(check) == expected, child["CHECK"]
