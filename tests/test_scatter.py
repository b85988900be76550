"""scatter and scatter_kwargs on CPU targets (repeated CPU targets take every splitting path)."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, namedtuple
from typing import Any, List

import numpy as np
import pytest
import torch

from mmpar import DataContainer, collate, scatter, scatter_kwargs

Pair = namedtuple("Pair", ["img", "label"])


@dataclasses.dataclass
class Batch:
    img: torch.Tensor
    name: str
    extra: Any = None


def _batch(n: int, spg: int) -> dict:
    samples = [
        {
            "img": DataContainer(torch.full((1, 2 + i % 2, 3), float(i)), stack=True),
            "gt": DataContainer(torch.full((i % 3, 4), float(i))),
            "meta": DataContainer({"idx": i}, cpu_only=True),
            "label": torch.tensor(i),
        }
        for i in range(n)
    ]
    return collate(samples, spg)


# ---------------------------------------------------------------- plain tensors


@pytest.mark.parametrize("target", [-1, "cpu", torch.device("cpu")])
def test_single_cpu_target_returns_the_tensor_itself(target: Any) -> None:
    t = torch.randn(4, 3)
    out = scatter(t, [target])
    assert len(out) == 1 and out[0] is t
    (kw_args,), (kw,) = scatter_kwargs((t,), {"x": t}, [target])
    assert kw_args[0] is t and kw["x"] is t


def test_repeated_cpu_targets_split_a_batch() -> None:
    t = torch.arange(8).view(4, 2)
    a, b = scatter(t, ["cpu", "cpu"])
    assert torch.equal(a, t[:2]) and torch.equal(b, t[2:])
    assert [p.tolist() for p in scatter(t, [-1, -1])] == [a.tolist(), b.tolist()]


@pytest.mark.parametrize("length, k", [(3, 4), (5, 4), (1, 3), (6, 4), (7, 3), (10, 4), (2, 2)])
def test_torch_chunk_semantics(length: int, k: int) -> None:
    t = torch.arange(length)
    out = scatter(t, ["cpu"] * k)
    expected = torch.chunk(t, k)
    assert len(out) == len(expected) <= k
    assert all(torch.equal(a, b) for a, b in zip(out, expected))


def test_split_along_another_dim() -> None:
    t = torch.arange(12).view(2, 6)
    out = scatter(t, ["cpu"] * 3, dim=1)
    assert [p.shape for p in out] == [(2, 2)] * 3
    assert torch.equal(torch.cat(out, 1), t)
    out = scatter(t, ["cpu"] * 2, dim=-1)
    assert [p.shape for p in out] == [(2, 3)] * 2
    with pytest.raises(ValueError, match=r"shape \(2, 6\), cannot split along dim=2"):
        scatter(t, ["cpu"], dim=2)
    with pytest.raises(TypeError, match="dim must be an int"):
        scatter(t, ["cpu"], dim=1.0)


def test_zero_dim_and_empty_tensors() -> None:
    scalar = torch.tensor(3.0)
    out = scatter({"s": scalar, "t": torch.arange(4)}, ["cpu"] * 2)
    assert out[0]["s"] is scalar and out[1]["s"] is scalar
    empty = scatter(torch.empty(0, 4), ["cpu"] * 2)
    assert [p.shape for p in empty] == [(0, 4)] * 2


# ---------------------------------------------------------------- containers


def test_container_chunk_i_goes_to_target_i() -> None:
    batch = _batch(5, 2)
    out = scatter(batch, ["cpu"] * 3)
    assert len(out) == 3
    for i, piece in enumerate(out):
        assert not any(isinstance(v, DataContainer) for v in piece.values())
        assert piece["img"] is batch["img"].data[i]
        assert all(a is b for a, b in zip(piece["gt"], batch["gt"].data[i]))
        assert piece["meta"] is batch["meta"].data[i]  # cpu_only chunk handed over as it is
    assert [[m["idx"] for m in p["meta"]] for p in out] == [[0, 1], [2, 3], [4]]
    assert [p["label"].tolist() for p in out] == [[0, 1], [2, 3], [4]]


def test_cpu_only_data_is_never_converted() -> None:
    meta = [[{"a": np.zeros(2)}, torch.zeros(1)]]
    out = scatter({"meta": DataContainer(meta, cpu_only=True)}, ["cpu"], dtype=torch.float16)
    assert out[0]["meta"] is meta[0]
    assert out[0]["meta"][1].dtype == torch.float32


def test_numpy_in_non_cpu_only_containers_becomes_tensors() -> None:
    samples = [{"gt": DataContainer(np.full((i + 1, 4), i, dtype=np.float32))} for i in range(4)]
    out = scatter(collate(samples, 2), ["cpu"] * 2)
    for i, piece in enumerate(out):
        assert all(isinstance(t, torch.Tensor) for t in piece["gt"])
        assert [t.shape[0] for t in piece["gt"]] == [2 * i + 1, 2 * i + 2]
        assert piece["gt"][0].dtype == torch.float32
    (moved,) = scatter(DataContainer([np.arange(3)]), [-1])
    assert isinstance(moved, torch.Tensor) and moved.tolist() == [0, 1, 2]


def test_uncollated_container_is_one_chunk() -> None:
    t = torch.ones(2, 3)
    out = scatter(DataContainer(t, stack=True), ["cpu", "cpu"])
    assert len(out) == 1 and out[0] is t


def test_structures_are_rebuilt_per_target_with_their_types() -> None:
    t = torch.arange(4)
    inputs = (
        [t, "s"],
        OrderedDict([("z", t), ("a", 1)]),
        Pair(t, "lbl"),
        Batch(t, "name", extra={"inner": (t,)}),
        (t,),
    )
    out = scatter(inputs, ["cpu", "cpu"])
    assert len(out) == 2
    for i, (lst, od, pair, dc, tup) in enumerate(out):
        half = t[2 * i : 2 * i + 2]
        assert type(lst) is list and torch.equal(lst[0], half) and lst[1] == "s"
        assert type(od) is OrderedDict and list(od) == ["z", "a"] and torch.equal(od["z"], half)
        assert type(pair) is Pair and torch.equal(pair.img, half) and pair.label == "lbl"
        assert type(dc) is Batch and torch.equal(dc.img, half) and dc.name == "name"
        assert type(dc.extra["inner"]) is tuple and torch.equal(dc.extra["inner"][0], half)
        assert type(tup) is tuple and torch.equal(tup[0], half)


def test_non_splittable_values_given_by_reference_to_every_used_target() -> None:
    names = ["a.jpg", "b.jpg"]
    obj = object()
    inputs = {
        "t": torch.arange(4),
        "none": None,
        "n": 3,
        "f": 0.5,
        "s": "x",
        "names": names,
        "nums": [1, 2],
        "empty_list": [],
        "empty_dict": {},
        "empty_tuple": (),
        "obj": obj,
        "arr": np.arange(4),
    }
    out = scatter(inputs, ["cpu"] * 3)
    assert len(out) == 2  # 4 samples over 3 targets: torch.chunk gives 2/2
    for piece in out:
        for key in inputs:
            if key != "t":
                assert piece[key] is inputs[key], key


def test_nothing_to_split_gives_every_target_the_input() -> None:
    inputs = {"names": ["a", "b"], "k": 1}
    out = scatter(inputs, ["cpu"] * 3)
    assert len(out) == 3 and all(p is inputs for p in out)
    assert scatter([], [-1]) == [[]]


# ---------------------------------------------------------------- one cut for all fields


def test_every_field_must_split_into_the_same_number_of_pieces() -> None:
    with pytest.raises(ValueError, match=r"same number of pieces.*'a'.*2.*'b'.*1"):
        scatter({"a": torch.zeros(4), "b": torch.zeros(1)}, ["cpu", "cpu"])
    c2 = DataContainer([torch.zeros(1), torch.zeros(1)])
    c3 = DataContainer([torch.zeros(1)] * 3)
    with pytest.raises(ValueError, match=r"same number of pieces.*'x'.*2 chunks.*'y'.*3"):
        scatter({"x": c2, "y": c3}, ["cpu"] * 4)


def test_more_chunks_than_targets_is_an_error() -> None:
    with pytest.raises(
        ValueError, match=r"field 'img' holds 3 chunks but only 2 target\(s\).*never dropped"
    ):
        scatter(_batch(5, 2), ["cpu", "cpu"])


@pytest.mark.parametrize(
    "n, spg, k, sizes",
    [(5, 2, 3, [2, 2, 1]), (5, 3, 4, [3, 2]), (5, 4, 2, [4, 1]), (4, 1, 4, [1, 1, 1, 1])],
)
def test_plain_tensors_split_at_container_boundaries(
    n: int, spg: int, k: int, sizes: List[int]
) -> None:
    batch = _batch(n, spg)
    out = scatter(batch, ["cpu"] * k)
    assert [len(p["label"]) for p in out] == sizes
    for piece in out:
        assert piece["label"].tolist() == [m["idx"] for m in piece["meta"]]
        assert piece["img"][:, 0, 0, 0].tolist() == [float(i) for i in piece["label"].tolist()]


def test_plain_tensor_length_must_match_the_containers() -> None:
    batch = _batch(4, 2)
    batch["extra"] = torch.zeros(5)
    with pytest.raises(
        ValueError, match=r"field 'extra' holds 5 samples but the containers' chunks hold \[2, 2\]"
    ):
        scatter(batch, ["cpu"] * 2)


def test_containers_disagreeing_on_chunk_sizes() -> None:
    a = DataContainer([torch.zeros(2, 3), torch.zeros(1, 3)], stack=True)
    b = DataContainer([[1], [2, 3]], cpu_only=True)
    with pytest.raises(ValueError, match=r"disagree on their chunks.*'a'.*\[2, 1\].*'b'.*\[1, 2\]"):
        scatter({"a": a, "b": b}, ["cpu"] * 2)


# ---------------------------------------------------------------- chunk_sizes, max_size, dtype


def test_chunk_sizes() -> None:
    t = torch.arange(6)
    out = scatter(t, ["cpu"] * 3, chunk_sizes=[1, 5])
    assert [p.tolist() for p in out] == [[0], [1, 2, 3, 4, 5]]
    out = scatter({"t": t, "meta": "m"}, ["cpu"] * 3, chunk_sizes=(2, 2, 2))
    assert [p["t"].tolist() for p in out] == [[0, 1], [2, 3], [4, 5]]
    assert scatter(_batch(5, 2), ["cpu"] * 3, chunk_sizes=[2, 2, 1])[2]["label"].tolist() == [4]


@pytest.mark.parametrize(
    "chunk_sizes, pattern",
    [
        ([1, 4], r"chunk_sizes=\[1, 4\] sum to 5 but field 'inputs' holds 6"),
        ([1, 1, 1, 3], r"4 pieces for 3 target"),
        ([], r"0 pieces for 3 target"),
        ([0, 6], r"positive ints"),
        ([2.0, 4], r"positive ints"),
        (6, r"positive ints"),
    ],
)
def test_bad_chunk_sizes(chunk_sizes: Any, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        scatter(torch.arange(6), ["cpu"] * 3, chunk_sizes=chunk_sizes)


def test_chunk_sizes_must_agree_with_containers() -> None:
    with pytest.raises(
        ValueError,
        match=r"chunk_sizes=\[3, 2\] must equal the collated containers' chunk sizes \[2, 2, 1\]",
    ):
        scatter(_batch(5, 2), ["cpu"] * 3, chunk_sizes=[3, 2])


def test_max_size() -> None:
    out = scatter(torch.arange(6), ["cpu"] * 3, max_size=2)
    assert [len(p) for p in out] == [2, 2, 2]
    with pytest.raises(
        ValueError, match=r"max_size=2 but field 'inputs' would give the targets \[3, 3\] samples"
    ):
        scatter(torch.arange(6), ["cpu"] * 2, max_size=2)
    with pytest.raises(
        ValueError, match=r"max_size=1 but field 'img' would give the targets \[2, 2, 1\]"
    ):
        scatter(_batch(5, 2), ["cpu"] * 3, max_size=1)
    assert len(scatter(_batch(5, 2), ["cpu"] * 3, max_size=2)) == 3
    with pytest.raises(ValueError, match=r"max_size must be a positive int"):
        scatter(torch.arange(6), ["cpu"], max_size=0)


def test_dtype_casts_floats_only() -> None:
    inputs = {
        "f": torch.ones(4, dtype=torch.float32),
        "i": torch.arange(4),
        "b": torch.ones(4, dtype=torch.bool),
        "gt": DataContainer([[torch.ones(2, 4, dtype=torch.float64)]]),
    }
    for piece in scatter(inputs, ["cpu", "cpu"], dtype=torch.float16):
        assert piece["f"].dtype == torch.float16
        assert piece["i"].dtype == torch.int64 and piece["b"].dtype == torch.bool
    (one,) = scatter(inputs, [-1], dtype=torch.bfloat16)
    assert one["gt"][0].dtype == torch.bfloat16 and one["i"] is inputs["i"]


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, "float16", 2])
def test_non_float_dtype_rejected(dtype: Any) -> None:
    with pytest.raises(ValueError, match="dtype must be a floating-point torch.dtype"):
        scatter(torch.ones(2), ["cpu"], dtype=dtype)


# ---------------------------------------------------------------- targets


def test_target_spellings_are_equivalent() -> None:
    t = torch.arange(4)
    for targets in (
        [-1, -1],
        ["cpu", "cpu"],
        [torch.device("cpu")] * 2,
        ["cpu", -1],
        ("cpu", "cpu"),
    ):
        out = scatter(t, targets)
        assert [p.tolist() for p in out] == [[0, 1], [2, 3]]


def test_no_targets() -> None:
    with pytest.raises(ValueError, match="target_gpus: needs at least one target"):
        scatter(torch.zeros(2), [])


@pytest.mark.parametrize(
    "targets, exc, pattern",
    [
        (["tpu"], ValueError, r"target_gpus\[0\]: unknown device 'tpu'"),
        (["cpu", "banana"], ValueError, r"target_gpus\[1\]: unknown device 'banana'"),
        ([-2], ValueError, r"target_gpus\[0\]: a device index is -1 \(CPU\) or >= 0, got -2"),
        (["meta"], ValueError, r"target_gpus\[0\]: only CPU and CUDA targets"),
        ([1.0], TypeError, r"target_gpus\[0\]: expected an int, str or torch.device, got float"),
        ([True], TypeError, r"target_gpus\[0\]: expected an int, str or torch.device, got bool"),
        (-1, TypeError, r"target_gpus: expected a list of targets"),
        ("cpu", TypeError, r"target_gpus: expected a list of targets"),
    ],
)
def test_unknown_targets(targets: Any, exc: type, pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        scatter(torch.zeros(2), targets)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on machines without CUDA")
@pytest.mark.parametrize("target", [0, "cuda", "cuda:1", torch.device("cuda", 0)])
def test_cuda_target_without_cuda(target: Any) -> None:
    with pytest.raises(
        ValueError, match=r"target_gpus\[0\]: cuda.* requested but CUDA is not available"
    ):
        scatter(torch.zeros(2), [target])


# ---------------------------------------------------------------- scatter_kwargs


def test_scatter_kwargs_joint_split_and_types() -> None:
    batch = _batch(5, 2)
    inputs, kwargs = scatter_kwargs(
        (batch["img"],),
        {"gt": batch["gt"], "meta": batch["meta"], "label": batch["label"], "mode": "train"},
        ["cpu"] * 3,
    )
    assert type(inputs) is tuple and type(kwargs) is tuple
    assert len(inputs) == len(kwargs) == 3
    assert all(type(a) is tuple for a in inputs) and all(type(k) is dict for k in kwargs)
    for i, (args, kw) in enumerate(zip(inputs, kwargs)):
        assert args[0] is batch["img"].data[i]
        assert kw["label"].tolist() == [m["idx"] for m in kw["meta"]]
        assert kw["mode"] == "train"


def test_scatter_kwargs_pads_the_shorter_side() -> None:
    t = torch.arange(4)
    inputs, kwargs = scatter_kwargs((t,), {}, ["cpu", "cpu"])
    assert kwargs == ({}, {}) and [a[0].tolist() for a in inputs] == [[0, 1], [2, 3]]
    inputs, kwargs = scatter_kwargs((), {"x": t}, ["cpu", "cpu"])
    assert inputs == ((), ()) and [k["x"].tolist() for k in kwargs] == [[0, 1], [2, 3]]
    inputs, kwargs = scatter_kwargs(None, None, [-1])
    assert inputs == ((),) and kwargs == ({},)


def test_scatter_kwargs_single_input_and_list_input() -> None:
    t = torch.arange(4)
    inputs, kwargs = scatter_kwargs(t, None, ["cpu"])
    assert inputs[0][0] is t and kwargs == ({},)
    inputs, _ = scatter_kwargs([t, "s"], None, ["cpu", "cpu"])
    assert [type(a) for a in inputs] == [tuple, tuple] and inputs[1][1] == "s"


def test_scatter_kwargs_fields_must_agree_across_args_and_kwargs() -> None:
    with pytest.raises(ValueError, match=r"same number of pieces"):
        scatter_kwargs((torch.zeros(4),), {"x": torch.zeros(1)}, ["cpu", "cpu"])


@pytest.mark.parametrize("kwargs", ["ab", [("a", 1)], 3])
def test_scatter_kwargs_needs_a_mapping(kwargs: Any) -> None:
    with pytest.raises(TypeError, match=r"scatter_kwargs: kwargs must be a dict or None"):
        scatter_kwargs((), kwargs, ["cpu"])


def test_defaultdict_keeps_its_type_and_factory() -> None:
    from collections import defaultdict

    inputs = defaultdict(list, {"t": torch.arange(4)})
    out = scatter(inputs, ["cpu", "cpu"])
    assert all(type(p) is defaultdict and p.default_factory is list for p in out)
    assert [p["t"].tolist() for p in out] == [[0, 1], [2, 3]]


def test_a_container_with_no_chunk_is_an_error_not_an_empty_result() -> None:
    with pytest.raises(ValueError, match=r"'x' is a DataContainer holding no chunk"):
        scatter({"x": DataContainer([]), "y": torch.ones(4)}, ["cpu", "cpu"])
    with pytest.raises(ValueError, match=r"'kwargs.x' is a DataContainer holding no chunk"):
        scatter_kwargs((), {"x": DataContainer([])}, ["cpu"])
