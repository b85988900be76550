"""One buffer per batch: collate lays every tensor out in one storage, the batch
pickles, pins and scatters through it, and nothing the user sees changes."""

from __future__ import annotations

import functools
import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from torch.utils.data import DataLoader, Dataset

from mmpar import DataContainer, collate, scatter, scatter_kwargs, to_device
from mmpar.batch_buffer import BatchBuffer, Items, Rows, Slot, cut
from mmpar.packing import PACK_ALIGN
from mmpar.stacking import pad_stack
from tests._containers import assert_same
from tests.strategies import Case, cases

cuda = pytest.mark.cuda


def _sample(i: int) -> Dict[str, Any]:
    g = torch.Generator().manual_seed(i)
    h, w, k = 20 + i % 7, 30 - i % 5, i % 4
    return {
        "img": DataContainer(
            torch.randint(0, 255, (3, h, w), dtype=torch.uint8, generator=g),
            stack=True,
            padding_value=i % 3,
            size_divisor=8,
        ),
        "gt_bboxes": DataContainer(torch.rand(k, 4, generator=g)),
        "gt_labels": DataContainer(torch.randint(0, 9, (k,), generator=g)),
        "gt_semantic_seg": DataContainer(torch.full((1, h, w), i, dtype=torch.int64), stack=True),
        "img_metas": DataContainer({"index": i, "scale": np.ones(4, np.float32)}, cpu_only=True),
        "label": torch.tensor(i),
    }


class _Samples(Dataset):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> Dict[str, Any]:
        return _sample(i)


def _reference(samples: List[Dict[str, Any]], per_gpu: int) -> Dict[str, List[Any]]:
    """What collate gave before the buffer: pad_stack per chunk, the samples' own tensors."""
    chunks = [samples[i : i + per_gpu] for i in range(0, len(samples), per_gpu)]
    out: Dict[str, List[Any]] = {}
    for key in ("img", "gt_semantic_seg"):
        out[key] = [
            pad_stack(
                [s[key].data for s in c],
                2,
                [s[key].padding_value for s in c],
                samples[0][key].size_divisor,
            )
            for c in chunks
        ]
    for key in ("gt_bboxes", "gt_labels"):
        out[key] = [[s[key].data for s in c] for c in chunks]
    return out


def _tensors(batch: Dict[str, Any]) -> List[torch.Tensor]:
    found = []
    for key in ("img", "gt_bboxes", "gt_labels", "gt_semantic_seg"):
        for chunk in batch[key].data:
            found.extend(chunk if isinstance(chunk, list) else [chunk])
    return found


def _assert_matches_reference(batch: Dict[str, Any], samples: List[Any], per_gpu: int) -> None:
    ref = _reference(samples, per_gpu)
    for key, chunks in ref.items():
        assert len(batch[key].data) == len(chunks)
        for got, want in zip(batch[key].data, chunks):
            if isinstance(want, list):
                assert isinstance(got, list) and len(got) == len(want)
                pairs = list(zip(got, want))
            else:
                pairs = [(got, want)]
            for g, w in pairs:
                assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w)
    assert batch["img"].stack and batch["img"].size_divisor == 8
    assert not batch["gt_bboxes"].stack and not batch["gt_bboxes"].cpu_only
    metas = [m["index"] for chunk in batch["img_metas"].data for m in chunk]
    assert metas == [s["img_metas"].data["index"] for s in samples]
    assert torch.equal(batch["label"], torch.arange(len(samples)))


def _spans(batch: Dict[str, Any]) -> List[tuple]:
    spans = []
    for t in _tensors(batch):
        start = t.data_ptr()
        spans.append((start, start + t.numel() * t.element_size()))
    return sorted(spans)


