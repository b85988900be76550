"""collate: chunking, the three kinds of container, nesting, errors, DataLoader workers."""

from __future__ import annotations

import functools
from collections import OrderedDict, namedtuple
from typing import Any, List, NamedTuple

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from mmpar import DataContainer, collate
from tests._containers import assert_same

Pair = namedtuple("Pair", ["left", "right"])


class Typed(NamedTuple):
    x: Any
    y: Any


def _img(i: int, h: int, w: int, pad: float = 0) -> DataContainer:
    return DataContainer(torch.full((3, h, w), float(i + 1)), stack=True, padding_value=pad)


def _det_sample(i: int, h: int = 4, w: int = 5, n_boxes: int = 2) -> dict:
    return {
        "img": _img(i, h, w),
        "gt_bboxes": DataContainer(torch.full((n_boxes, 4), float(i))),
        "img_metas": DataContainer({"idx": i, "ori_shape": (h, w, 3)}, cpu_only=True),
    }


# ---------------------------------------------------------------- chunking


@pytest.mark.parametrize(
    "n, spg, sizes",
    [(4, 2, [2, 2]), (5, 2, [2, 2, 1]), (3, 1, [1, 1, 1]), (3, 8, [3]), (1, 1, [1])],
)
def test_chunks_per_samples_per_gpu(n: int, spg: int, sizes: List[int]) -> None:
    out = collate([_det_sample(i) for i in range(n)], samples_per_gpu=spg)
    assert [t.shape[0] for t in out["img"].data] == sizes
    assert [len(c) for c in out["gt_bboxes"].data] == sizes
    assert [len(c) for c in out["img_metas"].data] == sizes
    order = [m["idx"] for chunk in out["img_metas"].data for m in chunk]
    assert order == list(range(n))
    boxes = [b[0, 0].item() for chunk in out["gt_bboxes"].data for b in chunk]
    assert boxes == list(range(n))
    imgs = [img[0, 0, 0].item() for chunk in out["img"].data for img in chunk]
    assert imgs == [i + 1.0 for i in range(n)]


def test_tuple_batch_and_single_sample() -> None:
    out = collate((_det_sample(0),))
    assert out["img"].data[0].shape == (1, 3, 4, 5)
    assert torch.equal(out["gt_bboxes"].data[0][0], torch.zeros(2, 4))
    assert out["img_metas"].data == [[{"idx": 0, "ori_shape": (4, 5, 3)}]]


def test_empty_box_lists_are_kept() -> None:
    samples = [_det_sample(0, n_boxes=0), _det_sample(1, n_boxes=3), _det_sample(2, n_boxes=0)]
    out = collate(samples, samples_per_gpu=2)
    shapes = [[tuple(b.shape) for b in chunk] for chunk in out["gt_bboxes"].data]
    assert shapes == [[(0, 4), (3, 4)], [(0, 4)]]


def test_cpu_only_metadata_incl_numpy() -> None:
    metas = [{"scale": np.array([1.0, 2.0]) * i, "flip": bool(i % 2)} for i in range(3)]
    out = collate(
        [
            {
                "m": DataContainer(m, cpu_only=True),
                "a": DataContainer(np.arange(i + 1), cpu_only=True),
            }
            for i, m in enumerate(metas)
        ],
        2,
    )
    assert out["m"].cpu_only and out["a"].cpu_only
    assert [len(chunk) for chunk in out["m"].data] == [2, 1]
    flat = [m for chunk in out["m"].data for m in chunk]
    assert all(a is b for a, b in zip(flat, metas))
    arrays = [a for chunk in out["a"].data for a in chunk]
    assert all(isinstance(a, np.ndarray) for a in arrays)
    assert [a.tolist() for a in arrays] == [[0], [0, 1], [0, 1, 2]]


