"""Failures found by fuzzing the data path (tests/test_fuzz_data_path.py), kept as plain tests.

Each test names what went wrong before the fix.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmpar.collate import collate
from mmpar.data_container import DataContainer
from mmpar.gather import gather
from mmpar.scatter_gather import scatter


def _stacked(dtype: torch.dtype, padding_value: object) -> list:
    return [
        {
            "mask": DataContainer(
                torch.ones(1, 2, dtype=dtype), stack=True, padding_value=padding_value
            )
        },
        {
            "mask": DataContainer(
                torch.ones(1, 3, dtype=dtype), stack=True, padding_value=padding_value
            )
        },
    ]


@pytest.mark.parametrize(
    "dtype, padding_value",
    [
        (torch.uint8, -1),  # was written as 255
        (torch.uint8, 256),  # was written as 0
        (torch.int64, 0.5),  # was written as 0
        (torch.int64, float("nan")),  # RuntimeError from fill_
        (torch.bool, 2),  # was written as True
        (torch.float16, 1e6),  # was written as inf
        (torch.int64, 2**70),  # OverflowError from fill_
    ],
)
def test_padding_value_the_dtype_cannot_hold_is_rejected_by_name(
    dtype: torch.dtype, padding_value: object
) -> None:
    with pytest.raises(ValueError, match=r"field 'mask'.*padding_value"):
        collate(_stacked(dtype, padding_value), samples_per_gpu=2)


def test_padding_value_is_checked_even_when_no_margin_is_filled() -> None:
    # Same-size images would pass and the first odd-sized batch fail mid-training.
    same = [
        {"mask": DataContainer(torch.ones(1, 2, dtype=torch.uint8), stack=True, padding_value=-1)}
    ] * 2
    with pytest.raises(ValueError, match="'mask'"):
        collate(same, samples_per_gpu=2)


@pytest.mark.parametrize(
    "dtype, padding_value, expected",
    [
        (torch.uint8, 255, 255),
        (torch.int64, np.float32(-2.0), -2),
        (torch.bool, 1.0, True),
        (torch.float64, 2**100, float(2**100)),  # OverflowError from fill_ before
        (torch.float16, float("-inf"), float("-inf")),
    ],
)
def test_padding_value_the_dtype_holds_is_written_exactly(
    dtype: torch.dtype, padding_value: object, expected: object
) -> None:
    (batch,) = collate(_stacked(dtype, padding_value), samples_per_gpu=2)["mask"].data
    assert batch[0, 0, 2].item() == expected
    assert batch[1].eq(1).all()


def test_numpy_strings_in_a_container_are_kept_not_converted() -> None:
    # scatter raised torch's "can't convert np.ndarray of type numpy.str_" naming no field.
    samples = [{"names": DataContainer(np.array([f"s{i}", "x"]))} for i in range(3)]
    pieces = scatter(collate(samples, samples_per_gpu=2), ["cpu", -1])
    names = [a for piece in pieces for a in piece["names"]]
    assert all(isinstance(a, np.ndarray) and a[0] == f"s{i}" for i, a in enumerate(names))


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6.0).reshape(2, 3)[:, ::-1],  # np.fliplr: negative strides
        np.arange(6.0).reshape(2, 3).astype(">f8"),  # big-endian
        np.broadcast_to(np.arange(3.0), (2, 3)),  # read-only view
    ],
    ids=["flipped", "big-endian", "read-only"],
)
def test_numpy_arrays_torch_cannot_view_are_copied_into_tensors(array: np.ndarray) -> None:
    # scatter raised torch's ValueError ("negative strides", "byte order") naming no field.
    samples = [{"boxes": DataContainer(array)} for _ in range(2)]
    (piece,) = scatter(collate(samples, samples_per_gpu=2), ["cpu"])
    for t in piece["boxes"]:
        assert isinstance(t, torch.Tensor) and t.tolist() == np.array(array).tolist()
    merged = gather([piece["boxes"]], "cpu")
    assert len(merged) == 2


def test_plain_int_beyond_64_bits_is_rejected_by_name() -> None:
    # default_collate's "Overflow when unpacking long long" named no field.
    with pytest.raises(ValueError, match="field 'ann_id'"):
        collate([{"ann_id": 2**70}, {"ann_id": 1}])
