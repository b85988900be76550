"""to_device: a batch collated for one device, unwrapped and moved."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmpar import DataContainer, collate, to_device


def _samples(n: int) -> list:
    return [
        {
            "img": DataContainer(torch.full((3, 4 + i, 4), float(i)), stack=True),
            "gt_bboxes": DataContainer(torch.full((i + 1, 4), float(i))),
            "gt_np": DataContainer(np.full((i + 1,), i, dtype=np.int64)),
            "img_metas": DataContainer({"idx": i}, cpu_only=True),
            "label": torch.tensor(i),
            "name": f"s{i}",
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("device", [-1, "cpu", torch.device("cpu")])
def test_unwraps_every_container(device: object) -> None:
    batch = collate(_samples(3), samples_per_gpu=3)
    out = to_device(batch, device)
    assert out["img"] is batch["img"].data[0]
    assert out["img"].shape == (3, 3, 6, 4)
    assert all(a is b for a, b in zip(out["gt_bboxes"], batch["gt_bboxes"].data[0]))
    assert all(isinstance(t, torch.Tensor) for t in out["gt_np"])
    assert [t.tolist() for t in out["gt_np"]] == [[0], [1, 1], [2, 2, 2]]
    assert out["img_metas"] is batch["img_metas"].data[0]
    assert out["label"] is batch["label"]
    assert out["name"] == ["s0", "s1", "s2"]


def test_uncollated_containers_and_plain_values() -> None:
    t = torch.ones(2)
    out = to_device(
        {"x": DataContainer(t), "m": DataContainer({"k": 1}, cpu_only=True), "n": 3}, "cpu"
    )
    assert out == {"x": t, "m": {"k": 1}, "n": 3} and out["x"] is t


def test_several_chunks_point_to_scatter() -> None:
    batch = collate(_samples(4), samples_per_gpu=2)
    with pytest.raises(
        ValueError, match=r"field 'img' holds 2 chunks.*use scatter\(data, targets\)"
    ):
        to_device(batch, "cpu")


@pytest.mark.parametrize("device, exc", [("tpu", ValueError), ([-1], TypeError), (-3, ValueError)])
def test_bad_device(device: object, exc: type) -> None:
    with pytest.raises(exc, match="target_gpus"):
        to_device(torch.zeros(1), device)
