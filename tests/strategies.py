"""Hypothesis strategies for fuzzing the data path: samples, batches and targets.

A batch is drawn in two steps. First a *schema*: the structure every sample of the
batch shares (nested dicts, lists, tuples and namedtuples whose leaves are
:class:`Leaf` specs: DataContainers of every kind, plain tensors, numpy arrays,
numbers and strings). Then ``n`` samples built from it, each with its own random
shapes (where a field's shapes may vary) and values. A :class:`Case` may carry one
deliberate inconsistency (:class:`Mutation`) applied to one sample.

The oracle lives in ``tests/test_fuzz_data_path.py``; this module only builds data.

API:

``cases(valid_only=False) -> SearchStrategy[Case]``
    A batch, its ``samples_per_gpu``, a list of CPU targets and, unless
    ``valid_only``, maybe one mutation.
``targets(k) -> SearchStrategy[list]``
    ``k`` CPU targets mixing ``-1``, ``"cpu"`` and ``torch.device("cpu")``.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, List, Optional, Tuple

import numpy as np
import torch
from hypothesis import strategies as st

from mmpar.data_container import DataContainer

__all__ = [
    "Case",
    "Leaf",
    "Mutation",
    "Node",
    "Pair",
    "Triple",
    "DTYPES",
    "build_sample",
    "cases",
    "child_path",
    "leaves",
    "targets",
]

Pair = collections.namedtuple("Pair", ["first", "second"])
Triple = collections.namedtuple("Triple", ["x", "y", "z"])

DTYPES = (torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool)

#: Padding values every dtype can hold exactly (numpy scalars included).
_PADDING = {
    torch.float32: [0, -1, 0.5, 255, np.float32(2.5), float("-inf"), float("nan")],
    torch.float16: [0, -1, 0.5, 255, np.float32(-0.25)],
    torch.int64: [0, -1, 7, 2**40, np.int64(-3)],
    torch.uint8: [0, 1, 255, np.uint8(9)],
    torch.bool: [0, 1],
}
#: Padding values the dtype cannot hold: collate must reject them.
_BAD_PADDING = {
    torch.float32: [],
    torch.float16: [1e6, -70000.0],
    torch.int64: [0.5, 2**70, float("nan"), float("inf")],
    torch.uint8: [-1, 256, 1.5],
    torch.bool: [2, -1, 0.5],
}

_NUMPY_DTYPES = ("float32", "float16", "int64", "uint8", "bool")


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One field of the schema.

    ``kind`` is one of ``stack``, ``list`` (a DataContainer that is neither stack
    nor cpu_only), ``cpu`` (cpu_only), ``tensor``, ``ndarray``, ``number``,
    ``string``. ``ndim``/``lead`` describe tensors: ``lead`` holds the sizes
    shared by every sample (all dims for plain tensors; the dims before the
    padded ones for ``stack``). ``numpy`` marks a ``list``/``cpu`` container
    holding a numpy array; ``payload`` what a ``cpu`` container holds.
    """

    kind: str
    dtype: torch.dtype = torch.float32
    ndim: int = 0
    lead: Tuple[int, ...] = ()
    pad_dims: Optional[int] = None
    size_divisor: Optional[int] = None
    numpy: bool = False
    payload: str = "dict"


@dataclasses.dataclass(frozen=True)
class Node:
    """A dict, list, tuple or namedtuple of children (names or positions)."""

    kind: str  # "dict", "list", "tuple", "namedtuple"
    children: Tuple[Tuple[Any, Any], ...]  # ((key, Leaf | Node), ...)


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One inconsistency applied to sample ``sample`` at ``path``.

    ``must_fail`` when collate can never accept it (keys, lengths, kinds, flags,
    plain shapes, unrepresentable padding); otherwise it may pass as long as every
    value arrives intact (e.g. dtypes that differ between two chunks). ``names``
    are the strings of which the error message must hold at least one.
    """

    what: str
    sample: int
    path: str
    must_fail: bool
    names: Tuple[str, ...]


@dataclasses.dataclass
class Case:
    """A batch ready for collate -> scatter -> gather."""

    schema: Any
    samples: List[Any]
    samples_per_gpu: int
    targets: List[Any]
    mutation: Optional[Mutation] = None
    use_kwargs: bool = False

    @property
    def chunks(self) -> int:
        return math.ceil(len(self.samples) / self.samples_per_gpu)


def child_path(path: str, key: Any) -> str:
    """How mmpar's messages name a nested field: ``a.b``, ``a[1]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def leaves(schema: Any, path: str = "") -> List[Tuple[str, Leaf]]:
    """Every ``(path, leaf)`` of a schema, depth first in order."""
    if isinstance(schema, Leaf):
        return [(path, schema)]
    out: List[Tuple[str, Leaf]] = []
    for key, child in schema.children:
        out += leaves(child, child_path(path, key))
    return out


