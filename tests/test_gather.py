"""gather: per-target outputs back to one device."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, namedtuple
from typing import Any

import pytest
import torch

from mmpar import gather

Out = namedtuple("Out", ["loss", "preds"])


@dataclasses.dataclass
class Result:
    scores: torch.Tensor
    names: list
    tag: str = "r"
    cached: int = dataclasses.field(default=0, init=False)


def test_tensors_concatenated_along_dim() -> None:
    a, b = torch.zeros(2, 3), torch.ones(1, 3)
    assert torch.equal(gather([a, b], -1), torch.cat([a, b]))
    c, d = torch.zeros(2, 1), torch.ones(2, 2)
    assert torch.equal(gather([c, d], "cpu", dim=1), torch.cat([c, d], 1))
    assert torch.equal(gather((a,), torch.device("cpu")), a)


def test_zero_dim_tensors_stacked_into_a_vector() -> None:
    out = gather([torch.tensor(1.5), torch.tensor(2.5), torch.tensor(3.0)], "cpu")
    assert out.shape == (3,) and out.tolist() == [1.5, 2.5, 3.0]


def test_dicts_key_by_key_keep_type_and_order() -> None:
    outs = [
        OrderedDict(
            [("loss", torch.tensor(float(i))), ("logits", torch.full((i + 1, 2), float(i)))]
        )
        for i in range(2)
    ]
    got = gather(outs, -1)
    assert type(got) is OrderedDict and list(got) == ["loss", "logits"]
    assert got["loss"].tolist() == [0.0, 1.0]
    assert got["logits"].shape == (3, 2)


def test_differing_keys_are_named() -> None:
    with pytest.raises(
        ValueError, match=r"different keys; target 1 lacks \['b'\] and adds \['c'\]"
    ):
        gather([{"a": 1, "b": 2}, {"a": 1, "c": 2}], "cpu")
    with pytest.raises(ValueError, match=r"field 'outer'.*lacks \['y'\]"):
        gather([{"outer": {"x": 1, "y": 2}}, {"outer": {"x": 1}}], "cpu")


def test_tuples_and_namedtuples_keep_type() -> None:
    got = gather([(torch.zeros(1), "a"), (torch.ones(1), "b")], "cpu")
    assert type(got) is tuple and got[0].tolist() == [0.0, 1.0] and got[1] == ["a", "b"]
    got = gather([Out(torch.tensor(1.0), [1]), Out(torch.tensor(2.0), [2, 3])], "cpu")
    assert type(got) is Out and got.loss.tolist() == [1.0, 2.0] and got.preds == [1, 2, 3]
    with pytest.raises(ValueError, match=r"tuples of lengths \[2, 1\]"):
        gather([(1, 2), (1,)], "cpu")


def test_dataclasses_keep_type() -> None:
    got = gather([Result(torch.zeros(2), ["a", "b"]), Result(torch.ones(1), ["c"], tag="s")], "cpu")
    assert type(got) is Result
    assert (
        got.scores.tolist() == [0.0, 0.0, 1.0]
        and got.names == ["a", "b", "c"]
        and got.tag == ["r", "s"]
    )


def test_lists_concatenated_in_target_order_unequal_lengths_kept() -> None:
    per_target = [
        [{"boxes": torch.zeros(1, 4)}, {"boxes": torch.zeros(2, 4)}],
        [{"boxes": torch.zeros(3, 4)}],
        [],
    ]
    got = gather(per_target, "cpu")
    assert [r["boxes"].shape[0] for r in got] == [1, 2, 3]
    assert gather([[1, 2, 3], [4]], "cpu") == [1, 2, 3, 4]


def test_none_stays_none_and_other_values_come_back_as_a_list() -> None:
    assert gather([None, None], "cpu") is None
    assert gather([{"aux": None, "n": 1}, {"aux": None, "n": 2}], "cpu") == {
        "aux": None,
        "n": [1, 2],
    }
    assert gather(["a", "b"], "cpu") == ["a", "b"]


@pytest.mark.parametrize(
    "outputs, exc, pattern",
    [
        ([], ValueError, "outputs is empty"),
        (torch.zeros(2), TypeError, "outputs must be a list"),
        ("ab", TypeError, "outputs must be a list"),
        ([torch.zeros(1), None], TypeError, "target 0 returned Tensor, target 1 NoneType"),
        (
            [{"a": torch.zeros(1)}, {"a": [1]}],
            TypeError,
            r"field 'a': target 0 returned Tensor, target 1 list",
        ),
        ([1.5, 2], TypeError, "target 0 returned float, target 1 int"),
    ],
)
def test_errors(outputs: Any, exc: type, pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        gather(outputs, "cpu")


def test_tensors_that_cannot_be_joined_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"field 'logits'.*\(2, 3\).*\(2, 4\)"):
        gather([{"logits": torch.zeros(2, 3)}, {"logits": torch.zeros(2, 4)}], "cpu")
    with pytest.raises(ValueError, match=r"gather: outputs.*\(\).*\(1,\)"):
        gather([torch.tensor(1.0), torch.zeros(1)], "cpu")


@pytest.mark.parametrize("target, exc", [("tpu", ValueError), (None, TypeError), ([-1], TypeError)])
def test_bad_target_device(target: Any, exc: type) -> None:
    with pytest.raises(exc, match="target_device"):
        gather([torch.zeros(1)], target)
