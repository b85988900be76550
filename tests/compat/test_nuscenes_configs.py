"""nuScenes-devkit's evaluation configs cross into spawned DataLoader workers.

A dataset holding the devkit's ``DetectionConfig`` and ``TrackingConfig`` (as mmdet3d's
nuScenes datasets do) is read by a DataLoader with ``spawn`` workers, the start method
mmcv's ``init_dist`` sets: after ``patch_mmcv()`` the workers start and every sample
arrives; without it the dataset cannot be pickled. The devkit lives in an mmpar install
target, not in the main environment: the checks run in a child process with it on
``PYTHONPATH`` and skip where no target has it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.compat._mmcv_env import requires_mmcv

TARGETS = [Path.home() / ".cache" / "mmpar" / n for n in ("mmcv-1.4.0", "mmcv-1.7.0")]
TARGET = next((t for t in TARGETS if (t / "nuscenes").is_dir()), None)

SCRIPT = textwrap.dedent(
    """
    import sys

    import torch
    from torch.utils.data import DataLoader, Dataset

    if sys.argv[1] == "patched":
        from mmpar.compat import patch_mmcv
        patch_mmcv()
    from nuscenes.eval.common.config import config_factory
    from nuscenes.eval.tracking.data_classes import TrackingConfig


    class Holder(Dataset):
        def __init__(self):
            self.detection = config_factory("detection_cvpr_2019")
            tracking = config_factory("tracking_nips_2019")
            self.tracking = tracking if isinstance(tracking, TrackingConfig) else None

        def __len__(self):
            return 5

        def __getitem__(self, i):
            return torch.tensor([i, len(self.detection.class_names)])


    if __name__ == "__main__":
        holder = Holder()
        names = holder.detection.class_names
        assert list(names) == list(holder.detection.class_range), names
        loader = DataLoader(holder, batch_size=2, num_workers=2,
                            multiprocessing_context="spawn")
        got = torch.cat([b for b in loader])
        print(type(names).__name__, got[:, 0].tolist(), got[0, 1].item())
    """
)


def _run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    script = tmp_path / "holder.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=f"{Path(__file__).resolve().parents[2]}{os.pathsep}{TARGET}")
    return subprocess.run(
        [sys.executable, str(script), mode], capture_output=True, text=True, timeout=300, env=env
    )


@requires_mmcv
@pytest.mark.skipif(TARGET is None, reason="no mmpar install target with nuscenes-devkit")
def test_spawned_workers_get_a_dataset_holding_the_devkits_configs(tmp_path: Path) -> None:
    done = _run(tmp_path, "patched")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["list", "[0,", "1,", "2,", "3,", "4]", "10"]


@requires_mmcv
@pytest.mark.skipif(TARGET is None, reason="no mmpar install target with nuscenes-devkit")
def test_without_the_mend_the_dataset_cannot_be_pickled(tmp_path: Path) -> None:
    done = _run(tmp_path, "plain")
    assert done.returncode != 0
    assert "cannot pickle 'dict_keys' object" in done.stderr
