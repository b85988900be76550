"""Normalizing on the device after scatter gives the batch the worker-side pipeline gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmpar import MMDataParallel, collate, normalize_batch, scatter
from mmpar.data import SyntheticShapes
from mmpar.device_norm import needs_device_norm, normalize_images

DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]


def _pipeline(
    on_device: bool, pad_val: float = 0, batch_pad_val: float = 0, bgr: bool = False
) -> list:
    return [
        dict(type="LoadImageFromArray", channel_order="bgr" if bgr else "rgb"),
        dict(type="LoadAnnotations"),
        dict(
            type="Normalize",
            mean=[123.675, 116.28, 103.53],
            std=[58.395, 57.12, 57.375],
            to_rgb=True,
            on_device=on_device,
        ),
        dict(type="Pad", size_divisor=32, pad_val=pad_val),
        dict(type="DefaultFormatBundle", pad_val=dict(img=batch_pad_val)),
        dict(type="Collect", keys=["img", "gt_bboxes", "gt_labels"]),
    ]


def _batch(on_device: bool, per_gpu: int = 3, **kwargs) -> dict:
    # Sizes 40-90: images of one batch differ, so collate adds a margin beyond each pad_shape.
    data = SyntheticShapes(
        num_samples=6, min_size=40, max_size=90, seed=4, pipeline=_pipeline(on_device, **kwargs)
    )
    return collate([data[i] for i in range(6)], samples_per_gpu=per_gpu)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "pad_val, batch_pad_val, bgr", [(0, 0, False), (1.5, -2.0, False), (0, 0, True)]
)
def test_scatter_then_normalize_equals_the_worker_side_batch(
    device: str, pad_val: float, batch_pad_val: float, bgr: bool
) -> None:
    worker = scatter(
        _batch(False, pad_val=pad_val, batch_pad_val=batch_pad_val, bgr=bgr), [device, device]
    )
    raw = _batch(True, pad_val=pad_val, batch_pad_val=batch_pad_val, bgr=bgr)
    assert (
        raw["img"].data[0].dtype == torch.uint8
    )  # a quarter of the bytes through workers and PCIe
    shipped = scatter(raw, [device, device])
    assert all(needs_device_norm(p["img_metas"]) for p in shipped)
    for want, got in zip(worker, (normalize_batch(p) for p in shipped)):
        assert got["img"].dtype == torch.float32 and got["img"].device == torch.device(device)
        # The margins hold the worker-side padding values, not -mean/std.
        torch.testing.assert_close(got["img"], want["img"], rtol=1e-5, atol=1e-5)
        assert not needs_device_norm(got["img_metas"])
        assert normalize_batch(got) is got  # done once: a second pass changes nothing


def test_the_wrappers_normalize_after_scatter() -> None:
    seen = {}

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def train_step(self, data: dict, optimizer: object = None) -> dict:
            seen.update(data)
            return dict(loss=self.w.sum())

        def forward(self, img: torch.Tensor, img_metas: list, **kwargs: object) -> torch.Tensor:
            seen["forward"] = img
            return img.mean(dim=(1, 2, 3))

    target = "cpu" if not torch.cuda.is_available() else 0
    model = Probe() if target == "cpu" else Probe().cuda(0)
    wrapped = MMDataParallel(model, device_ids=[target])
    worker, raw = _batch(False, per_gpu=6), _batch(True, per_gpu=6)
    wrapped.train_step(raw, None)
    want = worker["img"].data[0]
    torch.testing.assert_close(seen["img"].cpu(), want, rtol=1e-5, atol=1e-5)
    raw_first = {k: v for k, v in raw.items()}
    wrapped(**collate([_one(True)], samples_per_gpu=1))
    torch.testing.assert_close(
        seen["forward"].cpu(),
        collate([_one(False)], samples_per_gpu=1)["img"].data[0],
        rtol=1e-5,
        atol=1e-5,
    )
    assert raw_first["img"].data[0].dtype == torch.uint8  # the caller's batch is left alone


def _one(on_device: bool) -> dict:
    return SyntheticShapes(num_samples=1, seed=9, pipeline=_pipeline(on_device))[0]


def test_auto_follows_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    from mmpar.data.transforms import Normalize

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert Normalize([0.0], [1.0], on_device="auto").on_device is True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert Normalize([0.0], [1.0], on_device="auto").on_device is False
    with pytest.raises(ValueError, match="on_device"):
        Normalize([0.0], [1.0], on_device="gpu")


def test_normalize_images_checks_its_arguments() -> None:
    metas = [dict(img_norm_cfg=dict(mean=[0.0, 0.0], std=[1.0, 1.0], on_device=True))]
    with pytest.raises(ValueError, match=r"'mean'\] must have 3 values"):
        normalize_images(torch.zeros(1, 3, 4, 4, dtype=torch.uint8), metas)
    with pytest.raises(ValueError, match="1 images but 2 img_metas"):
        normalize_images(torch.zeros(1, 2, 4, 4, dtype=torch.uint8), metas * 2)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        normalize_images(torch.zeros(2, 4, 4), metas)


def test_the_default_pipeline_switch() -> None:
    worker = SyntheticShapes(num_samples=2, seed=1, test_mode=True)[0]  # no random flip
    shipped = SyntheticShapes(num_samples=2, seed=1, test_mode=True, normalize_on_device=True)[0]
    assert worker["img"].data.dtype == torch.float32 and shipped["img"].data.dtype == torch.uint8
    got = normalize_batch(
        dict(img=shipped["img"].data[None], img_metas=[shipped["img_metas"].data])
    )["img"][0]
    np.testing.assert_allclose(got.numpy(), worker["img"].data.numpy(), rtol=1e-5, atol=1e-5)
