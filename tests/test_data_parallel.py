"""MMDataParallel and data_parallel: containers unwrapped, CPU path, CUDA checks."""

from __future__ import annotations

from typing import Any, List

import pytest
import torch
from torch import nn

from mmpar.collate import collate
from mmpar.data_container import DataContainer
from mmpar.data_parallel import MMDataParallel, check_module_device, data_parallel
from mmpar.scatter_gather import to_device
from tests._containers import UnwrappedSteps, has_container

needs_cuda = pytest.mark.cuda
needs_2_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")


def _samples(n: int, offset: int = 0) -> list:
    return [
        dict(
            img=DataContainer(torch.full((2, 3 + i % 2, 4), float(i + offset)), stack=True),
            gt=DataContainer(torch.arange(float(i + 1))),
            img_metas=DataContainer(dict(idx=i + offset), cpu_only=True),
        )
        for i in range(n)
    ]


class Recorder(UnwrappedSteps, nn.Module):
    """Records what it receives; loss = weighted image mean plus the gt sums."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(2.0))
        self.seen: List[Any] = []

    def forward(self, img: torch.Tensor, gt: list, img_metas: list) -> dict:
        self.seen.append(dict(img=img, gt=gt, img_metas=img_metas))
        per_image = self.w * img.mean(dim=(1, 2, 3)) + torch.stack([g.sum() for g in gt])
        return dict(loss=per_image.mean(), idx=[m["idx"] for m in img_metas], per_image=per_image)

    def val_step(self, data: dict, optimizer: Any = None) -> dict:
        with torch.no_grad():
            return self.train_step(data, optimizer)


def test_is_a_torch_data_parallel() -> None:
    assert isinstance(MMDataParallel(Recorder()), nn.DataParallel)


@pytest.mark.parametrize("device_ids", [None, [-1], ["cpu"]])
def test_cpu_forward_receives_unwrapped_data(device_ids: Any) -> None:
    if device_ids is None and torch.cuda.is_available():
        pytest.skip("device_ids=None means every GPU here")
    model = Recorder()
    wrapped = MMDataParallel(model, device_ids=device_ids)
    assert wrapped.device_ids == []
    out = wrapped(**collate(_samples(3), samples_per_gpu=3))
    seen = model.seen[-1]
    assert not has_container(seen)
    assert isinstance(seen["img"], torch.Tensor) and seen["img"].shape == (3, 2, 4, 4)
    assert [g.tolist() for g in seen["gt"]] == [[0.0], [0.0, 1.0], [0.0, 1.0, 2.0]]
    assert seen["img_metas"] == [dict(idx=0), dict(idx=1), dict(idx=2)]
    assert out["idx"] == [0, 1, 2]


def test_cpu_train_step_and_val_step() -> None:
    model = Recorder()
    wrapped = MMDataParallel(model, device_ids=[-1])
    batch = collate(_samples(2), samples_per_gpu=2)
    out = wrapped.train_step(batch, None)
    assert out["num_samples"] == 2 and out["loss"].requires_grad
    out["loss"].backward()
    assert model.w.grad is not None
    val = wrapped.val_step(batch, optimizer=None)
    assert not val["loss"].requires_grad
    torch.testing.assert_close(val["loss"], out["loss"].detach())
    assert len(model.seen) == 2


def test_cpu_forward_without_inputs() -> None:
    class Const(nn.Module):
        def forward(self) -> torch.Tensor:
            return torch.ones(1)

    assert MMDataParallel(Const(), device_ids=[-1])().tolist() == [1.0]


def test_device_ids_without_cuda_run_on_the_cpu_as_torch_does() -> None:
    if torch.cuda.is_available():
        pytest.skip("checks the behaviour of a machine without CUDA")
    model = MMDataParallel(Recorder(), device_ids=[0])
    assert model.device_ids == [] == nn.DataParallel(Recorder(), device_ids=[0]).device_ids
    samples = [
        {
            "img": DataContainer(torch.ones(1, 2, 2), stack=True),
            "gt": DataContainer(torch.ones(2)),
            "img_metas": DataContainer({"idx": i}, cpu_only=True),
        }
        for i in range(2)
    ]
    out = model(**collate(samples, 2))
    assert out["idx"] == [0, 1]
    seen = model.module.seen[-1]
    assert isinstance(seen["img"], torch.Tensor) and isinstance(seen["gt"], list)


def test_device_ids_may_be_a_range_as_mmcv_era_scripts_pass() -> None:
    # mmrotate's tools/train.py: cfg.gpu_ids = range(1), then device_ids=cfg.gpu_ids.
    if torch.cuda.is_available():
        model = MMDataParallel(Recorder().cuda(0), device_ids=range(1))
        assert model.device_ids == [0]
    else:
        assert MMDataParallel(Recorder(), device_ids=range(1)).device_ids == []
    assert MMDataParallel(Recorder(), device_ids=range(-1, 0)).device_ids == []


def test_bad_device_ids() -> None:
    with pytest.raises(TypeError, match="device_ids"):
        MMDataParallel(Recorder(), device_ids="cpu")
    with pytest.raises(ValueError, match="device_ids"):
        MMDataParallel(Recorder(), device_ids=["cpu", 0])


def test_check_module_device_names_the_parameter() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    check_module_device(model, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"'0.weight' is on cpu"):
        check_module_device(model, torch.device("meta"))


def test_data_parallel_on_repeated_cpu_targets_equals_module() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    x = torch.randn(7, 3)
    torch.testing.assert_close(data_parallel(model, x, device_ids=["cpu", "cpu"]), model(x))
    torch.testing.assert_close(
        data_parallel(model, (x,), device_ids=["cpu"] * 3, output_device=-1), model(x)
    )


def test_data_parallel_gradients_match_module() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    x = torch.randn(6, 3)
    data_parallel(model, x, device_ids=["cpu", "cpu"]).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad)


def test_data_parallel_with_containers_and_kwargs() -> None:
    model = Recorder()
    batch = collate(_samples(4), samples_per_gpu=2)
    out = data_parallel(model, (), device_ids=["cpu", "cpu"], module_kwargs=batch)
    assert out["idx"] == [0, 1, 2, 3]
    assert len(model.seen) == 2 and not has_container(model.seen)
    # Each chunk padded on its own, then the per-image losses come back in sample order.
    whole = Recorder()(**to_device(collate(_samples(4), samples_per_gpu=4), "cpu"))
    torch.testing.assert_close(out["per_image"], whole["per_image"])


def test_data_parallel_rejects_bad_kwargs() -> None:
    with pytest.raises(TypeError, match="module_kwargs must be None or a dict"):
        data_parallel(nn.Identity(), torch.ones(2), ["cpu"], module_kwargs=[1])


@needs_cuda
def test_cuda_single_device_train_step_runs_on_that_device() -> None:
    k = torch.cuda.device_count() - 1
    model = Recorder()
    wrapped = MMDataParallel(model, device_ids=[k])
    assert model.w.device == torch.device("cuda", k)
    out = wrapped.train_step(collate(_samples(2), samples_per_gpu=2))
    assert model.seen[-1]["img"].device == torch.device("cuda", k)
    assert all(g.device == torch.device("cuda", k) for g in model.seen[-1]["gt"])
    out["loss"].backward()
    assert model.w.grad.device == torch.device("cuda", k)


@needs_cuda
def test_cuda_params_placement_is_checked() -> None:
    model = Recorder()
    wrapped = MMDataParallel(model, device_ids=[0])
    model.extra = nn.Linear(1, 1)  # added on the CPU after wrapping
    with pytest.raises(ValueError, match=r"'extra.weight' is on cpu"):
        wrapped.train_step(collate(_samples(2), samples_per_gpu=2))
    with pytest.raises(ValueError, match=r"'extra.weight' is on cpu"):
        wrapped(**collate(_samples(2), samples_per_gpu=2))


@needs_cuda
@needs_2_gpus
def test_cuda_several_devices_refuse_train_and_val_step() -> None:
    wrapped = MMDataParallel(Recorder().cuda(0), device_ids=[0, 1])
    batch = collate(_samples(4), samples_per_gpu=2)
    for step in (wrapped.train_step, wrapped.val_step):
        with pytest.raises(ValueError, match="MMDistributedDataParallel.*torchrun"):
            step(batch)


@needs_cuda
@needs_2_gpus
def test_cuda_multi_gpu_forward_gathers_results_in_order() -> None:
    model = Recorder().cuda(0)
    wrapped = MMDataParallel(model, device_ids=[0, 1])
    with torch.no_grad():
        out = wrapped(**collate(_samples(6), samples_per_gpu=3))
    assert out["idx"] == list(range(6))
    assert out["per_image"].device == torch.device("cuda", 0) and out["per_image"].shape == (6,)
    devices = sorted(str(s["img"].device) for s in model.seen)
    assert devices == ["cuda:0", "cuda:1"]


@needs_cuda
@needs_2_gpus
def test_cuda_data_parallel_replicates_over_gpus() -> None:
    model = nn.Linear(3, 2).cuda(0)
    x = torch.randn(8, 3)
    out = data_parallel(model, x, device_ids=[0, 1], output_device=-1)
    torch.testing.assert_close(out, model(x.cuda(0)).cpu())


@pytest.mark.parametrize("device_ids", [["cpu", "cpu"], [-1, -1], ["cpu", -1]])
def test_repeated_cpu_targets_split_the_batch_as_scatter_does(device_ids: Any) -> None:
    model = Recorder()
    wrapped = MMDataParallel(model, device_ids=device_ids)
    batch = collate(_samples(4), samples_per_gpu=2)  # two chunks, one per target
    out = wrapped(**batch)
    assert len(model.seen) == 2  # the module ran once per chunk
    assert sorted(len(s["img_metas"]) for s in model.seen) == [2, 2]
    assert out["idx"] == [0, 1, 2, 3]  # gathered in target order
    assert out["per_image"].shape == (4,)
    whole = MMDataParallel(Recorder(), device_ids=["cpu"])(
        **collate(_samples(4), samples_per_gpu=4)
    )
    torch.testing.assert_close(out["per_image"], whole["per_image"])


def test_repeated_cpu_targets_refuse_train_step_naming_every_target() -> None:
    wrapped = MMDataParallel(Recorder(), device_ids=["cpu", "cpu"])
    batch = collate(_samples(4), samples_per_gpu=2)
    with pytest.raises(
        ValueError, match=r"train_step: runs on one device, got device_ids=\['cpu', 'cpu'\]"
    ):
        wrapped.train_step(batch)


def test_one_cpu_target_still_takes_a_batch_of_one_chunk_only() -> None:
    wrapped = MMDataParallel(Recorder(), device_ids=["cpu"])
    with pytest.raises(ValueError, match=r"2 chunks but only 1 target"):
        wrapped(**collate(_samples(4), samples_per_gpu=2))