# --------------------------------------------------------------------------- #
# Schemas
# --------------------------------------------------------------------------- #
_sizes = st.integers(0, 4)


@st.composite
def _leaf(draw: st.DrawFn) -> Leaf:
    kind = draw(
        st.sampled_from(["stack", "stack", "list", "cpu", "tensor", "ndarray", "number", "string"])
    )
    dtype = draw(st.sampled_from(DTYPES))
    if kind == "stack":
        pad_dims = draw(st.sampled_from([None, 1, 2, 3]))
        k = pad_dims or 0
        ndim = draw(st.integers(k, k + 2))
        lead = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim - k, max_size=ndim - k)))
        divisor = draw(st.sampled_from([None, 1, 2, 4, 5])) if pad_dims else None
        return Leaf(kind, dtype, ndim, lead, pad_dims, divisor)
    if kind in ("tensor", "ndarray"):
        lead = tuple(draw(st.lists(_sizes, max_size=3)))
        return Leaf(kind, dtype, len(lead), lead)
    if kind == "list":
        numpy = draw(st.booleans())
        # numpy layouts: plain, flipped (negative strides), read-only, strings
        layout = (
            draw(st.sampled_from(["plain", "flipped", "readonly", "str"])) if numpy else "plain"
        )
        return Leaf(kind, dtype, draw(st.integers(0, 3)), numpy=numpy, payload=layout)
    if kind == "cpu":
        return Leaf(
            kind, dtype, 2, payload=draw(st.sampled_from(["dict", "string", "ndarray", "tensor"]))
        )
    return Leaf(kind, dtype)


def _node(children: st.SearchStrategy) -> st.SearchStrategy:
    keys = st.sampled_from(["img", "gt_bboxes", "img_metas", "mask", "x", "y", "z", "1"])
    dicts = st.dictionaries(keys, children, min_size=1, max_size=4).map(
        lambda d: Node("dict", tuple(d.items()))
    )
    seqs = st.tuples(
        st.sampled_from(["list", "tuple"]), st.lists(children, min_size=1, max_size=3)
    ).map(lambda kv: Node(kv[0], tuple(enumerate(kv[1]))))
    named = st.one_of(st.tuples(children, children), st.tuples(children, children, children)).map(
        lambda t: Node("namedtuple", tuple(enumerate(t)))
    )
    return st.one_of(dicts, seqs, named)


def _schemas() -> st.SearchStrategy:
    """A schema whose root is a node and which has at least one leaf that splits."""
    tree = st.recursive(_leaf(), _node, max_leaves=6)

    def ensure_splittable(root: Any) -> Any:
        if isinstance(root, Leaf):
            root = Node("dict", (("img", root),))
        if not any(leaf.kind not in ("string",) for _, leaf in leaves(root)):
            root = Node(
                root.kind if root.kind == "dict" else "dict",
                root.children + (("label", Leaf("number")),),
            )
            if root.children[0][0] == 0:  # was a sequence: keep keys unique
                root = Node("dict", tuple((f"k{i}", c) for i, (_, c) in enumerate(root.children)))
        return root

    return tree.map(ensure_splittable)


