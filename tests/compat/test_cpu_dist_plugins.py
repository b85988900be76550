"""The BEVFormer-style plugins' own training functions train on the CPU under patch_mmcv.

BEVFormer, and VAD and UniAD after it, train through
``projects/mmdet3d_plugin/<name>/apis/mmdet_train.py``'s ``custom_train_detector``, which
wraps the model itself as mmdet did before ``build_dp``:
``MMDataParallel(model.cuda(cfg.gpu_ids[0]), device_ids=cfg.gpu_ids)``. A small
``projects`` package written by the test stands in for each repository's (its own
``apis/train.py`` imports the function by name, as theirs do); the checks run in a fresh
interpreter with ``CUDA_VISIBLE_DEVICES=""`` and print ``OK`` last.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.compat._mmcv_env import assert_child_ok, requires_mmdet, run_cpu_child

pytestmark = requires_mmdet

TIMEOUT = 120
PLUGINS = ("bevformer", "VAD", "uniad")

MMDET_TRAIN = """\
import torch
from mmcv.parallel import MMDataParallel, MMDistributedDataParallel


def custom_train_detector(model, cfg, distributed=False, eval_model=None):
    if distributed:
        return MMDistributedDataParallel(
            model.cuda(), device_ids=[torch.cuda.current_device()], broadcast_buffers=False)
    return MMDataParallel(model.cuda(cfg.gpu_ids[0]), device_ids=cfg.gpu_ids)
"""
TRAIN = """\
from .mmdet_train import custom_train_detector


def custom_train_model(model, cfg, distributed=False):
    return custom_train_detector(model, cfg, distributed=distributed)
"""

CHECK = """
import os
import torch
import torch.distributed as dist
from mmcv import Config
from mmpar.compat import patch_mmcv

patch_mmcv()
assert not torch.cuda.is_available()
from mmpar import MMDataParallel, MMDistributedDataParallel

cfg = Config(dict(gpu_ids=range(1)))
dist.init_process_group(
    "gloo", init_method="file://" + os.path.abspath("pg"), rank=0, world_size=1)
for name in {plugins!r}:
    train = __import__(f"projects.mmdet3d_plugin.{{name}}.apis.train", fromlist=["x"])
    model = torch.nn.Linear(2, 1)
    wrapped = train.custom_train_model(model, cfg)
    assert type(wrapped) is MMDataParallel and wrapped.module is model, name
    assert wrapped(torch.ones(1, 2)).shape == (1, 1)
    wrapped = train.custom_train_model(model, cfg, distributed=True)
    assert type(wrapped) is MMDistributedDataParallel and wrapped.device_ids is None, name
    assert "cuda" not in vars(model) and next(model.parameters()).device.type == "cpu"
dist.destroy_process_group()
print("OK")
"""


def _write_plugins(root: Path) -> None:
    for name in ("projects", "projects/mmdet3d_plugin"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text("")
    for plugin in PLUGINS:
        apis = root / "projects" / "mmdet3d_plugin" / plugin / "apis"
        apis.mkdir(parents=True)
        (apis.parent / "__init__.py").write_text("")
        (apis / "__init__.py").write_text("")
        (apis / "mmdet_train.py").write_text(MMDET_TRAIN)
        (apis / "train.py").write_text(TRAIN)


def test_plugin_train_functions_wrap_the_model_on_the_cpu(tmp_path: Path) -> None:
    _write_plugins(tmp_path)
    code = textwrap.dedent(CHECK.format(plugins=PLUGINS))
    assert_child_ok(run_cpu_child(code, tmp_path, [tmp_path], TIMEOUT))
