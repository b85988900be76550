"""DataContainer: properties, validation, repr, len and pickling (a real DataLoader worker too)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from mmpar import DataContainer


class _ContainerDataset(Dataset):
    """Each item is a dict of the three kinds of container."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> dict:
        return {
            "img": DataContainer(
                torch.full((3, 2 + i, 2), float(i)), stack=True, padding_value=7, pad_dims=2
            ),
            "boxes": DataContainer(torch.arange(4 * i, dtype=torch.float32).view(i, 4)),
            "meta": DataContainer({"idx": i, "name": f"img{i}.jpg"}, cpu_only=True),
            "ids": DataContainer(
                torch.arange(i + 1), stack=True, pad_dims=1, size_divisor=4, padding_value=-1
            ),
        }


def _identity(batch: list) -> list:
    return batch


def test_properties_of_a_tensor_container() -> None:
    t = torch.zeros(3, 4, 5)
    dc = DataContainer(t, stack=True, padding_value=255, pad_dims=3, size_divisor=8)
    assert dc.data is t
    assert dc.datatype == "torch.FloatTensor"
    assert dc.stack is True and dc.cpu_only is False
    assert dc.padding_value == 255 and dc.pad_dims == 3 and dc.size_divisor == 8
    assert dc.size() == torch.Size([3, 4, 5]) and dc.size(1) == 4
    assert dc.dim() == 3
    assert len(dc) == 3


def test_defaults() -> None:
    dc = DataContainer([1, 2])
    assert (dc.stack, dc.padding_value, dc.cpu_only, dc.pad_dims, dc.size_divisor) == (
        False,
        0,
        False,
        2,
        None,
    )


@pytest.mark.parametrize(
    "data, expected",
    [
        (torch.zeros(2, dtype=torch.int64), "torch.LongTensor"),
        (torch.zeros(2, dtype=torch.uint8), "torch.ByteTensor"),
        ({"a": 1}, dict),
        ("name", str),
        (np.zeros(3), np.ndarray),
        ([torch.zeros(1)], list),
    ],
)
def test_datatype(data: object, expected: object) -> None:
    assert DataContainer(data).datatype == expected


@pytest.mark.parametrize(
    "flag", ["data", "stack", "padding_value", "cpu_only", "pad_dims", "size_divisor", "datatype"]
)
def test_flags_are_read_only(flag: str) -> None:
    dc = DataContainer(torch.zeros(1))
    with pytest.raises(AttributeError):
        setattr(dc, flag, 1)


@pytest.mark.parametrize("data", [{"a": 1}, [torch.zeros(2)], np.zeros((2, 2)), "abc"])
def test_size_and_dim_only_for_tensors(data: object) -> None:
    dc = DataContainer(data, cpu_only=True)
    assert not hasattr(dc, "size")
    assert not hasattr(dc, "dim")
    with pytest.raises(AttributeError, match="size"):
        dc.size()
    with pytest.raises(AttributeError, match="dim"):
        dc.dim()
    assert hasattr(DataContainer(torch.zeros(1)), "size")


def test_len() -> None:
    assert len(DataContainer([1, 2, 3])) == 3
    assert len(DataContainer({"a": 1, "b": 2}, cpu_only=True)) == 2
    assert len(DataContainer(torch.zeros(5, 2))) == 5


@pytest.mark.parametrize(
    "data", [torch.arange(3), {"filename": "a.jpg", "shape": (2, 3)}, [1, "x"], None, "s"]
)
def test_repr_is_exactly_the_data_repr(data: object) -> None:
    assert repr(DataContainer(data, cpu_only=True)) == f"DataContainer({data!r})"


@pytest.mark.parametrize("pad_dims", [None, 1, 2, 3])
def test_valid_pad_dims(pad_dims: object) -> None:
    assert DataContainer(torch.zeros(1), pad_dims=pad_dims).pad_dims == pad_dims


@pytest.mark.parametrize("pad_dims", [0, 4, -1, True, False, "2", 1.0, 2.0])
def test_invalid_pad_dims(pad_dims: object) -> None:
    with pytest.raises(ValueError, match="pad_dims"):
        DataContainer(torch.zeros(1), stack=True, pad_dims=pad_dims)


