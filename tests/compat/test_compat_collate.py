"""mmpar's data path on mmcv 1.x DataContainers, against mmcv's own collate.

mmdet's CocoDataset and standard train pipeline emit ``mmcv.parallel.DataContainer``s;
``mmpar.collate`` batches them exactly like ``mmcv.parallel.collate`` does, into
mmpar's class, and mmpar's ``scatter`` / ``scatter_kwargs`` / ``to_device`` take
batches of mmcv containers like batches of mmpar's.
"""

from __future__ import annotations

from functools import partial
from typing import Optional

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import mmpar
from tests.compat._mmcv_env import (
    install_stand_ins,
    mmdet_train_pipeline,
    requires_mmcv,
    requires_mmdet,
    write_small_coco,
)

FLAGS = ("stack", "cpu_only", "padding_value", "pad_dims")


def assert_same_value(got, want, where: str) -> None:
    """Deep equality of collated data: tensors (torch.equal, dtype), arrays, dicts, sequences."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got)} is not a tensor"
        assert got.dtype == want.dtype and got.shape == want.shape, (
            f"{where}: {got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
        )
        assert torch.equal(got, want), f"{where}: tensors differ"
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype, f"{where}: {type(got)}"
        np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (
            f"{where}: keys {sorted(got)} vs {sorted(want)}"
        )
        for key in want:
            assert_same_value(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), (
            f"{where}: {type(got)} len {len(got)} vs {len(want)}"
        )
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_value(g, w, f"{where}[{i}]")
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} vs {want!r}"


def assert_same_batch(
    got: dict, want: dict, mmcv_dc: type, own_pad_dims: Optional[dict] = None
) -> int:
    """``got`` (mmpar) holds mmpar containers where ``want`` (mmcv) holds mmcv's, equal in all else.

    mmcv's collate drops the samples' ``pad_dims``: its batched containers always
    have the default, 2. ``own_pad_dims`` maps the fields whose samples have
    another ``pad_dims`` to it; mmpar keeps it there.

    Returns the number of containers compared."""
    own_pad_dims = own_pad_dims or {}
    assert set(got) == set(want)
    for key, ref in want.items():
        assert type(ref) is mmcv_dc, f"mmcv's collate gave {type(ref)} for {key!r}"
        dc = got[key]
        assert type(dc) is mmpar.DataContainer and not isinstance(dc, mmcv_dc), f"{key}: {type(dc)}"
        for flag in FLAGS:
            if flag == "pad_dims" and key in own_pad_dims:
                assert ref.pad_dims == 2 and dc.pad_dims == own_pad_dims[key], (
                    f"{key}.pad_dims: {dc.pad_dims!r}"
                )
                continue
            assert getattr(dc, flag) == getattr(ref, flag), (
                f"{key}.{flag}: {getattr(dc, flag)!r} vs {getattr(ref, flag)!r}"
            )
        assert_same_value(dc.data, ref.data, key)
    return len(want)


@pytest.fixture(scope="module")
def coco_dataset(tmp_path_factory):
    install_stand_ins()
    from mmdet.datasets import CocoDataset

    ann_file, img_prefix, classes = write_small_coco(tmp_path_factory.mktemp("coco"))
    # flip_ratio 1.0: every sample flipped, so every loader sees identical samples.
    return CocoDataset(
        ann_file, mmdet_train_pipeline(flip_ratio=1.0), img_prefix=img_prefix, classes=classes
    )


@requires_mmdet
def test_small_coco_set_goes_through_the_mmdet_pipeline(coco_dataset) -> None:
    from mmcv.parallel import DataContainer as MmcvDC

    assert len(coco_dataset) == 8
    assert sorted(set(coco_dataset.flag.tolist())) == [0, 1]  # both orientation groups
    sample = coco_dataset[1]
    assert set(sample) == {"img", "img_metas", "gt_bboxes", "gt_labels"}
    assert all(type(v) is MmcvDC for v in sample.values())
    meta = sample["img_metas"].data
    assert meta["flip"] is True and meta["ori_shape"] == (72, 40, 3)
    assert sample["img"].data.shape[1] % 32 == 0 and sample["img"].data.shape[2] % 32 == 0
    assert (
        sample["img"].stack
        and sample["img_metas"].cpu_only
        and sample["gt_bboxes"].data.shape == (1, 4)
    )


@requires_mmdet
@pytest.mark.parametrize("num_workers", [0, 2])
def test_mmpar_collate_of_mmdet_samples_equals_mmcv_collate(coco_dataset, num_workers: int) -> None:
    from mmcv.parallel import DataContainer as MmcvDC
    from mmcv.parallel import collate as mmcv_collate

    # batch_size 3 with 2 samples per GPU: chunks of 2 and 1, and a last batch of 2.
    def loader(collate_fn, workers):
        extra = dict(timeout=60) if workers else {}
        return DataLoader(
            coco_dataset,
            batch_size=3,
            shuffle=False,
            num_workers=workers,
            collate_fn=partial(collate_fn, samples_per_gpu=2),
            **extra,
        )

    want = list(loader(mmcv_collate, 0))
    got = list(loader(mmpar.collate, num_workers))
    assert len(got) == len(want) == 3
    compared = sum(assert_same_batch(g, w, MmcvDC) for g, w in zip(got, want))
    assert compared == 12
    # The chunking itself, from mmcv's reference: [2, 1] images per chunk, stacked and padded.
    assert [tuple(t.shape[:2]) for t in got[0]["img"].data] == [(2, 3), (1, 3)]
    assert [len(m) for m in got[0]["img_metas"].data] == [2, 1]
    assert [len(b) for b in got[2]["gt_bboxes"].data] == [2]


def _mmcv_samples(mmcv_dc: type) -> list:
    """Samples of hand-made mmcv containers: every kind of field mmcv knows."""
    samples = []
    for i, (h, w) in enumerate([(20, 30), (33, 17), (8, 8), (40, 12)]):
        samples.append(
            dict(
                img=mmcv_dc(torch.full((3, h, w), float(i + 1)), stack=True, padding_value=-1),
                img_metas=mmcv_dc(dict(index=i, img_shape=(h, w, 3)), cpu_only=True),
                gt_bboxes=mmcv_dc(torch.arange(4 * (i + 1), dtype=torch.float32).reshape(-1, 4)),
                seg=mmcv_dc(
                    torch.full((1, h, w), i, dtype=torch.long),
                    stack=True,
                    padding_value=255,
                    pad_dims=2,
                ),
                vec=mmcv_dc(torch.full((2, 5 + i), float(i)), stack=True, pad_dims=1),
                whole=mmcv_dc(torch.ones(2, 3) * i, stack=True, pad_dims=None),
                label=torch.tensor(i),
            )
        )
    return samples


@requires_mmcv
@pytest.mark.parametrize("samples_per_gpu", [1, 2, 3])
def test_collate_of_every_container_kind_equals_mmcv(samples_per_gpu: int) -> None:
    from mmcv.parallel import DataContainer as MmcvDC
    from mmcv.parallel import collate as mmcv_collate

    samples = _mmcv_samples(MmcvDC)
    want = mmcv_collate(samples, samples_per_gpu=samples_per_gpu)
    got = mmpar.collate(samples, samples_per_gpu=samples_per_gpu)
    assert_same_value(got.pop("label"), want.pop("label"), "label")
    assert assert_same_batch(got, want, MmcvDC, own_pad_dims=dict(vec=1, whole=None)) == 6


@requires_mmcv
def test_mixed_mmcv_and_mmpar_containers_collate_together() -> None:
    from mmcv.parallel import DataContainer as MmcvDC

    mixed = _mmcv_samples(MmcvDC)
    ours = _mmcv_samples(mmpar.DataContainer)
    for sample in mixed[::2]:  # samples 0 and 2 hold mmpar's containers
        sample.update(ours[sample["img_metas"].data["index"]])
    want = mmpar.collate(ours, samples_per_gpu=2)
    got = mmpar.collate(mixed, samples_per_gpu=2)
    for key in want:
        if key == "label":
            assert torch.equal(got[key], want[key])
            continue
        assert type(got[key]) is mmpar.DataContainer
        for flag in FLAGS:
            assert getattr(got[key], flag) == getattr(want[key], flag)
        assert_same_value(got[key].data, want[key].data, key)


@requires_mmcv
def test_scatter_and_to_device_take_mmcv_batches() -> None:
    from mmcv.parallel import DataContainer as MmcvDC
    from mmcv.parallel import collate as mmcv_collate

    mmcv_batch = mmcv_collate(_mmcv_samples(MmcvDC), samples_per_gpu=2)
    mmpar_batch = mmpar.collate(_mmcv_samples(mmpar.DataContainer), samples_per_gpu=2)
    targets = ["cpu", "cpu"]
    got = mmpar.scatter(mmcv_batch, targets)
    want = mmpar.scatter(mmpar_batch, targets)
    assert_same_value(got, want, "scatter")
    assert got[1]["img_metas"] == [
        dict(index=2, img_shape=(8, 8, 3)),
        dict(index=3, img_shape=(40, 12, 3)),
    ]
    assert isinstance(got[0]["img"], torch.Tensor) and got[0]["img"].shape == (2, 3, 33, 30)

    got_args, got_kwargs = mmpar.scatter_kwargs((mmcv_batch["img"],), dict(mmcv_batch), targets)
    want_args, want_kwargs = mmpar.scatter_kwargs((mmpar_batch["img"],), dict(mmpar_batch), targets)
    assert_same_value(got_args, want_args, "scatter_kwargs args")
    assert_same_value(got_kwargs, want_kwargs, "scatter_kwargs kwargs")

    one = mmcv_collate(_mmcv_samples(MmcvDC), samples_per_gpu=4)
    moved = mmpar.to_device(one, "cpu")
    assert_same_value(
        moved,
        mmpar.to_device(
            mmpar.collate(_mmcv_samples(mmpar.DataContainer), samples_per_gpu=4), "cpu"
        ),
        "to_device",
    )
    assert not any(isinstance(v, (MmcvDC, mmpar.DataContainer)) for v in moved.values())


@requires_mmcv
@pytest.mark.cuda
def test_pin_memory_takes_mmcv_batches() -> None:
    from mmcv.parallel import DataContainer as MmcvDC
    from mmcv.parallel import collate as mmcv_collate

    pinned = mmpar.pin_memory(mmcv_collate(_mmcv_samples(MmcvDC), samples_per_gpu=2))
    assert (
        type(pinned["img"]) is mmpar.DataContainer
        and type(pinned["img_metas"]) is mmpar.DataContainer
    )
    assert all(
        t.is_pinned() for t in pinned["img"].data + [b for c in pinned["gt_bboxes"].data for b in c]
    )
    assert pinned["img_metas"].cpu_only and pinned["img_metas"].data[0][0]["index"] == 0
