"""Processes and GPUs: one GPU per nccl process, gloo on a GPU machine, the pinning default.

The logic runs on the CPU with a patched device count; ``test_tools.py`` runs the
same cases end to end with torchrun on a GPU machine.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from mmpar.data import SyntheticShapes, build_dataloader
from mmpar.dist import check_gpu_per_process, init_dist
from mmpar.models import build_model
from mmpar.runner.launch import run_device, wrap_model
from tests._dist_helpers import LAUNCH_VARS, clear_launch_env, free_port


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    return clear_launch_env(monkeypatch)


def _fake_gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> list:
    """Pretend ``count`` GPUs are visible; returns the devices ``set_device`` was called with."""
    chosen: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    return chosen


def _torchrun_env(monkeypatch: pytest.MonkeyPatch, rank: int, world: int) -> None:
    for name, value in dict(
        RANK=rank,
        WORLD_SIZE=world,
        LOCAL_RANK=rank,
        LOCAL_WORLD_SIZE=world,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=free_port(),
    ).items():
        monkeypatch.setenv(name, str(value))


@pytest.mark.parametrize("rank", [0, 1])
def test_two_nccl_processes_on_one_gpu_fail_on_every_rank_before_nccl(
    env: pytest.MonkeyPatch, rank: int
) -> None:
    chosen = _fake_gpus(env, 1)
    _torchrun_env(env, rank, 2)
    with pytest.raises(
        ValueError,
        match=r"2 processes on this node but 1 visible GPU\(s\).*"
        r"--nproc_per_node=1.*dist_params.backend=gloo",
    ):
        init_dist("pytorch", timeout=5)
    assert chosen == [] and not dist.is_initialized()


def test_gloo_on_a_gpu_machine_leaves_cuda_alone_and_runs_on_the_cpu(
    env: pytest.MonkeyPatch,
) -> None:
    chosen = _fake_gpus(env, 1)
    _torchrun_env(env, 0, 1)
    env.setenv("LOCAL_WORLD_SIZE", "2")  # as if a second process shared the one GPU
    init_dist("pytorch", backend="gloo", timeout=30)
    try:
        assert chosen == [] and dist.get_backend() == "gloo"
        assert run_device(True) == torch.device("cpu")
        wrapped = wrap_model(build_model(dict(type="TinyDet", width=8)), distributed=True)
        assert all(p.device.type == "cpu" for p in wrapped.parameters())
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "launcher, local_rank, local_world, gpus, ok",
    [
        ("pytorch", 0, 2, 2, True),
        ("pytorch", 1, 2, 2, True),
        ("pytorch", 0, 2, 1, False),  # rank 0 alone would fit: the node count says it will not
        ("pytorch", 1, None, 1, False),  # no count from the launcher: the local rank says it
        ("pytorch", 0, 1, 8, True),
        ("mpi", 3, 4, 2, False),
        ("slurm", 3, 4, 1, True),  # SLURM bound each task to its own one visible GPU
        ("slurm", 3, 4, 2, False),
        ("slurm", 1, None, 4, True),
        ("pytorch", 5, 8, 0, True),  # no GPU: nothing to share (gloo)
    ],
)
def test_check_gpu_per_process(
    launcher: str, local_rank: int, local_world: int, gpus: int, ok: bool
) -> None:
    if ok:
        check_gpu_per_process(launcher, local_rank, local_world, gpus)
    else:
        with pytest.raises(ValueError, match=f"visible GPU.*at most {gpus} process"):
            check_gpu_per_process(launcher, local_rank, local_world, gpus)


def test_slurm_one_visible_gpu_per_task_is_valid(env: pytest.MonkeyPatch) -> None:
    chosen = _fake_gpus(env, 1)
    env.setattr(dist, "init_process_group", lambda *a, **k: None)  # no nccl on this machine
    for name, value in dict(
        SLURM_PROCID=3,
        SLURM_NTASKS=4,
        SLURM_NODELIST="127.0.0.1",
        SLURM_LOCALID=3,
        SLURM_NTASKS_PER_NODE=4,
    ).items():
        env.setenv(name, str(value))
    init_dist("slurm", port=free_port())
    assert chosen == [0]


def test_build_dataloader_pins_by_default_exactly_when_cuda_is_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dataset = SyntheticShapes(num_samples=4)
    assert build_dataloader(dataset, 2, 0, seed=0).pin_memory is torch.cuda.is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert build_dataloader(dataset, 2, 0, seed=0).pin_memory is True
    assert build_dataloader(dataset, 2, 0, seed=0, pin_memory=False).pin_memory is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert build_dataloader(dataset, 2, 0, seed=0).pin_memory is False


def test_env_fixture_removes_what_init_dist_exports_in_the_test_process() -> None:
    # init_dist("slurm") exports RANK, WORLD_SIZE, ... in this process: the fixture's
    # undo must remove them, or a later test's children start as rank 3 of 4.
    before = {name: os.environ.get(name) for name in LAUNCH_VARS}
    patch = pytest.MonkeyPatch()
    clear_launch_env(patch)
    os.environ.update(RANK="3", WORLD_SIZE="4", MASTER_PORT="1234")
    patch.undo()
    assert {name: os.environ.get(name) for name in LAUNCH_VARS} == before
