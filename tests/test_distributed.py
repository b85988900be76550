"""MMDistributedDataParallel: real gloo groups, gradients compared with a reference."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import torch
import torch.distributed as dist
from torch import nn

from mmpar.collate import collate
from mmpar.data_container import DataContainer
from mmpar.data_parallel import MMDataParallel
from mmpar.distributed import MMDistributedDataParallel, params_without_grad
from mmpar.scatter_gather import to_device
from tests._containers import UnwrappedSteps, has_container
from tests._dist_helpers import free_port, run_launcher, run_workers

ROOT = Path(__file__).resolve().parents[1]
LR = 0.1
WORLD = 2


# --------------------------------------------------------------------------- #
# Model and data shared by the single- and multi-process tests
# --------------------------------------------------------------------------- #
class Net(UnwrappedSteps, nn.Module):
    """Pools a padded image batch; ``branch`` (if built) is used only when a sample's meta asks."""

    def __init__(self, bn: bool = False, branch: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = nn.BatchNorm1d(3) if bn else nn.Identity()
        self.fc1 = nn.Linear(3, 8)
        self.fc2 = nn.Linear(8, 1)
        self.branch = nn.Linear(8, 1) if branch else None
        self.forward_calls = 0

    def forward(self, img: torch.Tensor, gt: List[torch.Tensor], img_metas: List[dict]) -> dict:
        self.forward_calls += 1
        h = torch.relu(self.fc1(self.norm(img.mean(dim=(2, 3)))))
        pred = self.fc2(h).squeeze(1)
        if self.branch is not None and any(m["branch"] for m in img_metas):
            pred = pred + self.branch(h).squeeze(1)
        target = torch.stack([g.sum() for g in gt])
        return dict(loss=((pred - target) ** 2).mean(), pred=pred)

    def val_step(self, data: dict, optimizer: Any = None) -> dict:
        return self.train_step(data, optimizer)


def _batch(rank: int, step: int, branch: bool = False, n: int = 3) -> dict:
    g = torch.Generator().manual_seed(1000 * rank + step)
    samples = []
    for i in range(n):
        h, w, k = (int(v) for v in torch.randint(2, 6, (3,), generator=g))
        samples.append(
            dict(
                img=DataContainer(torch.randn(3, h, w, generator=g), stack=True),
                gt=DataContainer(torch.randn(k, generator=g)),
                img_metas=DataContainer(dict(idx=i, branch=branch), cpu_only=True),
            )
        )
    return collate(samples, samples_per_gpu=n)


def _plain(batch: dict) -> dict:
    return to_device(batch, "cpu")


def _averaged_grads(model: Net, batches: List[dict]) -> List[torch.Tensor]:
    """Gradient of the mean over ranks of each rank's loss (a missing grad counts as 0)."""
    total = [torch.zeros_like(p) for p in model.parameters()]
    for batch in batches:
        model.zero_grad()
        model.train_step(_plain(batch))["loss"].backward()
        for t, p in zip(total, model.parameters()):
            if p.grad is not None:
                t += p.grad
    return [t / len(batches) for t in total]


def _reference(steps: int, world: int, branch_ranks: tuple = ()) -> Dict[str, torch.Tensor]:
    """One process, plain SGD on the rank-averaged gradient of every step."""
    model = Net(branch=bool(branch_ranks))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        grads = _averaged_grads(model, [_batch(r, step, r in branch_ranks) for r in range(world)])
        for p, g in zip(model.parameters(), grads):
            p.grad = g
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _params(model: nn.Module) -> Dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _assert_params_close(
    actual: Dict[str, torch.Tensor], expected: Dict[str, torch.Tensor]
) -> None:
    assert actual.keys() == expected.keys()
    for name in actual:
        torch.testing.assert_close(actual[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)


# --------------------------------------------------------------------------- #
# Worker bodies (run in spawned processes, one per rank)
# --------------------------------------------------------------------------- #
def _train_forward_val_worker(rank: int, world: int, steps: int) -> dict:
    model = Net()
    ddp = MMDistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
    num_samples = []
    for step in range(steps):
        optimizer.zero_grad()
        out = ddp.train_step(_batch(rank, step), optimizer)
        out["loss"].backward()
        optimizer.step()
        num_samples.append(out["num_samples"])
    trained = _params(model)
    forward_out = ddp(**_batch(rank, 99))
    with torch.no_grad():
        val = ddp.val_step(_batch(rank, 100), None)
    forward_calls = model.forward_calls
    with torch.no_grad():
        expected_forward_loss = model(**_plain(_batch(rank, 99)))["loss"]
    return dict(
        trained=trained,
        reference=_reference(steps, world),
        forward_calls=forward_calls,
        num_samples=num_samples,
        forward_pred_shape=tuple(forward_out["pred"].shape),
        forward_loss=forward_out["loss"].detach(),
        expected_forward_loss=expected_forward_loss,
        val_requires_grad=val["loss"].requires_grad,
        after_val=_params(model),
    )


def _unused_worker(rank: int, world: int, steps: int) -> dict:
    # Branch used on rank 0 only: DDP averages rank 0's branch gradient with zeros.
    model = Net(branch=True)
    ddp = MMDistributedDataParallel(model, find_unused_parameters=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
    for step in range(steps):
        optimizer.zero_grad()
        ddp.train_step(_batch(rank, step, branch=rank == 0))["loss"].backward()
        optimizer.step()
    result = dict(one_rank=_params(model), reference=_reference(steps, world, branch_ranks=(0,)))
    result["one_rank_missing"] = ddp.params_without_grad()
    # Branch unused everywhere, find_unused_parameters=True: no grad, weights kept.
    model = Net(branch=True)
    ddp = MMDistributedDataParallel(model, find_unused_parameters=True)
    before = _params(model)
    ddp.train_step(_batch(rank, 0))["loss"].backward()
    result["both_missing"] = ddp.params_without_grad()
    torch.optim.SGD(ddp.parameters(), lr=LR).step()
    result["branch_kept"] = torch.equal(before["branch.weight"], model.branch.weight)
    # find_unused_parameters=False: the aid names what DDP's next forward would fail on.
    model = Net(branch=True)
    ddp = MMDistributedDataParallel(model, find_unused_parameters=False)
    ddp.train_step(_batch(rank, 0))["loss"].backward()
    result["strict_missing"] = ddp.params_without_grad()
    return result


def _no_sync_worker(rank: int, world: int) -> dict:
    model = Net()
    ddp = MMDistributedDataParallel(model)
    batches = [_batch(rank, step) for step in range(3)]
    with ddp.no_sync():
        for batch in batches[:2]:
            ddp.train_step(batch)["loss"].backward()
    local = [p.grad.clone() for p in model.parameters()]
    ddp.train_step(batches[2])["loss"].backward()
    synced = [p.grad.clone() for p in model.parameters()]
    # Reference: local sum over the micro-batches, then the mean over ranks.
    ref_model = Net()
    local_ref = [
        sum(g) for g in zip(*(_averaged_grads(ref_model, [_batch(rank, s)]) for s in range(2)))
    ]
    per_rank = [
        [sum(g) for g in zip(*(_averaged_grads(ref_model, [_batch(r, s)]) for s in range(3)))]
        for r in range(world)
    ]
    synced_ref = [sum(g) / world for g in zip(*per_rank)]
    return dict(local=local, local_ref=local_ref, synced=synced, synced_ref=synced_ref)


def _buffers_worker(rank: int, world: int) -> dict:
    model = Net(bn=True)
    ddp = MMDistributedDataParallel(model, broadcast_buffers=True)
    stats = {}
    for name, call in (("train_step", ddp.train_step), ("forward", lambda b: ddp(**b))):
        if rank == 1:
            with torch.no_grad():
                model.norm.running_mean.add_(5.0)  # drift that DDP must overwrite
        out = call(_batch(7, 0))  # identical data on every rank
        out["loss"].backward()
        mean = model.norm.running_mean.clone()
        gathered = [torch.empty_like(mean) for _ in range(world)]
        dist.all_gather(gathered, mean)
        stats[name] = gathered
    return stats


# --------------------------------------------------------------------------- #
# Multi-process tests
# --------------------------------------------------------------------------- #
@pytest.mark.slow
def test_train_step_matches_single_process_reference_then_forward_and_val_step() -> None:
    steps = 4
    results = run_workers(_train_forward_val_worker, WORLD, steps, timeout=90)
    for rank, res in enumerate(results):
        _assert_params_close(res["trained"], res["reference"])
        _assert_params_close(res["trained"], results[0]["trained"])
        assert res["forward_calls"] == steps + 2  # one per train_step, forward and val_step
        assert res["num_samples"] == [3] * steps
        assert res["forward_pred_shape"] == (3,)
        torch.testing.assert_close(res["forward_loss"], res["expected_forward_loss"])
        assert res["val_requires_grad"] is False
        _assert_params_close(res["after_val"], res["trained"])
    # Ranks saw different data, so the reference really averaged two different gradients.
    assert not torch.allclose(results[0]["forward_loss"], results[1]["forward_loss"])


@pytest.mark.slow
def test_find_unused_parameters_and_params_without_grad() -> None:
    steps = 3
    results = run_workers(_unused_worker, WORLD, steps, timeout=90)
    branch = ["branch.weight", "branch.bias"]
    for res in results:
        _assert_params_close(res["one_rank"], res["reference"])
        _assert_params_close(res["one_rank"], results[0]["one_rank"])
        assert res["one_rank_missing"] == []
        assert res["both_missing"] == branch
        assert res["branch_kept"]
        assert res["strict_missing"] == branch


@pytest.mark.slow
def test_no_sync_accumulates_locally_then_averages() -> None:
    results = run_workers(_no_sync_worker, WORLD, timeout=90)
    for res in results:
        for got, want in zip(res["local"], res["local_ref"]):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        for got, want in zip(res["synced"], res["synced_ref"]):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(results[0]["local"][0], results[1]["local"][0])


@pytest.mark.slow
def test_buffers_are_broadcast_from_rank_0_before_each_forward() -> None:
    results = run_workers(_buffers_worker, WORLD, timeout=90)
    for call in ("train_step", "forward"):
        means = results[1][call]
        torch.testing.assert_close(means[0], means[1])
        torch.testing.assert_close(results[0][call][0], means[0])


@pytest.mark.slow
def test_torchrun_script_trains_in_lockstep() -> None:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(ROOT / "tests" / "scripts" / "ddp_train_steps.py"),
        "--steps",
        "3",
    ]
    proc = run_launcher(cmd, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(
        re.findall(r"rank (\d)/2: steps=3 forward_calls=(\d+) params_equal=(\w+)", proc.stdout)
    )
    assert lines == [("0", "3", "True"), ("1", "3", "True")], proc.stdout + proc.stderr


# --------------------------------------------------------------------------- #
# Single-process tests: a gloo group of one, in this process
# --------------------------------------------------------------------------- #
@pytest.fixture
def group_of_one() -> Iterator[None]:
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_is_a_torch_ddp(group_of_one: None) -> None:
    assert isinstance(MMDistributedDataParallel(Net()), nn.parallel.DistributedDataParallel)


def test_forward_and_steps_receive_unwrapped_data(group_of_one: None) -> None:
    seen: List[dict] = []

    class Spy(Net):
        def forward(self, **data: Any) -> dict:
            seen.append(data)
            return super().forward(**data)

    ddp = MMDistributedDataParallel(Spy())
    ddp(**_batch(0, 0))
    ddp.train_step(_batch(0, 1))
    with torch.no_grad():
        ddp.val_step(_batch(0, 2))
    assert len(seen) == 3
    assert not has_container(seen)
    assert all(isinstance(d["img"], torch.Tensor) and isinstance(d["gt"], list) for d in seen)


def test_nested_forward_runs_exactly_once_per_step_and_is_restored(group_of_one: None) -> None:
    model = Net()
    ddp = MMDistributedDataParallel(model)
    for step in range(3):
        out = ddp.train_step(_batch(0, step))
        out["loss"].backward()
        assert model.forward_calls == step + 1
        assert "forward" not in vars(model)
    assert set(out) == {"loss", "log_vars", "num_samples"}
    assert all(p.grad is not None for p in model.parameters())


def test_instance_forward_set_before_is_used_inside_and_restored(group_of_one: None) -> None:
    model = Net()
    calls: List[str] = []
    original = model.forward

    def patched(**data: Any) -> dict:
        calls.append("patched")
        return original(**data)

    model.forward = patched
    ddp = MMDistributedDataParallel(model)
    ddp.train_step(_batch(0, 0))
    assert calls == ["patched"]
    assert vars(model)["forward"] is patched


def test_exception_in_step_restores_forward(group_of_one: None) -> None:
    class Failing(Net):
        def train_step(self, data: dict, optimizer: Any = None) -> dict:
            raise ValueError("boom")

    model = Failing()
    ddp = MMDistributedDataParallel(model)
    with pytest.raises(ValueError, match="boom"):
        ddp.train_step(_batch(0, 0))
    assert "forward" not in vars(model)
    assert ddp(**_batch(0, 1))["pred"].shape == (3,)


def test_missing_step_method_is_a_type_error(group_of_one: None) -> None:
    ddp = MMDistributedDataParallel(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="Linear has no train_step"):
        ddp.train_step(torch.ones(1, 2))
    assert "forward" not in vars(ddp.module)


def test_forward_hooks_during_a_step(group_of_one: None) -> None:
    model = Net()
    sub_inputs: List[torch.Tensor] = []
    root_outputs: List[set] = []
    model.fc1.register_forward_hook(lambda m, inp, out: sub_inputs.append(inp[0]))
    model.register_forward_hook(lambda m, inp, out: root_outputs.append(set(out)))
    ddp = MMDistributedDataParallel(model)
    ddp.train_step(_batch(0, 0))
    # Submodule hooks: once per real forward. Root hooks: the inner forward, then the step call.
    assert len(sub_inputs) == 1 and sub_inputs[0].shape == (3, 3)
    assert root_outputs == [{"loss", "pred"}, {"loss", "log_vars", "num_samples"}]
    ddp(**_batch(0, 1))
    assert len(sub_inputs) == 2 and root_outputs[-1] == {"loss", "pred"}


def test_val_step_under_no_grad(group_of_one: None) -> None:
    ddp = MMDistributedDataParallel(Net())
    with torch.no_grad():
        out = ddp.val_step(_batch(0, 0))
    assert not out["loss"].requires_grad and out["num_samples"] == 3
    ddp.train_step(_batch(0, 1))["loss"].backward()  # DDP state is fine afterwards


def test_params_without_grad_on_plain_module_and_wrappers(group_of_one: None) -> None:
    model = Net(branch=True)
    model.train_step(_plain(_batch(0, 0)))["loss"].backward()
    assert params_without_grad(model) == ["branch.weight", "branch.bias"]
    assert params_without_grad(MMDataParallel(model, device_ids=[-1])) == [
        "branch.weight",
        "branch.bias",
    ]
    frozen = Net(branch=True)
    frozen.branch.requires_grad_(False)
    assert params_without_grad(frozen) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    with pytest.raises(TypeError, match="module must be an nn.Module, got str"):
        params_without_grad("model")


# --------------------------------------------------------------------------- #
# Benchmark section smoke test
# --------------------------------------------------------------------------- #
@pytest.mark.slow
def test_bench_section_runs_quick() -> None:
    spec = importlib.util.spec_from_file_location(
        "mmpar_bench_ddp_smoke", ROOT / "tools" / "bench" / "ddp.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.run(quick=True)
    assert text.startswith("## DDP")
    assert re.search(r"^\| plain DDP \| unwrapped batch \| [\d.]+ \| 1\.000 \|$", text, re.M)
    row = (
        r"^\| MMDistributedDataParallel\.train_step \| DataContainer batch \| [\d.]+ \| [\d.]+ \|$"
    )
    assert re.search(row, text, re.M)
    assert re.search(r"^- Target: .*<= 5%: \*\*(met|not met)\*\*", text, re.M)


@pytest.mark.cuda
def test_cuda_inputs_land_on_the_process_device(group_of_one: None) -> None:
    seen: List[dict] = []

    class Spy(Net):
        def forward(self, **data: Any) -> dict:
            seen.append(data)
            return super().forward(**data)

    k = torch.cuda.device_count() - 1
    model = Spy().cuda(k)
    for ddp in (MMDistributedDataParallel(model, device_ids=[k]), MMDistributedDataParallel(model)):
        ddp.train_step(_batch(0, 0))["loss"].backward()
        assert seen[-1]["img"].device == torch.device("cuda", k)
        assert all(g.device == torch.device("cuda", k) for g in seen[-1]["gt"])
        assert seen[-1]["img_metas"][0]["idx"] == 0
