"""Fuzzing collate -> scatter -> gather: no sample lost, duplicated, mixed or altered.

For every generated batch (see ``tests/strategies.py``) the pipeline either returns
every sample exactly once, in order, with its values intact (padded margins hold
the sample's padding value, the rest equals the original), or raises a TypeError
or ValueError whose message names the offending field. Any other exception, or a
wrong value, is a bug.

Examples per property: ``MMPAR_FUZZ_EXAMPLES`` (default 400, the "mmpar-fuzz"
settings profile); e.g. ``MMPAR_FUZZ_EXAMPLES=20000 pytest tests/test_fuzz_data_path.py``.
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings

from mmpar.collate import collate
from mmpar.data_container import DataContainer
from mmpar.gather import gather
from mmpar.scatter_gather import scatter, scatter_kwargs
from tests.strategies import Case, Leaf, cases, leaves

settings.register_profile(
    "mmpar-fuzz",
    max_examples=int(os.environ.get("MMPAR_FUZZ_EXAMPLES", "400")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile("mmpar-fuzz")

_CONTAINER_KINDS = ("stack", "list", "cpu")


# --------------------------------------------------------------------------- #
# The "model": per target, one result per sample it received
# --------------------------------------------------------------------------- #
def _at(value: Any, path_keys: List[Any]) -> Any:
    for key in path_keys:
        value = value[key]
    return value


def _keyed_leaves(schema: Any) -> List[Tuple[str, List[Any], Leaf]]:
    """``(path, keys to reach it, leaf)`` for every leaf of the schema."""
    out: List[Tuple[str, List[Any], Leaf]] = []

    def walk(node: Any, path: str, keys: List[Any]) -> None:
        if isinstance(node, Leaf):
            out.append((path, keys, node))
            return
        for key, child in node.children:
            walk(
                child,
                f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else key),
                keys + [key],
            )

    walk(schema, "", [])
    return out


def _piece_len(schema: Any, piece: Any) -> int:
    for _, keys, leaf in _keyed_leaves(schema):
        if leaf.kind != "string":
            value = _at(piece, keys)
            return value.shape[0] if isinstance(value, torch.Tensor) else len(value)
    raise AssertionError("schema without a splittable field")


def model(schema: Any, piece: Any) -> Dict[str, Any]:
    """What a detector's ``forward_test`` would do: one result per sample of its piece."""
    n = _piece_len(schema, piece)
    per_sample = [
        {
            path: _at(piece, keys)[j]
            for path, keys, leaf in _keyed_leaves(schema)
            if leaf.kind != "string"
        }
        for j in range(n)
    ]
    shared = {
        path: _at(piece, keys)
        for path, keys, leaf in _keyed_leaves(schema)
        if leaf.kind == "string"
    }
    return {"samples": per_sample, "shared": [shared], "count": torch.tensor([n])}


def run_pipeline(case: Case) -> Tuple[List[Any], Dict[str, Any]]:
    batch = collate(case.samples, case.samples_per_gpu)
    if case.use_kwargs:
        args, pieces = scatter_kwargs((), batch, case.targets)
        assert all(a == () for a in args)
    else:
        pieces = scatter(batch, case.targets)
    assert 1 <= len(pieces) <= len(case.targets)
    return list(pieces), gather([model(case.schema, p) for p in pieces], "cpu")


