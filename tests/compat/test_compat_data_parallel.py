"""mmpar.MMDataParallel on batches collated by mmcv 1.x's own collate.

The module inside gets plain tensors and lists: no container of either class
reaches it, in ``train_step``, ``val_step`` or ``forward``.
"""

from __future__ import annotations

from typing import List

import pytest
import torch
from torch import nn

import mmpar
from tests.compat._mmcv_env import requires_mmcv

pytestmark = requires_mmcv


def containers_in(obj, path: str = "batch") -> List[str]:
    """Paths of every DataContainer (mmcv's or mmpar's) anywhere in ``obj``."""
    from mmcv.parallel import DataContainer as MmcvDC

    if isinstance(obj, (MmcvDC, mmpar.DataContainer)):
        return [f"{path}: {type(obj).__module__}.{type(obj).__name__}"]
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            found += containers_in(value, f"{path}[{key!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            found += containers_in(value, f"{path}[{i}]")
    return found


class Probe(nn.Module):
    """Checks what reaches it, records it, returns an mmdet-style loss."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))
        self.calls: List[dict] = []

    def _check(self, how: str, img, img_metas, gt_bboxes, gt_labels, **rest) -> torch.Tensor:
        seen = dict(img=img, img_metas=img_metas, gt_bboxes=gt_bboxes, gt_labels=gt_labels, **rest)
        leaked = containers_in(seen)
        assert not leaked, f"{how}: containers reached the module: {leaked}"
        assert isinstance(img, torch.Tensor) and img.dim() == 4, f"{how}: img is {type(img)}"
        assert isinstance(img_metas, list) and all(isinstance(m, dict) for m in img_metas)
        assert isinstance(gt_bboxes, list) and all(isinstance(b, torch.Tensor) for b in gt_bboxes)
        assert isinstance(gt_labels, list) and all(isinstance(t, torch.Tensor) for t in gt_labels)
        assert len(img_metas) == len(gt_bboxes) == len(gt_labels) == img.shape[0]
        self.calls.append(dict(how=how, **seen))
        return (img.mean() * self.scale) + sum(b.sum() for b in gt_bboxes) * 0

    def forward(self, img, img_metas, return_loss=True, **kwargs):
        loss = self._check("forward", img, img_metas, **kwargs)
        if return_loss:
            return dict(loss=loss)
        # Inference: one result per image, as mmdet's detectors return.
        return [dict(index=m["index"], height=int(img.shape[2])) for m in img_metas]

    def train_step(self, data, optimizer, **kwargs):
        assert not containers_in(data), containers_in(data)
        loss = self._check("train_step", **data)
        return dict(loss=loss, log_vars=dict(loss=loss.item()), num_samples=data["img"].shape[0])

    def val_step(self, data, optimizer=None, **kwargs):
        return self.train_step(data, optimizer)


def mmcv_batch(n: int = 3):
    from mmcv.parallel import DataContainer as MmcvDC
    from mmcv.parallel import collate as mmcv_collate

    samples = []
    for i in range(n):
        h, w = 10 + 3 * i, 14 - i
        samples.append(
            dict(
                img=MmcvDC(torch.rand(3, h, w), stack=True),
                img_metas=MmcvDC(dict(index=i, img_shape=(h, w, 3)), cpu_only=True),
                gt_bboxes=MmcvDC(torch.rand(i + 1, 4)),
                gt_labels=MmcvDC(torch.arange(i + 1)),
            )
        )
    # One device: one chunk holding every sample, as mmdet's single-GPU loaders do.
    return samples, mmcv_collate(samples, samples_per_gpu=n)


def test_train_step_on_an_mmcv_batch_gets_plain_data() -> None:
    samples, batch = mmcv_batch()
    model = mmpar.MMDataParallel(Probe(), device_ids=["cpu"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model.train_step(batch, None)
    assert set(out) == {"loss", "log_vars", "num_samples"} and out["num_samples"] == 3
    out["loss"].backward()
    optimizer.step()
    (call,) = model.module.calls
    assert call["how"] == "train_step"
    # The data is mmcv's batch, unwrapped: the padded stack, the metas and boxes in order.
    assert torch.equal(call["img"], batch["img"].data[0])
    assert call["img"].shape == (3, 3, 16, 14)
    assert [m["index"] for m in call["img_metas"]] == [0, 1, 2]
    for i, sample in enumerate(samples):
        assert torch.equal(call["gt_bboxes"][i], sample["gt_bboxes"].data)
        assert torch.equal(call["gt_labels"][i], sample["gt_labels"].data)


def test_forward_and_val_step_on_an_mmcv_batch_get_plain_data() -> None:
    _, batch = mmcv_batch(2)
    model = mmpar.MMDataParallel(Probe(), device_ids=["cpu"])
    out = model(return_loss=False, **batch)
    assert out == [dict(index=0, height=13), dict(index=1, height=13)]
    assert isinstance(model(**batch)["loss"], torch.Tensor)
    model.val_step(batch, None)
    assert [c["how"] for c in model.module.calls] == ["forward", "forward", "train_step"]
    for call in model.module.calls:
        assert torch.equal(call["img"], batch["img"].data[0])
        assert [m["index"] for m in call["img_metas"]] == [0, 1]


@pytest.mark.parametrize("device_ids", [None, [-1]])
def test_cpu_wrapper_forms_take_mmcv_batches(device_ids) -> None:
    # MMDataParallel(model) and device_ids=[-1]: the CPU forms mmcv-era code uses.
    _, batch = mmcv_batch(2)
    model = mmpar.MMDataParallel(Probe(), device_ids=device_ids)
    model.train_step(batch, None)
    assert model(return_loss=False, **batch) == [dict(index=0, height=13), dict(index=1, height=13)]
    assert [c["how"] for c in model.module.calls] == ["train_step", "forward"]