def test_non_stacked_tensors_stay_a_list_of_the_samples_tensors() -> None:
    labels = [torch.arange(i) for i in range(3)]
    out = collate([DataContainer(t) for t in labels], 3)
    assert isinstance(out.data, list) and len(out.data) == 1
    assert len(out.data[0]) == 3
    for got, label in zip(out.data[0], labels):
        assert got.dtype == label.dtype and torch.equal(got, label)
    # The chunk's tensors are views of the batch's one buffer, not the samples' own.
    buffer, _ = out.buffer
    base = buffer.data.untyped_storage().data_ptr()
    assert all(t.untyped_storage().data_ptr() == base for t in out.data[0])


# ---------------------------------------------------------------- stacking


def test_stack_pads_bottom_right_with_each_samples_value_per_chunk() -> None:
    samples = [
        DataContainer(torch.full((1, 2, 3), 1.0), stack=True, padding_value=-1),
        DataContainer(torch.full((1, 4, 2), 2.0), stack=True, padding_value=-2),
        DataContainer(torch.full((1, 1, 1), 3.0), stack=True, padding_value=-3),
    ]
    out = collate(samples, samples_per_gpu=2)
    first, second = out.data
    assert first.shape == (2, 1, 4, 3)  # per-chunk max, not the whole batch's
    assert second.shape == (1, 1, 1, 1)  # the last chunk only holds the 1x1 sample
    assert torch.equal(first[0, 0, :2, :3], torch.full((2, 3), 1.0))
    assert (first[0, 0, 2:, :] == -1).all()
    assert torch.equal(first[1, 0, :4, :2], torch.full((4, 2), 2.0))
    assert (first[1, 0, :, 2:] == -2).all()
    assert second.item() == 3.0


@pytest.mark.parametrize(
    "divisor, expected", [(1, (5, 7)), (4, (8, 8)), (32, (32, 32)), (5, (5, 10))]
)
def test_size_divisor_rounds_each_padded_dim_up(divisor: int, expected: tuple) -> None:
    samples = [
        DataContainer(torch.ones(3, 5, 2), stack=True, size_divisor=divisor, padding_value=9),
        DataContainer(torch.ones(3, 2, 7), stack=True, size_divisor=divisor, padding_value=9),
    ]
    out = collate(samples, 2).data[0]
    assert out.shape == (2, 3) + expected
    assert out[0, :, :5, :2].eq(1).all() and out[1, :, :2, :7].eq(1).all()
    assert out.eq(9).sum() == out.numel() - 3 * (10 + 14)


@pytest.mark.parametrize(
    "pad_dims, shapes, expected",
    [
        (None, [(2, 3, 4), (2, 3, 4)], (2, 2, 3, 4)),
        (1, [(2, 3, 4), (2, 3, 6)], (2, 2, 3, 6)),
        (2, [(2, 3, 4), (2, 5, 1)], (2, 2, 5, 4)),
        (3, [(2, 3, 4), (1, 5, 1)], (2, 2, 5, 4)),
        (1, [(3,), (5,)], (2, 5)),  # pad_dims == ndim: 1-D token ids
        (2, [(3, 1), (1, 4)], (2, 3, 4)),
        (3, [(1, 2, 3), (3, 2, 1)], (2, 3, 2, 3)),
    ],
)
def test_pad_dims(pad_dims: Any, shapes: list, expected: tuple) -> None:
    tensors = [torch.randn(s) for s in shapes]
    out = collate(
        [
            DataContainer(t, stack=True, pad_dims=pad_dims, padding_value=float("nan"))
            for t in tensors
        ],
        2,
    )
    assert out.pad_dims == pad_dims
    stacked = out.data[0]
    assert stacked.shape == expected
    for i, t in enumerate(tensors):
        region = stacked[i][tuple(slice(0, s) for s in t.shape)]
        assert torch.equal(region, t)
        assert stacked[i].isnan().sum() == stacked[i].numel() - t.numel()


def test_token_ids_padded_with_pad_id() -> None:
    ids = [torch.tensor([5, 6, 7]), torch.tensor([8]), torch.tensor([1, 2])]
    out = collate([DataContainer(t, stack=True, pad_dims=1, padding_value=0) for t in ids], 3)
    assert torch.equal(out.data[0], torch.tensor([[5, 6, 7], [8, 0, 0], [1, 2, 0]]))
    assert out.data[0].dtype == torch.int64


