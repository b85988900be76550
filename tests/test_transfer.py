"""transfer: pack/unpack, to_device_batched on the CPU, pin_memory's structure handling."""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np
import pytest
import torch

from mmpar import DataContainer
from mmpar.packing import pack, unpack
from mmpar.transfer import PACK_LIMIT, pin_memory, to_device_batched

Pair = namedtuple("Pair", ["a", "b"])


def _mixed() -> list:
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(3, 5, generator=g),
        torch.randn(7, generator=g).half(),
        torch.randint(-(2**40), 2**40, (2, 3), generator=g),
        torch.randint(0, 255, (5,), generator=g).to(torch.uint8),
        torch.rand(4, 1, generator=g) > 0.5,
        torch.empty(0, 4),
        torch.empty(0, dtype=torch.int64),
        torch.tensor(2.5, dtype=torch.float64),
        torch.arange(12.0).view(3, 4).t(),  # not contiguous
        torch.arange(10, dtype=torch.int32)[3:7],  # storage offset
        torch.ones(1, dtype=torch.uint8),
    ]


def test_pack_unpack_round_trip() -> None:
    tensors = _mixed()
    buffer, layout = pack(tensors)
    assert buffer.dtype == torch.uint8 and buffer.dim() == 1
    out = unpack(buffer, layout)
    assert len(out) == len(tensors)
    for a, b in zip(tensors, out):
        assert b.dtype == a.dtype and b.shape == a.shape
        assert torch.equal(a, b)
    # every view lies in the one buffer
    assert all(t.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr() for t in out)


def test_layout_is_aligned_and_disjoint() -> None:
    tensors = _mixed()
    buffer, layout = pack(tensors)
    end = 0
    for (offset, nbytes, dtype, shape), t in zip(layout, tensors):
        assert offset % 64 == 0 and offset >= end
        assert nbytes == t.numel() * t.element_size() and dtype == t.dtype and shape == t.shape
        end = offset + nbytes
    assert buffer.numel() >= end and buffer.numel() % 64 == 0


def test_pack_nothing_and_only_empty() -> None:
    buffer, layout = pack([])
    assert buffer.numel() == 0 and layout == [] and unpack(buffer, layout) == []
    buffer, layout = pack([torch.empty(0, 3), torch.empty(0, dtype=torch.bool)])
    assert [t.shape for t in unpack(buffer, layout)] == [(0, 3), (0,)]


def test_pack_copies() -> None:
    t = torch.zeros(4)
    buffer, layout = pack([t])
    t.fill_(1)
    assert unpack(buffer, layout)[0].tolist() == [0.0] * 4


def test_to_device_batched_on_cpu() -> None:
    tensors = _mixed()
    out = to_device_batched(tensors, torch.device("cpu"))
    assert all(a is b for a, b in zip(tensors, out))  # nothing to do: no copy
    cast = to_device_batched(tensors, torch.device("cpu"), torch.float16)
    for a, b in zip(tensors, cast):
        assert b.dtype == (torch.float16 if a.is_floating_point() else a.dtype)
        assert torch.equal(b, a.to(b.dtype))
    assert PACK_LIMIT > 0


def test_pin_memory_structure_without_pinning() -> None:
    meta = DataContainer([[{"k": np.zeros(2)}]], cpu_only=True)
    data = OrderedDict(
        [
            ("meta", meta),
            ("s", "x"),
            ("n", 3),
            ("none", None),
            ("pair", Pair("a", ("b", 1))),
            ("l", ["c", 2.0]),
        ]
    )
    out = pin_memory(data)
    assert type(out) is OrderedDict and list(out) == list(data)
    assert out["meta"] is meta  # cpu_only containers are left alone
    assert out["s"] == "x" and out["n"] == 3 and out["none"] is None
    assert type(out["pair"]) is Pair and out["pair"] == Pair("a", ("b", 1))
    assert type(out["pair"].b) is tuple and out["l"] == ["c", 2.0]
    assert (
        pin_memory(DataContainer) is DataContainer
    )  # a class with a pin_memory method is not called


@pytest.mark.cuda
def test_pin_memory_pins_every_tensor() -> None:
    meta = DataContainer([[{"k": torch.zeros(2)}]], cpu_only=True)
    data = {
        "img": DataContainer([torch.zeros(2, 3)], stack=True),
        "gt": DataContainer([[torch.zeros(1, 4)]]),
        "meta": meta,
        "t": (torch.ones(2), [torch.ones(1)]),
    }
    out = pin_memory(data)
    assert out["img"].data[0].is_pinned() and out["gt"].data[0][0].is_pinned()
    assert out["t"][0].is_pinned() and out["t"][1][0].is_pinned() and type(out["t"]) is tuple
    assert out["meta"] is meta and not meta.data[0][0]["k"].is_pinned()
    assert out["img"].stack and not out["gt"].stack