# --------------------------------------------------------------------------- #
# Samples
# --------------------------------------------------------------------------- #
def _values(shape: Tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    high = 256 if dtype == torch.uint8 else 1000
    return torch.randint(0, high, shape, generator=g).to(dtype)


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.numpy().copy()


@st.composite
def build_sample(draw: st.DrawFn, schema: Any, index: int) -> Any:
    """One sample of ``schema``; ``index`` seeds its values (every sample differs)."""
    if isinstance(schema, Node):
        values = [(key, draw(build_sample(child, index))) for key, child in schema.children]
        if schema.kind == "dict":
            return dict(values)
        items = [v for _, v in values]
        if schema.kind == "namedtuple":
            return (Pair if len(items) == 2 else Triple)(*items)
        return tuple(items) if schema.kind == "tuple" else items
    leaf: Leaf = schema
    seed = draw(st.integers(0, 2**31 - 1))
    if leaf.kind == "stack":
        k = leaf.pad_dims or 0
        own = tuple(draw(st.lists(_sizes, min_size=k, max_size=k)))
        padding = draw(st.sampled_from(_PADDING[leaf.dtype]))
        return DataContainer(
            _values(leaf.lead + own, leaf.dtype, seed),
            stack=True,
            padding_value=padding,
            pad_dims=leaf.pad_dims,
            size_divisor=leaf.size_divisor,
        )
    if leaf.kind == "list":
        shape = tuple(draw(st.lists(_sizes, min_size=leaf.ndim, max_size=leaf.ndim)))
        t = _values(shape, leaf.dtype, seed)
        return DataContainer(_layout(_numpy(t), leaf.payload, seed) if leaf.numpy else t)
    if leaf.kind == "cpu":
        return DataContainer(_cpu_payload(leaf.payload, index, seed), cpu_only=True)
    if leaf.kind == "tensor":
        return _values(leaf.lead, leaf.dtype, seed)
    if leaf.kind == "ndarray":
        return _numpy(_values(leaf.lead, leaf.dtype, seed))
    if leaf.kind == "number":
        # One Python type per field: default_collate reads [1, 0.1] as float32.
        if leaf.dtype.is_floating_point:
            return draw(st.floats(-1e6, 1e6, allow_nan=False))
        return draw(st.integers(-(2**40), 2**40))
    return draw(st.text(max_size=5))


def _layout(array: np.ndarray, layout: str, seed: int) -> np.ndarray:
    if layout == "flipped" and array.ndim:
        return array[..., ::-1]
    if layout == "readonly":
        array.flags.writeable = False
    if layout == "str":
        return np.array([f"s{seed}", "x"])
    return array


def _cpu_payload(payload: str, index: int, seed: int) -> Any:
    if payload == "dict":
        return {
            "idx": index,
            "ori_shape": (seed % 7, seed % 5),
            "filename": f"img_{seed}.jpg",
            "flip": seed % 2 == 0,
        }
    if payload == "string":
        return f"sample {index}"
    if payload == "ndarray":
        return (
            np.array([f"s{index}", "x"])
            if seed % 2
            else _numpy(_values((2, 2), torch.float32, seed))
        )
    return _values((seed % 3, 2), torch.float32, seed)


# --------------------------------------------------------------------------- #
# Mutations: one sample made inconsistent with the others
# --------------------------------------------------------------------------- #
def _nodes(schema: Any, path: str = "") -> List[Tuple[str, Node]]:
    if isinstance(schema, Leaf):
        return []
    out = [(path, schema)]
    for key, child in schema.children:
        out += _nodes(child, child_path(path, key))
    return out


def _get(sample: Any, schema: Any, path_keys: List[Any]) -> Any:
    for key in path_keys:
        sample = sample[key]
    return sample


def _keys_of(
    schema: Any, target: str, path: str = "", keys: Optional[list] = None
) -> Optional[list]:
    keys = keys or []
    if path == target:
        return keys
    if isinstance(schema, Leaf):
        return None
    for key, child in schema.children:
        found = _keys_of(child, target, child_path(path, key), keys + [key])
        if found is not None:
            return found
    return None


def _replace(sample: Any, keys: List[Any], fn: Any) -> Any:
    """``sample`` with the value at ``keys`` replaced by ``fn(value)`` (containers rebuilt)."""
    if not keys:
        return fn(sample)
    key, rest = keys[0], keys[1:]
    if isinstance(sample, dict):
        new = dict(sample)
        new[key] = _replace(sample[key], rest, fn)
        return new
    items = list(sample)
    items[key] = _replace(items[key], rest, fn)
    if hasattr(type(sample), "_fields"):
        return type(sample)(*items)
    return tuple(items) if isinstance(sample, tuple) else items


def _name(path: str) -> str:
    return path if path else "samples"


@st.composite
def _mutation(draw: st.DrawFn, schema: Any, samples: List[Any]) -> Tuple[List[Any], Mutation]:
    i = draw(st.integers(0, len(samples) - 1))
    choices = [("leaf", p, x) for p, x in leaves(schema)] + [
        ("node", p, n) for p, n in _nodes(schema)
    ]
    where, path, spec = draw(st.sampled_from(choices))
    keys = _keys_of(schema, path)
    if where == "node":
        return _mutate_node(draw, samples, i, path, keys, spec)
    return _mutate_leaf(draw, samples, i, path, keys, spec)


def _mutate_node(draw: st.DrawFn, samples: List[Any], i: int, path: str, keys: list, node: Node):
    if node.kind == "dict":
        if draw(st.booleans()) and len(node.children) > 1:
            key = draw(st.sampled_from([k for k, _ in node.children]))
            fn = lambda d: {k: v for k, v in d.items() if k != key}  # noqa: E731
        else:
            key = "extra_key"
            fn = lambda d: dict(d, extra_key=1)  # noqa: E731
        names = (repr(key), _name(path))
        what = "keys"
    else:
        if node.kind == "namedtuple":
            fn = lambda t: tuple(t) + (0,)  # noqa: E731 - a plain tuple of another length
        else:
            fn = lambda s: type(s)(list(s) + [0])  # noqa: E731
        names = (_name(path),)
        what = "length"
    samples = list(samples)
    samples[i] = _replace(samples[i], keys, fn)
    return samples, Mutation(what, i, path, True, names)


def _mutate_leaf(draw: st.DrawFn, samples: List[Any], i: int, path: str, keys: list, leaf: Leaf):
    options = ["kind"]
    if leaf.kind in ("stack", "list", "cpu"):
        options += ["unwrap", "cpu_only"]
    if leaf.kind == "stack":
        options += ["dtype", "lead", "pad_dims"] + (["padding"] if _BAD_PADDING[leaf.dtype] else [])
    if leaf.kind in ("tensor", "ndarray"):
        options += ["dtype", "shape"]
    what = draw(st.sampled_from(options))
    must_fail = True
    if what == "kind":
        new = 3 if leaf.kind == "string" else "not a tensor"
        fn = lambda v: new  # noqa: E731
    elif what == "unwrap":
        fn = lambda dc: dc.data  # noqa: E731
    elif what == "cpu_only":
        fn = lambda dc: DataContainer(dc.data, cpu_only=not dc.cpu_only)  # noqa: E731
    elif what == "pad_dims":
        other = draw(st.sampled_from([p for p in (None, 1, 2, 3) if p != leaf.pad_dims]))

        def fn(dc: DataContainer) -> DataContainer:
            return DataContainer(
                dc.data, stack=True, pad_dims=other, padding_value=dc.padding_value
            )

    elif what == "padding":
        bad = draw(st.sampled_from(_BAD_PADDING[leaf.dtype]))
        fn = lambda dc: DataContainer(  # noqa: E731
            dc.data,
            stack=True,
            padding_value=bad,
            pad_dims=dc.pad_dims,
            size_divisor=dc.size_divisor,
        )
    elif what == "dtype":
        other = draw(st.sampled_from([d for d in DTYPES if d != leaf.dtype]))
        must_fail = leaf.kind != "stack"  # stacked chunks are checked one by one
        fn = _with_tensor(lambda t: t.to(other))
    elif what == "lead":
        must_fail = False
        fn = _with_tensor(_other_lead)
    else:  # "shape": plain tensors are stacked over the whole batch
        fn = _with_tensor(lambda t: torch.zeros(tuple(t.shape) + (1,), dtype=t.dtype))
    samples = list(samples)
    samples[i] = _replace(samples[i], keys, fn)
    return samples, Mutation(what, i, path, must_fail, (_name(path),))


def _other_lead(t: torch.Tensor) -> torch.Tensor:
    """A tensor whose first dimension (or number of dimensions) differs from ``t``'s."""
    if t.dim() == 0:
        return t.view(1)
    return torch.zeros((t.shape[0] + 5,) + tuple(t.shape[1:]), dtype=t.dtype)


def _with_tensor(fn: Any) -> Any:
    """Apply ``fn`` to the tensor of a leaf: a DataContainer's data, an array or a tensor."""

    def apply(value: Any) -> Any:
        if isinstance(value, DataContainer):
            return DataContainer(
                fn(value.data),
                stack=value.stack,
                padding_value=value.padding_value,
                pad_dims=value.pad_dims,
                size_divisor=value.size_divisor,
            )
        if isinstance(value, np.ndarray):
            return fn(torch.from_numpy(value)).numpy()
        return fn(value)

    return apply


# --------------------------------------------------------------------------- #
# Cases
# --------------------------------------------------------------------------- #
def targets(k: int) -> st.SearchStrategy:
    """``k`` CPU targets, each ``-1``, ``"cpu"`` or ``torch.device("cpu")``."""
    return st.lists(st.sampled_from([-1, "cpu", torch.device("cpu")]), min_size=k, max_size=k)


@st.composite
def cases(draw: st.DrawFn, valid_only: bool = False) -> Case:
    """A fuzz case: schema, samples, chunking, targets and maybe one mutation."""
    schema = draw(_schemas())
    n = draw(st.integers(1, 7))
    samples = [draw(build_sample(schema, i)) for i in range(n)]
    spg = draw(st.integers(1, 4))
    chunks = math.ceil(n / spg)
    k = draw(st.integers(max(1, chunks - 1), chunks + 2))
    mutation = None
    if not valid_only and n >= 2 and draw(st.booleans()):
        samples, mutation = draw(_mutation(schema, samples))
    use_kwargs = schema.kind == "dict" and draw(st.booleans())
    return Case(schema, samples, spg, draw(targets(k)), mutation, use_kwargs)
