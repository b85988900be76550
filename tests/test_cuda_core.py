"""The core on a real GPU: scatter/to_device/gather with CUDA targets, packing, streams, pinning."""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from mmpar import DataContainer, collate, gather, scatter, scatter_kwargs, to_device
from mmpar.transfer import PACK_LIMIT, to_device_batched

pytestmark = [
    pytest.mark.cuda,
]


def _samples(n: int) -> list:
    return [
        {
            "img": DataContainer(torch.full((3, 4 + i, 5), float(i)), stack=True),
            "gt_bboxes": DataContainer(torch.full((i % 3, 4), float(i))),
            "gt_labels": DataContainer(torch.full((i % 3,), i, dtype=torch.int64)),
            "img_metas": DataContainer({"idx": i}, cpu_only=True),
            "label": torch.tensor(i),
        }
        for i in range(n)
    ]


def _structure(x: object) -> object:
    """Types, shapes and dtypes of a scattered piece, without devices."""
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), x.dtype)
    if isinstance(x, dict):
        return {k: _structure(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x), [_structure(v) for v in x]
    return x


def test_scatter_to_cuda_matches_cpu() -> None:
    batch = collate(_samples(3), samples_per_gpu=3)
    (gpu,) = scatter(batch, [0])
    (cpu,) = scatter(batch, [-1])
    assert _structure(gpu) == _structure(cpu)
    assert gpu["img"].device == torch.device("cuda", 0)
    assert all(t.is_cuda for t in gpu["gt_bboxes"] + gpu["gt_labels"]) and gpu["label"].is_cuda
    assert gpu["img_metas"] is batch["img_metas"].data[0]  # cpu_only stays on the CPU, untouched
    assert torch.equal(gpu["img"].cpu(), cpu["img"])
    assert all(torch.equal(a.cpu(), b) for a, b in zip(gpu["gt_bboxes"], cpu["gt_bboxes"]))


def test_repeated_cuda_target_splits() -> None:
    batch = collate(_samples(4), samples_per_gpu=2)
    pieces = scatter(batch, ["cuda:0", "cuda:0"])
    assert [p["label"].tolist() for p in pieces] == [[0, 1], [2, 3]]
    assert [[m["idx"] for m in p["img_metas"]] for p in pieces] == [[0, 1], [2, 3]]
    inputs, kwargs = scatter_kwargs((batch["img"],), {"meta": batch["img_metas"]}, [0, 0])
    assert all(a[0].is_cuda for a in inputs) and len(kwargs) == 2


def test_small_tensors_travel_in_one_packed_copy() -> None:
    batch = collate(_samples(4), samples_per_gpu=4)
    (gpu,) = scatter(batch, [0])
    # The containers' tensors are views of the chunk's one copy; the plain tensor
    # ("label", collated outside any container) travels in the one packed copy.
    small = gpu["gt_bboxes"] + gpu["gt_labels"] + [gpu["img"]]
    assert len({t.untyped_storage().data_ptr() for t in small}) == 1
    assert gpu["label"].tolist() == [0, 1, 2, 3]
    loose = [torch.ones(3), torch.zeros(2, 4), torch.arange(5), torch.tensor(7)]
    moved = to_device_batched(loose, torch.device("cuda", 0))
    assert len({t.untyped_storage().data_ptr() for t in moved}) == 1
    assert all(torch.equal(a.cpu(), b) for a, b in zip(moved, loose))
    big = torch.zeros(PACK_LIMIT // 4 + 1)
    moved = to_device_batched([big, torch.ones(2)], torch.device("cuda", 0))
    assert moved[0].untyped_storage().data_ptr() != moved[1].untyped_storage().data_ptr()
    assert moved[0].sum().item() == 0 and moved[1].tolist() == [1.0, 1.0]


def test_per_image_tensors_of_different_trailing_shapes_or_dtypes_arrive_intact() -> None:
    # Per-image masks (n_i, H_i, W_i): one container field, trailing shapes differ by image;
    # a list mixing dtypes or non-tensors must not be packed as one group either.
    masks = [torch.zeros(0, 5, 5), torch.ones(1, 3, 3), torch.full((2, 3, 4), 2.0)]
    mixed = [torch.arange(3), torch.ones(2, 4), 7, torch.tensor(1.5)]
    (gpu_masks,) = scatter({"gt_masks": DataContainer([masks])}, [0])
    (gpu_mixed,) = scatter({"mixed": DataContainer([mixed])}, [0])
    for got, want in zip(gpu_masks["gt_masks"] + gpu_mixed["mixed"], masks + mixed):
        if isinstance(want, torch.Tensor):
            assert got.is_cuda and got.dtype == want.dtype and torch.equal(got.cpu(), want)
        else:
            assert got == want
    moved = to_device_batched(masks, torch.device("cuda", 0))
    assert [tuple(t.shape) for t in moved] == [(0, 5, 5), (1, 3, 3), (2, 3, 4)]
    assert all(torch.equal(a.cpu(), b) for a, b in zip(moved, masks))


def test_result_usable_at_once_on_the_current_stream() -> None:
    big = torch.randn(16, 1024, 1024)  # large enough for the copy to take a while
    small = [torch.full((100,), float(i)) for i in range(50)]
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        (out,) = scatter({"big": big, "small": DataContainer([small])}, [0])
        total = out["big"].sum()
        small_sums = torch.stack([t.sum() for t in out["small"]])
    consumer.synchronize()
    assert torch.allclose(total.cpu(), big.sum(), rtol=1e-3, atol=1e-1)
    assert small_sums.cpu().tolist() == [100.0 * i for i in range(50)]


def test_dtype_cast_on_gpu() -> None:
    (out,) = scatter({"x": torch.ones(2), "i": torch.arange(2)}, [0], dtype=torch.float16)
    assert out["x"].dtype == torch.float16 and out["x"].is_cuda and out["i"].dtype == torch.int64


def test_to_device_cuda() -> None:
    out = to_device(collate(_samples(2), 2), "cuda:0")
    assert out["img"].is_cuda and isinstance(out["img_metas"][0], dict)


def test_gather_from_cuda_to_cpu() -> None:
    outs = [
        {"loss": torch.tensor(1.0, device="cuda"), "dets": [torch.ones(2, 5, device="cuda")]},
        {
            "loss": torch.tensor(2.0, device="cuda"),
            "dets": [torch.zeros(1, 5, device="cuda"), torch.ones(3, 5, device="cuda")],
        },
    ]
    got = gather(outs, -1)
    assert got["loss"].device.type == "cpu" and got["loss"].tolist() == [1.0, 2.0]
    assert [d.device.type for d in got["dets"]] == ["cpu"] * 3
    assert [d.shape[0] for d in got["dets"]] == [2, 1, 3]
    assert gather([torch.ones(1, device="cuda")], 0).is_cuda


def test_data_container_pin_memory() -> None:
    dc = DataContainer([torch.zeros(2, 3), [torch.ones(1)]])
    pinned = dc.pin_memory()
    assert pinned.data[0].is_pinned() and pinned.data[1][0].is_pinned()
    meta = DataContainer([{"t": torch.zeros(1)}], cpu_only=True)
    assert meta.pin_memory() is meta


class _Dataset(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> dict:
        return _samples(4)[i]


def test_dataloader_pin_memory_pins_container_data() -> None:
    loader = DataLoader(
        _Dataset(),
        batch_size=4,
        num_workers=2,
        pin_memory=True,
        collate_fn=functools.partial(collate, samples_per_gpu=2),
    )
    (batch,) = list(loader)
    assert isinstance(batch["img"], DataContainer)
    assert all(t.is_pinned() for t in batch["img"].data)
    assert all(t.is_pinned() for chunk in batch["gt_bboxes"].data for t in chunk)
    assert batch["label"].is_pinned()
    assert batch["img_metas"].data == [[{"idx": 0}, {"idx": 1}], [{"idx": 2}, {"idx": 3}]]


def test_small_tensors_that_require_grad_keep_their_history() -> None:
    x = torch.ones(3, 2, requires_grad=True)  # small: would be packed, but packing detaches
    boxes = torch.ones(2, 4)
    (piece,) = scatter({"x": x, "boxes": DataContainer([[boxes]])}, [0])
    assert piece["x"].requires_grad and piece["x"].is_cuda
    (piece["x"] * 2).sum().backward()
    assert torch.equal(x.grad, torch.full((3, 2), 2.0))
    with torch.no_grad():  # no history to keep: packed like the rest
        (again,) = scatter({"x": x}, [0])
    assert not again["x"].requires_grad
