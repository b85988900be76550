"""The legacy ``torch.distributed.launch`` in front of ``python -m mmpar.compat.run``.

On torch >= 2.0 the launcher puts ``--local-rank=N`` before the script, which a
script written for torch 1.x (it knows only ``--local_rank``) refuses.
``mmpar.compat.run`` takes that argument off, exports ``LOCAL_RANK`` and runs the
script with the arguments torchrun would give it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from mmpar.compat.run import split_local_rank
from tests._dist_helpers import free_port, run_launcher
from tests.compat._mmcv_env import child_env, requires_mmcv

SCRIPT = Path(__file__).resolve().parent / "scripts" / "local_rank_only_train.py"
TIMEOUT = 120


def _run(cmd: List[str], cwd: Path) -> subprocess.CompletedProcess:
    return run_launcher(cmd, timeout=TIMEOUT, cwd=cwd, env=child_env(OMP_NUM_THREADS="1"))


@requires_mmcv
@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_torch_distributed_launch_runs_a_local_rank_only_script(tmp_path: Path, nproc: int) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.launch",
        f"--nproc_per_node={nproc}",
        f"--master_port={free_port()}",
        "-m",
        "mmpar.compat.run",
        str(SCRIPT),
        str(tmp_path),
        "--launcher",
        "pytorch",
    ]
    proc = _run(cmd, tmp_path)
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    for rank in range(nproc):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        # The arguments torchrun would give: the launcher's --local-rank is gone.
        assert report["argv"] == [str(tmp_path), "--launcher", "pytorch"]
        assert report["rank"] == rank and report["world_size"] == nproc
        assert report["local_rank_env"] == str(rank)
        assert report["sum"] == nproc * (nproc + 1) // 2


@pytest.mark.parametrize(
    "argv, local_rank, rest",
    [
        (["--local-rank=1", "s.py", "a"], 1, ["s.py", "a"]),
        (["--local_rank=0", "s.py"], 0, ["s.py"]),
        (["--local-rank", "3", "s.py", "--local-rank=5"], 3, ["s.py", "--local-rank=5"]),
        (["--local_rank", "2", "s.py"], 2, ["s.py"]),
        (["s.py", "--local_rank=1"], None, ["s.py", "--local_rank=1"]),  # the script's own
        ([], None, []),
    ],
)
def test_split_local_rank(argv: List[str], local_rank: int, rest: List[str]) -> None:
    assert split_local_rank(argv) == (local_rank, rest)


@pytest.mark.parametrize("bad", [["--local-rank=x", "s.py"], ["--local-rank=-1"], ["--local-rank"]])
def test_split_local_rank_refuses_a_malformed_value(bad: List[str]) -> None:
    with pytest.raises(ValueError, match="--local"):
        split_local_rank(bad)


def test_compat_run_reports_a_bad_local_rank_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mmpar.compat.run", "--local-rank=x", "s.py"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=child_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--local-rank" in errors[0], proc.stderr