def test_uint8_kept() -> None:
    samples = [
        DataContainer(torch.full((1, 2, 2), 200, dtype=torch.uint8), stack=True, padding_value=255),
        DataContainer(torch.zeros(1, 3, 1, dtype=torch.uint8), stack=True, padding_value=255),
    ]
    out = collate(samples, 2).data[0]
    assert out.dtype == torch.uint8
    assert out[1, 0, :, 1].tolist() == [255, 255, 255]


def test_numpy_scalar_padding_value() -> None:
    samples = [
        DataContainer(torch.zeros(1, 1), stack=True, padding_value=np.float32(0.5)),
        DataContainer(torch.zeros(1, 2), stack=True, padding_value=np.float32(0.5)),
    ]
    assert collate(samples, 2).data[0][0].tolist() == [[0.0, 0.5]]


@pytest.mark.parametrize(
    "flags",
    [
        dict(stack=True, padding_value=3, pad_dims=1, size_divisor=8),
        dict(stack=True, padding_value=-1.5, pad_dims=3),
        dict(stack=True, pad_dims=None),
        dict(cpu_only=True, pad_dims=None),
        dict(pad_dims=1, padding_value=4),
    ],
)
def test_result_keeps_every_flag(flags: dict) -> None:
    samples = [DataContainer(torch.zeros(2, 2, 2), **flags) for _ in range(3)]
    out = collate(samples, 2)
    for name in ("stack", "padding_value", "cpu_only", "pad_dims", "size_divisor"):
        assert getattr(out, name) == getattr(samples[0], name), name


# ---------------------------------------------------------------- structures


def test_nested_dicts_lists_tuples() -> None:
    samples = [
        {
            "inputs": [
                DataContainer(torch.ones(1, 2, 2) * i, stack=True),
                (torch.tensor(i), "s%d" % i),
            ],
            "extra": {"deep": {"meta": DataContainer({"i": i}, cpu_only=True)}},
        }
        for i in range(4)
    ]
    out = collate(samples, 2)
    assert isinstance(out["inputs"], list) and isinstance(
        out["inputs"][1], list
    )  # plain tuples become lists
    assert [t.shape for t in out["inputs"][0].data] == [(2, 1, 2, 2)] * 2
    assert torch.equal(out["inputs"][1][0], torch.arange(4))
    assert out["inputs"][1][1] == ["s0", "s1", "s2", "s3"]
    assert out["extra"]["deep"]["meta"].data == [[{"i": 0}, {"i": 1}], [{"i": 2}, {"i": 3}]]


def test_namedtuples_keep_their_type() -> None:
    out = collate([Pair(DataContainer(torch.ones(i + 1)), i) for i in range(3)], 2)
    assert type(out) is Pair
    assert [len(c) for c in out.left.data] == [2, 1]
    assert torch.equal(out.right, torch.tensor([0, 1, 2]))
    typed = collate([Typed(torch.zeros(2), "a"), Typed(torch.ones(2), "b")])
    assert type(typed) is Typed and typed.y == ["a", "b"]
    assert torch.equal(typed.x, torch.tensor([[0.0, 0.0], [1.0, 1.0]]))


def test_strings_become_a_list_of_strings() -> None:
    assert collate(["a", "bc", "def"], 2) == ["a", "bc", "def"]
    assert collate([{"name": "x"}, {"name": "y"}]) == {"name": ["x", "y"]}


@pytest.mark.parametrize(
    "batch",
    [
        [torch.randn(2, 3) for _ in range(5)],
        [np.arange(3) + i for i in range(4)],
        [1, 2, 3],
        [1.5, 2.5],
        [{"a": torch.tensor(i), "b": float(i)} for i in range(3)],
    ],
)
def test_plain_values_default_collated_over_the_whole_batch(batch: list) -> None:
    got, want = collate(batch, samples_per_gpu=2), default_collate(batch)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            assert torch.equal(got[k], want[k])
    else:
        assert torch.equal(got, want)


