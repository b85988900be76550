"""``python -m mmpar.compat.run --cuda-on-cpu``: a GPU-only script on a process without a GPU.

The script below does what the test scripts and modules of BEVFormer's family do (a
model and tensors moved with ``.cuda()``, tensors made on ``device='cuda'``, a DDP
wrapper given ``device_ids=[torch.cuda.current_device()]``, a spawned child that moves
a tensor); with the flag it runs to the end on the CPU, without it it stops at the first
CUDA call. Skipped where a GPU is present, where the flag changes nothing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List

import pytest
import torch

from mmpar.compat.run import split_cuda_on_cpu
from tests._dist_helpers import free_port
from tests.compat._mmcv_env import child_env, requires_mmcv

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")

GPU_ONLY_SCRIPT = textwrap.dedent(
    """
    import multiprocessing as mp
    import sys

    import torch
    import torch.distributed as dist


    def child(queue):
        queue.put(str(torch.ones(2).cuda().device))


    if __name__ == "__main__":
        model = torch.nn.Linear(3, 2).cuda()
        x = torch.ones(4, 3).cuda()
        sizes = torch.full((2,), 32, dtype=torch.uint8, device="cuda")
        moved = x.to("cuda:0", torch.float64)
        made = torch.zeros(2, device=torch.device("cuda"))
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1],
                                rank=0, world_size=1)
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[torch.cuda.current_device()])
        ddp(x).sum().backward()
        torch.cuda.synchronize()
        dist.destroy_process_group()
        queue = mp.get_context("spawn").Queue()
        proc = mp.get_context("spawn").Process(target=child, args=(queue,))
        proc.start()
        spawned = queue.get(timeout=120)
        proc.join(60)
        print(model.weight.grad is not None, sizes.device, moved.device, moved.dtype,
              made.device, spawned, torch.cuda.is_available())
    """
)


def _run(tmp_path: Path, flags: List[str]) -> subprocess.CompletedProcess:
    script = tmp_path / "gpu_only.py"
    script.write_text(GPU_ONLY_SCRIPT)
    cmd = [sys.executable, "-m", "mmpar.compat.run", *flags, str(script), str(free_port())]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=240, env=child_env(OMP_NUM_THREADS="1")
    )


@requires_mmcv
def test_a_gpu_only_script_runs_on_the_cpu_with_the_flag(tmp_path: Path) -> None:
    done = _run(tmp_path, ["--cuda-on-cpu"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "cpu", "cpu", "torch.float64", "cpu", "cpu", "False"]


@requires_mmcv
def test_without_the_flag_it_stops_at_the_first_cuda_call(tmp_path: Path) -> None:
    done = _run(tmp_path, [])
    assert done.returncode != 0
    assert "model = torch.nn.Linear(3, 2).cuda()" in done.stderr
    assert "NVIDIA" in done.stderr or "CUDA" in done.stderr


def test_the_flag_is_taken_off_the_front_only() -> None:
    assert split_cuda_on_cpu(["--cuda-on-cpu", "t.py", "--x"]) == (True, ["t.py", "--x"])
    assert split_cuda_on_cpu(["t.py", "--cuda-on-cpu"]) == (False, ["t.py", "--cuda-on-cpu"])
