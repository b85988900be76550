"""mmcv 1.x's DataContainers go through mmpar's core (no patch) and come out as mmpar's."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
import torch
import torch.distributed as dist
from torch import nn

from mmpar import (
    DataContainer,
    MMDataParallel,
    MMDistributedDataParallel,
    as_container,
    collate,
    scatter,
    to_device,
)
from mmpar.data_container import container_classes
from mmpar.transfer import pin_memory
from tests._containers import has_container
from tests.compat._mmcv_env import requires_mmcv

pytestmark = requires_mmcv


@pytest.fixture(scope="module")
def mmcv_parallel() -> Any:
    import mmcv.parallel

    return mmcv.parallel


def _samples(dc_cls: type, n: int = 5) -> List[Dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    return [
        {
            "img": dc_cls(torch.rand(3, 10 + i, 14 - i, generator=g), stack=True),
            "seg": dc_cls(
                torch.full((1, 6 + i), float(i)), stack=True, padding_value=255, pad_dims=1
            ),
            "gt_bboxes": dc_cls(torch.rand(i, 4, generator=g)),
            "img_metas": dc_cls({"index": i, "img_shape": (10 + i, 14 - i, 3)}, cpu_only=True),
            "plain": torch.tensor([i]),
        }
        for i in range(n)
    ]


def _assert_same(a: Any, b: Any) -> None:
    """Equal structure, tensors and container flags; containers must be mmpar's on the left."""
    if isinstance(b, container_classes()):
        assert type(a) is DataContainer
        for flag in ("stack", "cpu_only", "padding_value", "pad_dims"):
            assert getattr(a, flag) == getattr(b, flag), flag
        _assert_same(a.data, b.data)
    elif isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(b, dict):
        assert isinstance(a, dict) and list(a) == list(b)
        for k in b:
            _assert_same(a[k], b[k])
    elif isinstance(b, (list, tuple)):
        assert isinstance(a, (list, tuple)) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b


def test_as_container_adopts_mmcv_containers_without_copying(mmcv_parallel: Any) -> None:
    data = torch.rand(2, 3)
    foreign = mmcv_parallel.DataContainer(data, stack=True, padding_value=3, pad_dims=1)
    adopted = as_container(foreign)
    assert type(adopted) is DataContainer and adopted.data is data
    assert (adopted.stack, adopted.padding_value, adopted.cpu_only, adopted.pad_dims) == (
        True,
        3,
        False,
        1,
    )
    own = DataContainer(data)
    assert as_container(own) is own
    assert as_container(data) is None and as_container({"data": 1}) is None
    assert container_classes() == (DataContainer, mmcv_parallel.DataContainer)


def test_an_mmcv_container_mmpar_cannot_hold_is_a_clear_error(mmcv_parallel: Any) -> None:
    # mmcv does not check padding_value; mmpar does, and names the class and the flag.
    bad = mmcv_parallel.DataContainer(torch.zeros(1), stack=True, padding_value="zero")
    with pytest.raises(
        TypeError,
        match=r"cannot adopt mmcv\.parallel\.data_container\.DataContainer.*padding_value",
    ):
        as_container(bad)
    with pytest.raises(TypeError, match="padding_value"):
        collate([{"img": bad}])


def test_collate_of_mmcv_containers_equals_collate_of_mmpar_ones(mmcv_parallel: Any) -> None:
    ours = collate(_samples(DataContainer), samples_per_gpu=2)
    theirs = collate(_samples(mmcv_parallel.DataContainer), samples_per_gpu=2)
    _assert_same(theirs, ours)
    assert [t.shape for t in theirs["img"].data] == [(2, 3, 11, 14), (2, 3, 13, 12), (1, 3, 14, 10)]
    assert (
        theirs["seg"].data[2][0, 0, -1] == 4
    )  # pad_dims=1 and padding 255 kept: the last sample fills its chunk


def test_collate_agrees_with_mmcv_collate_on_mmcv_containers(mmcv_parallel: Any) -> None:
    samples = _samples(mmcv_parallel.DataContainer)
    ours, theirs = (
        collate(samples, samples_per_gpu=2),
        mmcv_parallel.collate(samples, samples_per_gpu=2),
    )
    # mmcv's collate resets pad_dims to its default (2) on the batch; mmpar keeps the samples' 1.
    assert (ours["seg"].pad_dims, theirs["seg"].pad_dims) == (1, 2)
    _assert_same(ours["seg"].data, theirs["seg"].data)
    del ours["seg"], theirs["seg"]
    _assert_same(ours, theirs)