def test_collate_lays_every_chunk_tensor_out_in_one_aligned_buffer_without_overlap() -> None:
    samples = [_sample(i) for i in range(7)]
    batch = collate(samples, 3)
    _assert_matches_reference(batch, samples, 3)
    buffer, specs = batch["img"].buffer
    assert isinstance(buffer, BatchBuffer) and len(buffer.bounds) == 3
    base = buffer.data.untyped_storage().data_ptr()
    for key in ("gt_bboxes", "gt_labels", "gt_semantic_seg"):
        assert batch[key].buffer[0] is buffer
    assert {t.untyped_storage().data_ptr() for t in _tensors(batch)} == {base}
    # Boxes and labels of a chunk are one region of rows each; images one slot.
    assert all(isinstance(s, Slot) for s in specs)
    assert all(isinstance(s, Rows) for s in batch["gt_bboxes"].buffer[1])
    for t in batch["img"].data + batch["gt_semantic_seg"].data:
        assert (t.data_ptr() - base) % PACK_ALIGN == 0
    spans = [s for s in _spans(batch) if s[1] > s[0]]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "views overlap"
    # Chunk i's bytes hold chunk i's tensors, and only them.
    for i, (start, stop) in enumerate(buffer.bounds):
        chunk_tensors = [batch["img"].data[i], *batch["gt_bboxes"].data[i]]
        for t in (t for t in chunk_tensors if t.numel()):
            offset = t.data_ptr() - base
            assert start <= offset and offset + t.nbytes <= stop


def test_writing_one_view_in_place_leaves_every_other_tensor_as_it_was() -> None:
    samples = [_sample(i) for i in range(6)]
    batch = collate(samples, 3)
    original = samples[1]["gt_bboxes"].data.clone()
    before = [t.clone() for t in _tensors(batch)]
    written = [batch["gt_bboxes"].data[0][1], batch["img"].data[1]]
    written[0].fill_(-7.0)
    written[1].zero_()
    for t, old in zip(_tensors(batch), before):
        if any(t is w for w in written):
            assert t.numel() == 0 or not torch.equal(t, old)
        else:
            assert torch.equal(t, old)
    # The collated boxes are the batch's own: the sample's tensor is untouched.
    assert torch.equal(samples[1]["gt_bboxes"].data, original)


def test_a_batch_crosses_a_process_boundary_as_one_storage_and_small_metadata() -> None:
    samples = [_sample(i) for i in range(10)]
    batch = collate(samples, 5)
    # Moved to shared memory once; the payload holds one storage handle, not the bytes.
    payload = bytes(ForkingPickler.dumps(batch))
    assert len(payload) < sum(t.nbytes for t in _tensors(batch))
    assert payload.count(b"rebuild_storage") == 1
    # A real DataLoader worker: every tensor of the batch arrives as a view of one storage.
    loader = DataLoader(
        _Samples(),
        batch_size=10,
        num_workers=2,
        collate_fn=functools.partial(collate, samples_per_gpu=5),
    )
    (received,) = list(loader)
    _assert_matches_reference(received, samples, 5)
    ptrs = {t.untyped_storage().data_ptr() for t in _tensors(received)}
    assert len(ptrs) == 1
    assert all(t.is_shared() for t in _tensors(received))


def test_pickle_round_trip_keeps_views_values_and_flags() -> None:
    samples = [_sample(i) for i in range(5)]
    batch = pickle.loads(pickle.dumps(collate(samples, 2)))
    _assert_matches_reference(batch, samples, 2)
    assert batch["img"].buffer is not None
    assert batch["img"].buffer[0] is batch["gt_labels"].buffer[0]  # one buffer, shared


def test_a_container_whose_data_was_replaced_moves_its_new_data() -> None:
    batch = collate([_sample(i) for i in range(4)], 2)
    batch["gt_bboxes"].data[1][0] = torch.full((2, 4), 5.0)
    batch["img"].data[0] = batch["img"].data[0].float()
    assert batch["gt_bboxes"].buffer is None and batch["img"].buffer is None
    assert batch["gt_labels"].buffer is not None
    back = pickle.loads(pickle.dumps(batch))
    assert torch.equal(back["gt_bboxes"].data[1][0], torch.full((2, 4), 5.0))
    assert back["img"].data[0].dtype == torch.float32
    pieces = scatter(back, ["cpu", "cpu"])
    assert torch.equal(pieces[1]["gt_bboxes"][0], torch.full((2, 4), 5.0))