def test_key_order_of_first_sample_kept() -> None:
    samples = [OrderedDict([("b", 1), ("a", 2), ("c", 3)]), {"c": 4, "a": 5, "b": 6}]
    out = collate(samples)
    assert list(out) == ["b", "a", "c"]
    assert isinstance(out, OrderedDict)
    assert out["a"].tolist() == [2, 5]


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("batch", [[], ()])
def test_empty_batch(batch: Any) -> None:
    with pytest.raises(ValueError, match="batch is empty"):
        collate(batch)


@pytest.mark.parametrize("batch", ["abc", torch.zeros(3), {"a": 1}, None])
def test_batch_not_a_list(batch: Any) -> None:
    with pytest.raises(TypeError, match="batch must be a list"):
        collate(batch)


@pytest.mark.parametrize("spg", [0, -1, -5])
def test_samples_per_gpu_below_one(spg: int) -> None:
    with pytest.raises(ValueError, match="samples_per_gpu must be >= 1"):
        collate([_det_sample(0)], samples_per_gpu=spg)


@pytest.mark.parametrize("spg", [1.0, 2.5, "2", None, True])
def test_samples_per_gpu_not_an_int(spg: Any) -> None:
    with pytest.raises(TypeError, match="samples_per_gpu must be an int"):
        collate([_det_sample(0)], samples_per_gpu=spg)


def test_stack_needs_tensors() -> None:
    with pytest.raises(
        TypeError, match=r"field 'img'.*stack=True needs tensors.*sample 0 holds list"
    ):
        collate([{"img": DataContainer([1, 2], stack=True)}])
    # pad_stack numbers the samples within their chunk; the message says which chunk.
    with pytest.raises(
        TypeError, match=r"field 'img' \(chunk 1: batch samples 1\.\.1\).*holds ndarray"
    ):
        collate(
            [
                {"img": DataContainer(torch.zeros(2, 2), stack=True)},
                {"img": DataContainer(np.zeros((2, 2)), stack=True)},
            ]
        )


def test_fewer_dims_than_pad_dims() -> None:
    with pytest.raises(
        ValueError,
        match=r"field 'img'.*pad_dims=3 needs tensors of at least 3 dimensions.*\(4, 4\)",
    ):
        collate([{"img": DataContainer(torch.zeros(4, 4), stack=True, pad_dims=3)}])


def test_disagreeing_leading_dims() -> None:
    batch = [
        {"img": DataContainer(torch.zeros(3, 4, 4), stack=True)},
        {"img": DataContainer(torch.zeros(1, 4, 4), stack=True)},
    ]
    with pytest.raises(ValueError, match=r"field 'img'.*must agree.*\(3, 4, 4\).*\(1, 4, 4\)"):
        collate(batch, 2)
    collate(batch, 1)  # in different chunks they need not agree


def test_disagreeing_shapes_without_padding() -> None:
    with pytest.raises(ValueError, match=r"field 'seg'.*shapes must agree"):
        collate(
            [
                {"seg": DataContainer(torch.zeros(2, 2), stack=True, pad_dims=None)},
                {"seg": DataContainer(torch.zeros(2, 3), stack=True, pad_dims=None)},
            ],
            2,
        )


def test_disagreeing_dtypes() -> None:
    with pytest.raises(ValueError, match=r"field 'img'.*dtypes must agree.*float32.*uint8"):
        collate(
            [
                {"img": DataContainer(torch.zeros(1, 2, 2), stack=True)},
                {"img": DataContainer(torch.zeros(1, 2, 2, dtype=torch.uint8), stack=True)},
            ],
            2,
        )