@pytest.mark.parametrize("padding_value", ["0", None, True, [0]])
def test_invalid_padding_value(padding_value: object) -> None:
    with pytest.raises(TypeError, match="padding_value"):
        DataContainer(torch.zeros(1), padding_value=padding_value)


def test_numpy_scalar_padding_value_is_a_number() -> None:
    dc = DataContainer(torch.zeros(1), stack=True, padding_value=np.float32(0.5))
    assert dc.padding_value == 0.5


@pytest.mark.parametrize("pad_dims", [1, 2, 3])
@pytest.mark.parametrize("size_divisor", [1, 32])
def test_size_divisor_with_stack_and_int_pad_dims(pad_dims: int, size_divisor: int) -> None:
    assert (
        DataContainer(
            torch.zeros(1), stack=True, pad_dims=pad_dims, size_divisor=size_divisor
        ).size_divisor
        == size_divisor
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(stack=False, pad_dims=2, size_divisor=32),
        dict(stack=True, pad_dims=None, size_divisor=32),
        dict(stack=False, pad_dims=None, size_divisor=32),
        dict(cpu_only=True, size_divisor=32),
        dict(stack=True, size_divisor=0),
        dict(stack=True, size_divisor=-4),
        dict(stack=True, size_divisor=2.0),
        dict(stack=True, size_divisor=True),
        dict(stack=True, size_divisor="32"),
    ],
)
def test_invalid_size_divisor_combinations(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="size_divisor"):
        DataContainer(torch.zeros(1), **kwargs)


def test_with_data_keeps_every_flag() -> None:
    dc = DataContainer(torch.zeros(1), stack=True, padding_value=3, pad_dims=1, size_divisor=4)
    new = dc.with_data([torch.ones(2)])
    assert isinstance(new.data, list) and torch.equal(new.data[0], torch.ones(2))
    assert (new.stack, new.padding_value, new.cpu_only, new.pad_dims, new.size_divisor) == (
        True,
        3,
        False,
        1,
        4,
    )
    assert dc.data.shape == (1,)  # the original is untouched


def _same_container(a: DataContainer, b: DataContainer) -> None:
    for flag in ("stack", "padding_value", "cpu_only", "pad_dims", "size_divisor"):
        assert getattr(a, flag) == getattr(b, flag), flag
    assert type(a.data) is type(b.data)


def test_pickle_and_deepcopy_round_trip() -> None:
    dc = DataContainer(
        torch.arange(6.0).view(2, 3), stack=True, padding_value=-2.5, pad_dims=1, size_divisor=4
    )
    for clone in (pickle.loads(pickle.dumps(dc)), copy.deepcopy(dc)):
        _same_container(clone, dc)
        assert torch.equal(clone.data, dc.data) and clone.data is not dc.data
    meta = DataContainer({"k": np.arange(3)}, cpu_only=True, pad_dims=None)
    clone = pickle.loads(pickle.dumps(meta))
    _same_container(clone, meta)
    assert np.array_equal(clone.data["k"], np.arange(3))


def test_containers_survive_a_real_dataloader_worker() -> None:
    loader = DataLoader(_ContainerDataset(), batch_size=2, num_workers=2, collate_fn=_identity)
    batches = list(loader)
    received = [sample for batch in batches for sample in batch]
    expected = [_ContainerDataset()[i] for i in range(4)]
    assert len(received) == 4
    for got, want in zip(received, expected):
        assert list(got) == list(want)
        for key in want:
            assert isinstance(got[key], DataContainer)
            _same_container(got[key], want[key])
        assert torch.equal(got["img"].data, want["img"].data)
        assert torch.equal(got["boxes"].data, want["boxes"].data)
        assert torch.equal(got["ids"].data, want["ids"].data)
        assert got["meta"].data == want["meta"].data


def test_pad_dims_accepts_numpy_integers_as_plain_ints() -> None:
    dc = DataContainer(torch.ones(2, 2), stack=True, pad_dims=np.int64(2))
    assert dc.pad_dims == 2 and type(dc.pad_dims) is int
