"""Property tests: collate -> scatter -> gather never loses, duplicates or mixes samples."""

from __future__ import annotations

import math
from typing import List

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpar import DataContainer, collate, gather, scatter
from mmpar.packing import pack, unpack

_SETTINGS = settings(max_examples=80, deadline=None)


def _sample(i: int, h: int, w: int, n_ids: int) -> dict:
    return {
        "img": DataContainer(torch.full((2, h, w), float(i)), stack=True, padding_value=-(i + 1)),
        "ids": DataContainer(
            torch.full((n_ids,), i), stack=True, pad_dims=1, size_divisor=4, padding_value=-1
        ),
        "meta": DataContainer({"idx": i, "shape": (h, w)}, cpu_only=True),
        "boxes": DataContainer(torch.full((i % 3, 4), float(i))),
        "label": torch.tensor(i),
        "tag": "batch",
    }


@st.composite
def _batches(draw: st.DrawFn) -> tuple:
    n = draw(st.integers(1, 10))
    spg = draw(st.integers(1, 4))
    chunks = math.ceil(n / spg)
    k = draw(st.integers(chunks, chunks + 2))
    sizes = draw(
        st.lists(
            st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 6)),
            min_size=n,
            max_size=n,
        )
    )
    return [_sample(i, *s) for i, s in enumerate(sizes)], spg, k


@_SETTINGS
@given(_batches())
def test_every_sample_lands_once_in_order_with_its_fields(args: tuple) -> None:
    samples, spg, k = args
    pieces = scatter(collate(samples, spg), ["cpu"] * k)
    assert len(pieces) == math.ceil(len(samples) / spg) <= k
    seen: List[int] = []
    for piece in pieces:
        idx = [m["idx"] for m in piece["meta"]]
        assert 1 <= len(idx) <= spg
        assert piece["label"].tolist() == idx
        assert piece["tag"] == ["batch"] * len(
            samples
        )  # a plain list of strings goes whole to every target
        assert len(piece["boxes"]) == len(idx)
        for i, boxes in zip(idx, piece["boxes"]):
            assert boxes.shape == (i % 3, 4) and boxes.eq(i).all()
        img, ids = piece["img"], piece["ids"]
        assert img.shape[0] == ids.shape[0] == len(idx)
        assert ids.shape[1] % 4 == 0
        for j, i in enumerate(idx):
            h, w = piece["meta"][j]["shape"]
            region = img[j, :, :h, :w]
            assert region.eq(float(i)).all()
            assert img[j].eq(-(i + 1)).sum() == img[j].numel() - region.numel()
            n_ids = samples[i]["ids"].data.numel()
            assert ids[j, :n_ids].eq(i).all() and ids[j, n_ids:].eq(-1).all()
        # each chunk is padded to its own largest sample only
        assert img.shape[2] == max(piece["meta"][j]["shape"][0] for j in range(len(idx)))
        seen += idx
    assert seen == list(range(len(samples)))


@_SETTINGS
@given(_batches())
def test_gather_returns_per_image_results_in_sample_order(args: tuple) -> None:
    samples, spg, k = args
    pieces = scatter(collate(samples, spg), ["cpu"] * k)
    results = [
        [{"idx": m["idx"], "score": torch.tensor([float(m["idx"])])} for m in p["meta"]]
        for p in pieces
    ]
    losses = [{"loss": p["label"].float().sum(), "labels": p["label"]} for p in pieces]
    flat = gather(results, "cpu")
    assert [r["idx"] for r in flat] == list(range(len(samples)))
    assert all(r["score"].item() == r["idx"] for r in flat)
    merged = gather(losses, "cpu")
    assert merged["labels"].tolist() == list(range(len(samples)))
    assert merged["loss"].shape == (len(pieces),)


@_SETTINGS
@given(st.integers(1, 20), st.integers(1, 6), st.integers(1, 3), st.sampled_from([0, 1, -1]))
def test_plain_tensors_split_like_torch_chunk(length: int, k: int, other: int, dim: int) -> None:
    shape = [other, other]
    shape[dim] = length
    t = torch.arange(length * other).view(*shape)
    pieces = scatter({"t": t, "s": "x"}, ["cpu"] * k, dim=dim)
    expected = torch.chunk(t, k, dim)
    assert len(pieces) == len(expected)
    assert all(torch.equal(p["t"], e) for p, e in zip(pieces, expected))
    assert torch.equal(gather([p["t"] for p in pieces], "cpu", dim=dim), t)


_DTYPES = [
    torch.float32,
    torch.float16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
]


@_SETTINGS
@given(
    st.lists(
        st.tuples(st.sampled_from(_DTYPES), st.lists(st.integers(0, 4), max_size=3)), max_size=8
    )
)
def test_pack_unpack_round_trip(specs: list) -> None:
    tensors = [(torch.arange(math.prod(shape)) % 7).to(dtype).view(shape) for dtype, shape in specs]
    buffer, layout = pack(tensors)
    out = unpack(buffer, layout)
    assert all(
        o.dtype == t.dtype and o.shape == t.shape and torch.equal(o, t)
        for o, t in zip(out, tensors)
    )
    assert all(offset % 64 == 0 for offset, *_ in layout)