def test_mixed_lists_keep_what_cannot_live_in_the_buffer() -> None:
    grad = torch.ones(2, requires_grad=True)
    samples = [
        {"x": DataContainer([torch.arange(3), np.arange(2), torch.ones(2, 2)])},
        {"x": DataContainer([torch.arange(1), np.arange(1), torch.ones(1, 3)])},
    ]
    mixed = collate([DataContainer(v) for v in (torch.arange(4), grad, np.zeros(3))], 3)
    (chunk,) = mixed.data
    assert torch.equal(chunk[0], torch.arange(4))
    assert chunk[1] is grad  # tracks gradients: never copied
    assert isinstance(chunk[2], np.ndarray)
    _, specs = mixed.buffer
    assert isinstance(specs[0], Items) and specs[0].slots[1] is None
    back = pickle.loads(pickle.dumps(mixed))
    assert torch.equal(back.data[0][0], torch.arange(4)) and back.data[0][1].requires_grad
    nested = collate(samples, 2)
    assert isinstance(nested["x"].data[0][0], list)  # lists inside lists stay as they are
    # Different trailing shapes (masks of per-image sizes) get a slot each.
    masks = collate([DataContainer(torch.ones(1, h, h, dtype=torch.bool)) for h in (2, 3)], 2)
    assert [m.shape for m in masks.data[0]] == [(1, 2, 2), (1, 3, 3)]
    assert all(isinstance(s, Slot) for s in masks.buffer[1][0].slots)


def test_sparse_and_subclassed_tensors_stay_outside_the_buffer() -> None:
    sparse = torch.eye(3).to_sparse()
    param = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    out = collate([DataContainer(sparse), DataContainer(param), DataContainer(torch.ones(2))], 3)
    (chunk,) = out.data
    assert chunk[0] is sparse and chunk[1] is param
    assert torch.equal(chunk[2], torch.ones(2))
    assert [s is None for s in out.buffer[1][0].slots] == [True, True, False]


def test_zero_dim_and_empty_tensors_and_unbuffered_batches() -> None:
    scores = collate([DataContainer(torch.tensor(float(i))) for i in range(3)], 2)
    assert [[float(t) for t in c] for c in scores.data] == [[0.0, 1.0], [2.0]]
    assert all(t.dim() == 0 for c in scores.data for t in c)
    empty = collate([DataContainer(torch.zeros(0, 4)) for _ in range(2)], 2)
    assert [t.shape for t in empty.data[0]] == [(0, 4), (0, 4)]
    metas = collate([DataContainer({"i": 1}, cpu_only=True)], 1)
    assert metas.buffer is None  # nothing to lay out
    plain = collate([torch.ones(2), torch.zeros(2)])
    assert torch.equal(plain, torch.tensor([[1.0, 1.0], [0.0, 0.0]]))


def test_cut_casts_each_floating_region_once_and_keeps_integers() -> None:
    batch = collate([_sample(i) for i in range(3)], 3)
    buffer, specs = batch["gt_bboxes"].buffer
    chunk = buffer.chunk(0).clone()  # as a device copy would be
    boxes = cut(chunk, specs[0], None, torch.float16)
    assert [b.dtype for b in boxes] == [torch.float16] * 3
    assert all(torch.equal(b, a.half()) for a, b in zip(batch["gt_bboxes"].data[0], boxes))
    _, label_specs = batch["gt_labels"].buffer
    labels = cut(chunk, label_specs[0], None, torch.float16)
    assert [t.dtype for t in labels] == [torch.int64] * 3


def test_old_pickles_without_a_buffer_still_load() -> None:
    dc = DataContainer(torch.ones(2), stack=True)
    state = (dc.data, True, 0, False, 2, None)  # what mmpar pickled before the buffer
    old = DataContainer.__new__(DataContainer)
    old.__setstate__(state)
    assert old.stack and torch.equal(old.data, torch.ones(2)) and old.buffer is None


def test_cpu_scatter_of_a_buffered_batch_gives_todays_pieces() -> None:
    samples = [_sample(i) for i in range(5)]
    batch = collate(samples, 3)
    ref = _reference(samples, 3)
    pieces = scatter(batch, ["cpu", "cpu"])
    for i, piece in enumerate(pieces):
        assert torch.equal(piece["img"], ref["img"][i])
        assert all(torch.equal(a, b) for a, b in zip(piece["gt_bboxes"], ref["gt_bboxes"][i]))
        metas = piece["img_metas"]
        assert all(m is s["img_metas"].data for m, s in zip(metas, samples[3 * i : 3 * i + 3]))
    one = to_device(collate(samples[:2], 2), "cpu")
    assert torch.equal(one["img"], _reference(samples[:2], 2)["img"][0])