# --------------------------------------------------------------------------- #
# The oracle
# --------------------------------------------------------------------------- #
def _same(a: Any, b: Any) -> bool:
    """Deep equality: tensors and arrays by dtype, shape and values (NaN equals NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(torch.equal(a, b) or _equal_nan(a, b))
        )
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b)
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _equal_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _padded_shape(case: Case, keys: List[Any], i: int) -> Tuple[int, ...]:
    spg = case.samples_per_gpu
    members = range(i // spg * spg, min(len(case.samples), (i // spg + 1) * spg))
    shapes = [tuple(_at(case.samples[m], keys).data.shape) for m in members]
    dc: DataContainer = _at(case.samples[i], keys)
    k = dc.pad_dims or 0
    first = shapes[0]
    out = list(first[: len(first) - k])
    for d in range(len(first) - k, len(first)):
        size = max(s[d] for s in shapes)
        if dc.size_divisor:
            size = math.ceil(size / dc.size_divisor) * dc.size_divisor
        out.append(size)
    return tuple(out)


def _check_stacked(case: Case, keys: List[Any], i: int, got: torch.Tensor, path: str) -> None:
    dc: DataContainer = _at(case.samples[i], keys)
    original = dc.data
    assert got.dtype == original.dtype, path
    assert tuple(got.shape) == _padded_shape(case, keys, i), (path, got.shape)
    region = tuple(slice(0, s) for s in original.shape)
    assert _same(got[region].contiguous(), original), f"{path}: sample {i} content changed"
    margin = torch.ones(got.shape, dtype=torch.bool)
    margin[region] = False
    fill = torch.tensor(float(dc.padding_value)).to(original.dtype)
    values = got[margin]
    assert _same(values, fill.expand(values.shape).contiguous()), f"{path}: sample {i} padding"


def _expected_plain(leaf: Leaf, original: Any) -> Any:
    if leaf.kind in ("ndarray", "list") and isinstance(original, np.ndarray):
        # strings stay arrays; numbers become tensors (a copy: the original may be flipped or
        # read-only)
        return original if original.dtype.kind in "US" else torch.from_numpy(np.array(original))
    if leaf.kind == "number":
        return torch.tensor(
            original, dtype=torch.float64 if isinstance(original, float) else torch.int64
        )
    return original


def check_intact(case: Case, pieces: List[Any], out: Dict[str, Any]) -> None:
    n = len(case.samples)
    if any(leaf.kind in _CONTAINER_KINDS for _, leaf in leaves(case.schema)):
        assert len(pieces) == case.chunks
    assert int(out["count"].sum()) == n and len(out["samples"]) == n
    for path, keys, leaf in _keyed_leaves(case.schema):
        if leaf.kind == "string":
            whole = [_at(s, keys) for s in case.samples]
            assert all(shared[path] == whole for shared in out["shared"]), path
            continue
        for i, result in enumerate(out["samples"]):
            got, original = result[path], _at(case.samples[i], keys)
            if leaf.kind == "stack":
                _check_stacked(case, keys, i, got, path)
            elif leaf.kind == "cpu":
                assert _same(got, original.data), (path, i)
            elif leaf.kind == "list":
                assert _same(got, _expected_plain(leaf, original.data)), (path, i)
            else:
                assert _same(got, _expected_plain(leaf, original)), (path, i, got, original)


def check_case(case: Case) -> str:
    """Run one case through the oracle; returns ``"ok"`` or ``"rejected"``."""
    has_containers = any(leaf.kind in _CONTAINER_KINDS for _, leaf in leaves(case.schema))
    too_few_targets = has_containers and case.chunks > len(case.targets)
    try:
        pieces, out = run_pipeline(case)
    except (TypeError, ValueError) as err:
        message = str(err)
        if too_few_targets and "target" in message:
            return "rejected"
        assert case.mutation is not None, f"valid batch rejected: {message}"
        assert any(name in message for name in case.mutation.names), (
            f"message does not name the field {case.mutation.names}: {message}"
        )
        return "rejected"
    assert not too_few_targets, "more chunks than targets must be rejected"
    assert case.mutation is None or not case.mutation.must_fail, (
        f"inconsistent batch accepted: {case.mutation}"
    )
    check_intact(case, pieces, out)
    return "ok"


# --------------------------------------------------------------------------- #
# Properties
# --------------------------------------------------------------------------- #
@pytest.mark.slow
@FUZZ
@given(cases(valid_only=True))
def test_valid_batches_arrive_intact(case: Case) -> None:
    event(check_case(case))


@pytest.mark.slow
@FUZZ
@given(cases())
def test_inconsistent_batches_are_rejected_by_name_or_arrive_intact(case: Case) -> None:
    outcome = check_case(case)
    event(f"{case.mutation.what if case.mutation else 'consistent'}: {outcome}")