@pytest.mark.parametrize(
    "flags0, flags1, flag",
    [
        (dict(stack=True), dict(stack=False), "stack"),
        (dict(cpu_only=True), dict(cpu_only=False), "cpu_only"),
        (dict(cpu_only=False), dict(cpu_only=True), "cpu_only"),
        (dict(stack=True, pad_dims=2), dict(stack=True, pad_dims=1), "pad_dims"),
        (dict(stack=True, size_divisor=4), dict(stack=True, size_divisor=8), "size_divisor"),
    ],
)
def test_disagreeing_flags(flags0: dict, flags1: dict, flag: str) -> None:
    batch = [
        {"x": DataContainer(torch.zeros(1, 2, 2), **flags0)},
        {"x": DataContainer(torch.zeros(1, 2, 2), **flags1)},
    ]
    with pytest.raises(ValueError, match=rf"field 'x'.*{flag} must agree.*sample 1"):
        collate(batch)


def test_container_in_one_sample_only() -> None:
    with pytest.raises(
        ValueError, match=r"field 'gt'.*DataContainer in sample 0 but Tensor in sample 1"
    ):
        collate([{"gt": DataContainer(torch.zeros(1))}, {"gt": torch.zeros(1)}])
    with pytest.raises(ValueError, match=r"field 'gt'.*DataContainer in sample 2"):
        collate(
            [{"gt": torch.zeros(1)}, {"gt": torch.zeros(1)}, {"gt": DataContainer(torch.zeros(1))}]
        )


def test_samples_whose_keys_differ() -> None:
    with pytest.raises(
        ValueError, match=r"same keys.*sample 1 lacks \['b'\] and has extra \['c'\]"
    ):
        collate([{"a": 1, "b": 2}, {"a": 1, "c": 2}])
    with pytest.raises(ValueError, match=r"field 'outer'.*same keys.*lacks \['y'\]"):
        collate([{"outer": {"x": 1, "y": 2}}, {"outer": {"x": 1}}])


def test_list_fields_of_different_lengths() -> None:
    with pytest.raises(
        ValueError, match=r"field 'ids'.*same length.*sample 0 has 2, sample 1 has 3"
    ):
        collate([{"ids": [1, 2]}, {"ids": [1, 2, 3]}])


def test_field_of_different_kinds() -> None:
    with pytest.raises(TypeError, match=r"field 'v'.*sample 0 holds list, sample 1 holds str"):
        collate([{"v": [1]}, {"v": "1"}])


def test_plain_tensors_of_different_shapes_point_to_containers() -> None:
    with pytest.raises(
        ValueError, match=r"field 'boxes'.*shape \(2, 4\).*shape \(3, 4\).*DataContainer"
    ):
        collate([{"boxes": torch.zeros(2, 4)}, {"boxes": torch.zeros(3, 4)}])


def test_unbatchable_plain_values() -> None:
    with pytest.raises(TypeError, match=r"field 'a'.*NoneType"):
        collate([{"a": None}, {"a": None}])


# ---------------------------------------------------------------- DataLoader workers


class _DetDataset(Dataset):
    def __len__(self) -> int:
        return 7

    def __getitem__(self, i: int) -> dict:
        sample = _det_sample(i, h=3 + i % 3, w=2 + i % 4, n_boxes=i % 3)
        sample["label"] = torch.tensor(i)
        sample["name"] = f"img{i}"
        return sample


def _collate_recording_sharing(batch: list, samples_per_gpu: int) -> tuple:
    out = collate(batch, samples_per_gpu)
    info = torch.utils.data.get_worker_info()
    return out, [t.is_shared() for t in out["img"].data], info is not None


def test_collate_in_dataloader_workers_matches_in_process_and_uses_shared_memory() -> None:
    dataset = _DetDataset()
    fn = functools.partial(_collate_recording_sharing, samples_per_gpu=2)
    loader = DataLoader(dataset, batch_size=5, num_workers=2, collate_fn=fn)
    batches = list(loader)
    assert len(batches) == 2
    for b, (out, shared, in_worker) in enumerate(batches):
        assert in_worker and all(shared), shared
        expected = collate([dataset[i] for i in range(5 * b, min(5 * b + 5, 7))], 2)
        assert_same(out, expected)
    in_process = collate([dataset[i] for i in range(5)], 2)
    assert not any(t.is_shared() for t in in_process["img"].data)