# ------------------------------------------------------------------ CUDA paths


def _storages(tensors: List[torch.Tensor]) -> set:
    return {t.untyped_storage().data_ptr() for t in tensors}


@cuda
def test_pinning_a_batch_pins_its_buffer_once() -> None:
    loader = DataLoader(
        _Samples(),
        batch_size=10,
        num_workers=2,
        pin_memory=True,
        collate_fn=functools.partial(collate, samples_per_gpu=5),
    )
    (batch,) = list(loader)
    tensors = _tensors(batch)
    assert all(t.is_pinned() for t in tensors)
    assert len(_storages(tensors)) == 1
    _assert_matches_reference(batch, [_sample(i) for i in range(10)], 5)


@cuda
def test_cuda_scatter_copies_one_buffer_per_target_and_cuts_views_there() -> None:
    samples = [_sample(i) for i in range(6)]
    batch = collate(samples, 3)
    ref = _reference(samples, 3)
    pieces = scatter(batch, [0, 0], dtype=torch.float16)
    for i, piece in enumerate(pieces):
        kept = [piece["img"], piece["gt_semantic_seg"], *piece["gt_labels"]]
        assert all(t.is_cuda for t in kept + piece["gt_bboxes"])
        assert len(_storages(kept)) == 1  # one copy for the target, cut into views there
        assert len(_storages(piece["gt_bboxes"])) == 1  # cast once, by region
        assert _storages(piece["gt_bboxes"]).isdisjoint(_storages(kept))
        assert torch.equal(piece["img"].cpu(), ref["img"][i])  # uint8: not cast
        for got, want in zip(piece["gt_bboxes"], ref["gt_bboxes"][i]):
            assert got.dtype == torch.float16 and torch.equal(got.cpu(), want.half())
    assert len(_storages([pieces[0]["img"], pieces[1]["img"]])) == 2


@cuda
def test_scatter_to_device_and_normalize_make_no_synchronizing_call() -> None:
    from mmpar import normalize_batch

    samples = [_sample(i) for i in range(4)]
    for s in samples:
        s["img_metas"] = DataContainer(
            {
                "img_shape": tuple(s["img"].data.shape[1:]) + (3,),
                "pad_shape": tuple(s["img"].data.shape[1:]) + (3,),
                "img_norm_cfg": {
                    "mean": [1.0, 2.0, 3.0],
                    "std": [2.0, 2.0, 2.0],
                    "swap_rb": True,
                    "on_device": True,
                },
            },
            cpu_only=True,
        )
    batch = collate(samples, 4)
    pinned = {k: (v.pin_memory() if isinstance(v, DataContainer) else v) for k, v in batch.items()}
    warm = normalize_batch(to_device(pinned, "cuda:0"))  # first use caches the constants
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = normalize_batch(to_device(pinned, "cuda:0"))
        scatter(pinned, [0])
        scatter_kwargs((pinned,), {}, [0])
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.equal(out["img"], warm["img"]) and out["img"].dtype == torch.float32


# ------------------------------------------------------------ property: any batch


def _containers(obj: Any) -> List[DataContainer]:
    if isinstance(obj, DataContainer):
        return [obj]
    if isinstance(obj, dict):
        return [c for v in obj.values() for c in _containers(v)]
    if isinstance(obj, (list, tuple)):
        return [c for v in obj for c in _containers(v)]
    return []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(valid_only=True))
def test_any_batch_pickles_through_its_buffer_and_its_views_never_overlap(case: Case) -> None:
    batch = collate(case.samples, case.samples_per_gpu)
    back = pickle.loads(pickle.dumps(batch))
    assert_same(batch, back)
    for out in (batch, back):
        spans = []
        for dc in _containers(out):
            if dc.buffer is None:
                continue
            for chunk in dc.data:
                items = chunk if isinstance(chunk, list) else [chunk]
                for t in items:
                    if isinstance(t, torch.Tensor) and t.numel():
                        spans.append((t.data_ptr(), t.data_ptr() + t.nbytes))
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "views overlap"
