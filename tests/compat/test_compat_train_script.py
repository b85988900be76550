"""An mmdet 2.x-style training script on mmpar through patch_mmcv(), end to end.

``scripts/mmdet_style_train.py`` is a user's script (mmdet's pipeline,
``build_dataloader``, mmcv's runner and ``mmcv.parallel`` wrappers) whose only
mmpar line is ``patch_mmcv()``. It trains 2 epochs on the small COCO set with 2
gloo processes under torchrun; a copy without that line trains under
``python -m mmpar.compat.run``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
import torch

from tests._dist_helpers import free_port, run_launcher
from tests.compat._mmcv_env import child_env, requires_mmdet, write_small_coco

pytestmark = [requires_mmdet, pytest.mark.slow]

SCRIPTS = Path(__file__).resolve().parent / "scripts"
SCRIPT = SCRIPTS / "mmdet_style_train.py"
CONFIG = SCRIPTS / "tiny_coco_det.py"
PATCH_LINE = "from mmpar.compat import patch_mmcv; patch_mmcv()  # noqa: E702,E402\n"
TIMEOUT = 180


def run(cmd: List[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = run_launcher(cmd, timeout=TIMEOUT, cwd=cwd, env=child_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, (
        f"{cmd} exited "
        f"{proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-8000:]}"
    )
    return proc


def data_options(tmp_path: Path) -> List[str]:
    ann_file, img_prefix, _ = write_small_coco(tmp_path / "data")
    return [
        "--cfg-options",
        f"data.train.ann_file={ann_file}",
        f"data.train.img_prefix={img_prefix}",
    ]


def check_run(work_dir: Path, world_size: int, wrapper: str) -> None:
    # 8 images: 4 landscape, 4 not; batches of 2 per process in one group each.
    iters_per_epoch = 8 // (2 * world_size)
    for rank in range(world_size):
        report = json.loads((work_dir / f"interop_rank{rank}.json").read_text())
        assert report["world_size"] == world_size and report["epochs"] == 2
        assert report["iters"] == 2 * iters_per_epoch
        # mmdet's pipeline and build_dataloader, via mmcv.parallel, used mmpar's classes.
        assert report["data_container"] == "mmpar.data_container.DataContainer"
        assert report["batch_types"] == ["mmpar.data_container.DataContainer"]
        assert report["collate"].startswith("mmpar.")
        assert report["model_wrapper"].startswith("mmpar.") and report["model_wrapper"].endswith(
            wrapper
        )
    for epoch in (1, 2):
        ckpt = torch.load(work_dir / f"epoch_{epoch}.pth", map_location="cpu", weights_only=False)
        assert ckpt["meta"]["epoch"] == epoch and ckpt["meta"]["CLASSES"] == ("cat", "dog", "bird")
        assert set(ckpt["state_dict"]) == {
            "conv.weight",
            "conv.bias",
            "cls_head.weight",
            "cls_head.bias",
            "box_head.weight",
            "box_head.bias",
        }
    (log,) = work_dir.glob("*.log.json")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    train = [r for r in records if r.get("mode") == "train"]
    assert len(train) == 2 * iters_per_epoch
    assert all(r["loss"] == pytest.approx(r["loss_cls"] + r["loss_bbox"], abs=2e-5) for r in train)
    assert (work_dir / CONFIG.name).exists()  # cfg.dump through mmcv's Config (yapf)


def test_mmdet_style_script_trains_under_torchrun_with_two_gloo_processes(tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(SCRIPT),
        str(CONFIG),
        "--work-dir",
        str(work_dir),
        "--launcher",
        "pytorch",
        *data_options(tmp_path),
    ]
    run(cmd, cwd=tmp_path)
    check_run(work_dir, world_size=2, wrapper="MMDistributedDataParallel")


def test_unpatched_script_trains_under_mmpar_compat_run(tmp_path: Path) -> None:
    text = SCRIPT.read_text()
    assert text.count(PATCH_LINE) == 1
    unpatched = text.replace(PATCH_LINE, "")
    code = [line for line in unpatched.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if "import mmpar" in line or "from mmpar" in line]
    script = tmp_path / "train_unpatched.py"
    script.write_text(unpatched)
    work_dir = tmp_path / "work"
    cmd = [
        sys.executable,
        "-m",
        "mmpar.compat.run",
        str(script),
        str(CONFIG),
        "--work-dir",
        str(work_dir),
        *data_options(tmp_path),
    ]
    run(cmd, cwd=tmp_path)
    check_run(work_dir, world_size=1, wrapper="MMDataParallel")
