"""register_type: a user type through collate, scatter, to_device, gather and pin_memory."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Sequence

import pytest
import torch

from mmpar import (
    DataContainer,
    collate,
    gather,
    pin_memory,
    register_type,
    scatter,
    to_device,
    unregister_type,
)
from mmpar.transfer import pin_tensor
from mmpar.type_handlers import TypeHandler, get_handler


class BoxList:
    """The boxes of a batch of images: one ``(n_i, 4)`` tensor per image."""

    def __init__(self, boxes: Sequence[torch.Tensor]) -> None:
        self.boxes = list(boxes)

    def __len__(self) -> int:
        return len(self.boxes)

    @staticmethod
    def cat(parts: Sequence["BoxList"]) -> "BoxList":
        return BoxList([b for p in parts for b in p.boxes])

    def split(self, sizes: List[int]) -> List["BoxList"]:
        out, start = [], 0
        for s in sizes:
            out.append(BoxList(self.boxes[start : start + s]))
            start += s
        return out

    def to(self, device: torch.device) -> "BoxList":
        return BoxList([b.to(device) for b in self.boxes])

    def pin_memory(self) -> "BoxList":
        # pin_tensor, not Tensor.pin_memory: an image without boxes is a 0-element tensor,
        # which torch leaves unpinned.
        return BoxList([pin_tensor(b) for b in self.boxes])


class RotatedBoxList(BoxList):
    pass


@pytest.fixture
def boxlist_registered() -> Iterator[TypeHandler]:
    handler = register_type(
        BoxList,
        collate=BoxList.cat,
        split=lambda b, sizes: b.split(sizes),
        to=lambda b, device: b.to(device),
        gather=lambda pieces, device: BoxList.cat([p.to(device) for p in pieces]),
        pin_memory=lambda b: b.pin_memory(),
    )
    yield handler
    unregister_type(BoxList)


def _hooks(**changed: Any) -> Dict[str, Any]:
    """BoxList's hooks as the methods themselves, without ``pin_memory``, updated by ``changed``."""
    hooks: Dict[str, Any] = dict(
        collate=BoxList.cat,
        split=BoxList.split,
        to=BoxList.to,
        gather=lambda ps, d: BoxList.cat(ps),
    )
    hooks.update(changed)
    return hooks


def _samples(n: int) -> list:
    return [
        {
            "img": DataContainer(torch.full((1, 2, 2), float(i)), stack=True),
            "meta": DataContainer({"idx": i}, cpu_only=True),
            "boxes": BoxList([torch.full((i % 3, 4), float(i))]),
            "label": torch.tensor(i),
        }
        for i in range(n)
    ]


def _ids(b: BoxList) -> List[int]:
    return [int(t[0, 0]) if len(t) else -1 for t in b.boxes]


def test_collated_split_moved_and_gathered(boxlist_registered: TypeHandler) -> None:
    batch = collate(_samples(5), samples_per_gpu=2)
    assert isinstance(batch["boxes"], BoxList) and len(batch["boxes"]) == 5
    pieces = scatter(batch, ["cpu"] * 3)
    assert [len(p["boxes"]) for p in pieces] == [2, 2, 1]  # split with the other fields
    for p in pieces:
        expected = [i if i % 3 else -1 for i in p["label"].tolist()]
        assert _ids(p["boxes"]) == expected
        assert [m["idx"] for m in p["meta"]] == p["label"].tolist()
    back = gather([p["boxes"] for p in pieces], "cpu")
    assert isinstance(back, BoxList) and _ids(back) == [-1, 1, 2, -1, 4]
    merged = gather(pieces, "cpu")
    assert isinstance(merged["boxes"], BoxList) and len(merged["boxes"]) == 5


def test_plain_split_without_containers(boxlist_registered: TypeHandler) -> None:
    b = BoxList([torch.zeros(1, 4) + i for i in range(4)])
    pieces = scatter({"b": b, "t": torch.arange(4)}, ["cpu"] * 3)  # torch.chunk: 2/2
    assert [_ids(p["b"]) for p in pieces] == [[0, 1], [2, 3]]
    (whole,) = scatter(b, [-1])
    assert _ids(whole) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"same number of pieces.*'b'.*'t'"):
        scatter({"b": b, "t": torch.arange(1)}, ["cpu"] * 2)


def test_inside_a_plain_container_each_sample_is_moved(boxlist_registered: TypeHandler) -> None:
    samples = [{"boxes": DataContainer(BoxList([torch.ones(1, 4) * i]))} for i in range(4)]
    batch = collate(samples, 2)
    pieces = scatter(batch, ["cpu", "cpu"])
    assert [[_ids(b) for b in p["boxes"]] for p in pieces] == [[[0], [1]], [[2], [3]]]
    one = to_device(collate(samples[:2], 2), "cpu")
    assert all(isinstance(b, BoxList) for b in one["boxes"])


def test_subclasses_use_the_base_handler(boxlist_registered: TypeHandler) -> None:
    assert get_handler(RotatedBoxList([])) is boxlist_registered
    assert get_handler(BoxList([])) is boxlist_registered


def test_pin_memory_uses_the_hook() -> None:
    seen = []

    def pin(b: BoxList) -> BoxList:
        seen.append(b)
        return BoxList(b.boxes[::-1])

    register_type(BoxList, **_hooks(pin_memory=pin))
    try:
        b = BoxList([torch.zeros(1, 4), torch.ones(1, 4)])
        out = pin_memory({"b": b, "meta": ("x", 1)})
        assert seen == [b] and _ids(out["b"]) == [1, 0] and out["meta"] == ("x", 1)
    finally:
        unregister_type(BoxList)


def test_pin_memory_defaults_to_no_pinning() -> None:
    register_type(BoxList, **_hooks())
    try:
        b = BoxList([torch.zeros(1, 4)])
        assert pin_memory(b) is b
    finally:
        unregister_type(BoxList)


@pytest.mark.cuda
def test_pinned_for_real(boxlist_registered: TypeHandler) -> None:
    out = pin_memory(collate(_samples(2), 2))
    assert all(t.is_pinned() for t in out["boxes"].boxes)
    assert out["img"].data[0].is_pinned()


def test_unregister() -> None:
    register_type(BoxList, **_hooks())
    unregister_type(BoxList)
    assert get_handler(BoxList([])) is None
    unregister_type(BoxList)  # a no-op the second time
    with pytest.raises(TypeError, match="cannot batch BoxList"):
        collate([BoxList([]), BoxList([])])
    b = BoxList([torch.zeros(1, 4)])
    assert scatter({"b": b}, ["cpu"]) == [{"b": b}]  # an unknown object: given by reference


@pytest.mark.parametrize(
    "cls, hooks, exc, pattern",
    [
        (BoxList(()), {}, TypeError, "cls must be a class"),
        (dict, {}, ValueError, "dict is a type mmpar already handles"),
        (torch.Tensor, {}, ValueError, "Tensor is a type mmpar already handles"),
        (BoxList, {"split": None}, TypeError, "split must be callable"),
        (BoxList, {"pin_memory": 3}, TypeError, "pin_memory must be callable"),
    ],
)
def test_register_errors(cls: object, hooks: dict, exc: type, pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        register_type(cls, **_hooks(**hooks))
    assert get_handler(BoxList([])) is None