def test_containers_of_both_libraries_mix_in_one_field(mmcv_parallel: Any) -> None:
    mixed = _samples(mmcv_parallel.DataContainer)
    mixed[1] = _samples(DataContainer)[1]
    _assert_same(collate(mixed, 2), collate(_samples(DataContainer), 2))


@pytest.mark.parametrize("first_is_container", [True, False])
def test_a_field_wrapped_in_some_samples_only_names_the_field(
    mmcv_parallel: Any, first_is_container: bool
) -> None:
    samples = [{"x": mmcv_parallel.DataContainer(torch.zeros(2))}, {"x": torch.zeros(2)}]
    if not first_is_container:
        samples.reverse()
    with pytest.raises(ValueError, match=r"field 'x'.*DataContainer in sample"):
        collate(samples)


def test_scatter_of_an_mmcv_collated_batch_equals_scatter_of_mmpar_s(mmcv_parallel: Any) -> None:
    theirs = scatter(
        mmcv_parallel.collate(_samples(mmcv_parallel.DataContainer), 2), ["cpu", "cpu", "cpu"]
    )
    ours = scatter(collate(_samples(DataContainer), 2), ["cpu", "cpu", "cpu"])
    assert len(theirs) == 3 and not has_container(theirs)
    _assert_same(theirs, ours)


def test_to_device_unwraps_an_mmcv_batch(mmcv_parallel: Any) -> None:
    batch = mmcv_parallel.collate(_samples(mmcv_parallel.DataContainer), samples_per_gpu=5)
    moved = to_device(batch, "cpu")
    assert not has_container(moved)
    assert moved["img"].shape == (5, 3, 14, 14) and moved["img_metas"][4]["index"] == 4


def test_pin_memory_returns_mmpar_containers(mmcv_parallel: Any) -> None:
    metas = mmcv_parallel.DataContainer({"index": 0}, cpu_only=True)
    pinned = pin_memory({"img_metas": metas})["img_metas"]
    assert type(pinned) is DataContainer and pinned.data == {"index": 0} and pinned.cpu_only


@pytest.mark.cuda
def test_pin_memory_pins_mmcv_container_data(mmcv_parallel: Any) -> None:
    pinned = pin_memory([mmcv_parallel.DataContainer(torch.rand(3, 4), stack=True)])[0]
    assert type(pinned) is DataContainer and pinned.stack and pinned.data.is_pinned()


class _Detector(nn.Module):
    """Refuses containers of either library; returns what it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(
        self,
        img: torch.Tensor,
        img_metas: list,
        gt_bboxes: list,
        seg: torch.Tensor,
        plain: torch.Tensor,
    ) -> dict:
        assert not has_container([img, img_metas, gt_bboxes, seg, plain]), (
            "a container reached the model"
        )
        return {"loss": (img * self.scale).mean(), "n": len(img_metas), "boxes": len(gt_bboxes)}

    def train_step(self, data: dict, optimizer: Any) -> dict:
        return self(**data)


def test_mmdataparallel_unwraps_an_mmcv_collated_batch(mmcv_parallel: Any) -> None:
    batch = mmcv_parallel.collate(_samples(mmcv_parallel.DataContainer), samples_per_gpu=5)
    model = MMDataParallel(_Detector(), device_ids=["cpu"])
    out = model.train_step(batch, None)
    assert out["n"] == 5 and out["boxes"] == 5
    out["loss"].backward()
    assert model.module.scale.grad is not None
    assert model(**batch)["n"] == 5


@pytest.fixture
def one_rank_group() -> Any:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_mmdistributeddataparallel_unwraps_an_mmcv_collated_batch(
    mmcv_parallel: Any, one_rank_group: Any
) -> None:
    batch = mmcv_parallel.collate(_samples(mmcv_parallel.DataContainer), samples_per_gpu=5)
    model = MMDistributedDataParallel(_Detector())
    out = model.train_step(batch, None)
    assert out["n"] == 5 and out["boxes"] == 5
    out["loss"].backward()
    assert model.module.scale.grad is not None
