"""mmpar's compat layer on mmcv 1.7.0, the mmcv that mmpose and mmaction2 accept.

CI installs mmcv 1.7.0 without its compiled ops beside the main mmcv 1.7.2, into
``MMCV_170_DIR`` (``python -m mmpar.compat.install --target``). One child process
with that folder first on ``PYTHONPATH`` runs every check (its imports take most of
the time) and prints one line per check; each test reads its own line.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Dict

import pytest

from tests.compat._mmcv_env import (
    MMCV_170_DIR,
    REPO_ROOT,
    mmcv170_env,
    requires_mmcv170,
    requires_torchvision,
)

pytestmark = [requires_mmcv170, requires_torchvision]

CHILD = textwrap.dedent(
    """
    import traceback
    import torch

    def check(name):
        def run(fn):
            try:
                fn()
            except Exception:
                where = traceback.format_exc().strip().splitlines()[-3:]
                print(f"CHECK\\t{name}\\t{' | '.join(w.strip() for w in where)}", flush=True)
            else:
                print(f"CHECK\\t{name}\\tok", flush=True)
        return run

    @check("version")
    def _():
        import mmcv
        assert mmcv.__version__ == "1.7.0", mmcv.__version__
        assert mmcv.__file__.startswith(MMCV_170_DIR), mmcv.__file__

    @check("parallel")
    def _():
        from mmpar.compat import is_patched, patch_mmcv
        import mmpar
        patch_mmcv()
        assert is_patched()
        import mmcv.parallel
        from mmcv.parallel.data_container import DataContainer
        from mmcv.parallel.utils import is_module_wrapper
        assert mmcv.parallel.MMDataParallel is mmpar.MMDataParallel
        assert DataContainer is mmpar.DataContainer
        assert mmcv.parallel.collate is mmpar.collate
        import mmcv.runner.checkpoint as ckpt
        assert ckpt.is_module_wrapper is mmpar.is_module_wrapper is is_module_wrapper
        samples = [{"img": DataContainer(torch.ones(3, 4, 5), stack=True)}] * 4
        batch = mmcv.parallel.collate(samples, samples_per_gpu=2)
        assert [part.shape for part in batch["img"].data] == [(2, 3, 4, 5)] * 2

    @check("ops")
    def _():
        from mmpar.compat.mmcv_ops import ops_in_use
        from mmpar.compat.ops import MODULES
        from mmcv.ops import RoIAlign, nms
        assert ops_in_use() == "mmpar", ops_in_use()
        assert nms is MODULES["nms"].nms and RoIAlign is MODULES["roi_align"].RoIAlign
        boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]])
        _, keep = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
        assert keep.tolist() == [0, 2], keep

    def train_step(model, data):
        from mmcv.parallel import MMDataParallel
        wrapped = MMDataParallel(model, device_ids=["cpu"])
        out = wrapped.train_step(data, None)
        out["loss"].backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert torch.isfinite(out["loss"]) and any(g.abs().sum() > 0 for g in grads), out

    @check("mmpose")
    def _():
        import mmpose
        from mmcv.parallel import DataContainer
        from mmpose.models import build_posenet
        torch.manual_seed(0)
        model = build_posenet(dict(
            type="TopDown",
            backbone=dict(type="ResNet", depth=18),
            keypoint_head=dict(
                type="TopdownHeatmapSimpleHead", in_channels=512, out_channels=17,
                num_deconv_layers=1, num_deconv_filters=(32,), num_deconv_kernels=(4,),
                loss_keypoint=dict(type="JointsMSELoss", use_target_weight=True)),
            train_cfg=dict(),
            test_cfg=dict(flip_test=False, post_process="default", shift_heatmap=False,
                          modulate_kernel=11)))
        img = torch.randn(2, 3, 64, 48)
        with torch.no_grad():
            heatmap = model.keypoint_head(model.backbone(img))
        metas = DataContainer([[dict(image_file=f"{i}.jpg") for i in range(2)]], cpu_only=True)
        train_step(model, dict(img=img, target=torch.rand_like(heatmap),
                               target_weight=torch.ones(2, 17, 1), img_metas=metas))
        print("mmpose", mmpose.__version__, flush=True)

    @check("mmaction2")
    def _():
        import mmaction
        from mmaction.models import build_model
        torch.manual_seed(0)
        model = build_model(dict(
            type="Recognizer2D",
            backbone=dict(type="ResNet", depth=18, pretrained=None),
            cls_head=dict(type="TSNHead", num_classes=5, in_channels=512,
                          consensus=dict(type="AvgConsensus", dim=1), dropout_ratio=0.0),
            train_cfg=None, test_cfg=dict(average_clips=None)))
        imgs = torch.randn(2, 3, 3, 32, 32)  # batch, segments, channels, height, width
        train_step(model, dict(imgs=imgs, label=torch.tensor([[1], [4]])))
        print("mmaction2", mmaction.__version__, flush=True)
    """
)


@pytest.fixture(scope="module")
def results() -> Dict[str, str]:
    code = f"MMCV_170_DIR = {str(MMCV_170_DIR)!r}\n" + CHILD
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=mmcv170_env(OMP_NUM_THREADS="1"),
        cwd=REPO_ROOT,
    )
    lines = [line.split("\t") for line in proc.stdout.splitlines() if line.startswith("CHECK\t")]
    got = {name: result for _, name, result in lines}
    assert proc.returncode == 0 and len(got) == 5, f"{proc.stdout}\n{proc.stderr[-4000:]}"
    return got


@pytest.mark.parametrize("check", ["version", "parallel", "ops", "mmpose", "mmaction2"])
def test_compat_layer_on_mmcv_170(results, check) -> None:
    assert results[check] == "ok", results[check]
