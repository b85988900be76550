"""TinyDet, its heads and the model/optimizer builders."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from mmpar.collate import collate
from mmpar.data import build_dataset
from mmpar.models import OPTIMIZERS, build_model, build_optimizer
from mmpar.models.center_head import decode, make_targets
from mmpar.models.norm import revert_sync_batchnorm
from mmpar.runner.launch import wrap_model
from mmpar.scatter_gather import to_device


def batch(n: int = 4, seed: int = 0) -> dict:
    dataset = build_dataset(
        dict(type="SyntheticShapes", num_samples=n, min_size=48, max_size=80, seed=seed)
    )
    loader = DataLoader(dataset, batch_size=n, collate_fn=lambda b: collate(b, samples_per_gpu=n))
    return to_device(next(iter(loader)), "cpu")


def test_forward_train_returns_scalar_losses() -> None:
    torch.manual_seed(0)
    model = build_model(dict(type="TinyDet", num_classes=3, width=16))
    data = batch()
    assert data["img"].shape[0] == 4 and data["img"].shape[2] % 32 == 0
    losses = model(**data)
    assert list(losses) == ["loss_heatmap", "loss_size", "loss_offset"]
    assert all(v.dim() == 0 and torch.isfinite(v) and v > 0 for v in losses.values())
    heat, size, offset = model.extract(data["img"])
    n, _, h, w = data["img"].shape
    assert heat.shape == (n, 3, h // 4, w // 4) and size.shape == offset.shape == (
        n,
        2,
        h // 4,
        w // 4,
    )


def test_loss_falls_on_one_batch() -> None:
    torch.manual_seed(0)
    model = build_model(dict(type="TinyDet", num_classes=3, width=16))
    optimizer = build_optimizer(model, dict(type="Adam", lr=5e-3))
    data = batch()
    losses = []
    for _ in range(25):
        out = model.train_step(data, optimizer)
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
        losses.append(out["log_vars"]["loss"])
    assert out["num_samples"] == 4 and set(out["log_vars"]) == {
        "loss_heatmap",
        "loss_size",
        "loss_offset",
        "loss",
    }
    assert losses[-1] < 0.5 * losses[0]


def test_targets_decode_back_to_the_boxes() -> None:
    boxes = torch.tensor([[8.0, 12.0, 40.0, 30.0], [50.0, 4.0, 62.0, 30.0]])
    labels = torch.tensor([1, 0])
    t = make_targets([boxes], [labels], num_classes=2, out_hw=(16, 16), stride=4)
    assert t.heatmap.max() == 1 and int((t.heatmap == 1).sum()) == 2
    logits = torch.logit(t.heatmap.clamp(1e-4, 1 - 1e-4))
    size, offset = torch.zeros(1, 2, 16, 16), torch.zeros(1, 2, 16, 16)
    for cell, s, o in zip(t.index, t.size, t.offset):
        size[0, :, cell // 16, cell % 16], offset[0, :, cell // 16, cell % 16] = s, o
    ((found, scores, found_labels),) = decode(logits, size, offset, stride=4, max_per_img=2)
    order = torch.argsort(found_labels, descending=True)
    assert torch.allclose(found[order], boxes, atol=1e-4)
    assert found_labels[order].tolist() == [1, 0] and torch.all(scores > 0.99)


def test_forward_test_format_rescale_and_padding() -> None:
    torch.manual_seed(0)
    model = build_model(dict(type="TinyDet", num_classes=3, width=16, score_thr=0.0)).eval()
    img = torch.randn(2, 3, 64, 96)
    metas = [
        dict(
            img_shape=(40, 50, 3), pad_shape=(64, 96, 3), scale_factor=np.full(4, 2.0, np.float32)
        ),
        dict(img_shape=(64, 96, 3), pad_shape=(64, 96, 3), scale_factor=np.ones(4, np.float32)),
    ]
    results = model(img=img, img_metas=metas, return_loss=False)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    for per_image, (max_w, max_h) in zip(results, [(25, 20), (96, 64)]):
        all_dets = np.concatenate(per_image)
        assert all_dets.shape == (50, 5) and all_dets.dtype == np.float32
        assert (
            all_dets[:, [0, 2]].max() <= max_w + 1e-4 and all_dets[:, [1, 3]].max() <= max_h + 1e-4
        )
        assert np.all(all_dets[:, 4] > 0.0)  # no detection comes from the padding (masked to -1e4)
    unscaled = model(img=img, img_metas=metas, return_loss=False, rescale=False)
    assert np.allclose(
        np.concatenate(unscaled[0])[:, :4], np.concatenate(results[0])[:, :4] * 2, atol=1e-4
    )


def test_bad_inputs_are_named() -> None:
    model = build_model(dict(type="TinyDet", num_classes=2, width=8))
    img = torch.zeros(1, 3, 32, 32)
    meta = [dict(img_shape=(32, 32, 3))]
    with pytest.raises(ValueError, match=r"gt_labels\[0\]: expected labels in \[0, 2\)"):
        model(
            img=img,
            img_metas=meta,
            gt_bboxes=[torch.tensor([[0.0, 0, 8, 8]])],
            gt_labels=[torch.tensor([5])],
        )
    with pytest.raises(ValueError, match="1 images but 2 img_metas"):
        model(img=img, img_metas=meta * 2, return_loss=False)
    with pytest.raises(ValueError, match=r"img must be \(N, 3, H, W\)"):
        model(img=torch.zeros(1, 1, 32, 32), img_metas=meta, return_loss=False)
    with pytest.raises(ValueError, match="num_classes must be an int >= 1"):
        build_model(dict(type="TinyDet", num_classes=0))
    with pytest.raises(ValueError, match="loss_weights keys"):
        build_model(dict(type="TinyDet", loss_weights=dict(cls=1.0)))


def test_builders() -> None:
    assert {"SGD", "Adam", "AdamW"} <= set(OPTIMIZERS.module_dict)
    model = build_model(dict(type="TinyDet", width=8))
    optimizer = build_optimizer(
        wrap_model(model, distributed=False), dict(type="SGD", lr=0.1, momentum=0.9)
    )
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.param_groups[0]["momentum"] == 0.9
    with pytest.raises(KeyError, match="Nope"):
        build_optimizer(model, dict(type="Nope", lr=0.1))
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        build_optimizer("model", dict(type="SGD", lr=0.1))
    with pytest.raises(KeyError, match="'type'"):
        build_model(dict(num_classes=3))
    with pytest.raises(TypeError, match="model: expected a dict"):
        build_model(["TinyDet"])
    dataset = build_dataset(dict(type="SyntheticShapes", num_samples=3), test_mode=True)
    assert len(dataset) == 3 and dataset.test_mode


def test_syncbn_without_process_group_becomes_batchnorm() -> None:
    model = build_model(dict(type="TinyDet", width=8, norm_cfg=dict(type="SyncBN")))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.warns(UserWarning, match="SyncBatchNorm layers converted to BatchNorm2d"):
        wrapped = wrap_model(model, distributed=False)
    inner = wrapped.module
    assert not any(isinstance(m, torch.nn.SyncBatchNorm) for m in inner.modules())
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in inner.modules())
    # On a GPU machine the wrapper has moved the model to cuda:0: compare the values.
    assert all(torch.equal(before[k], v.cpu()) for k, v in inner.state_dict().items())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        revert_sync_batchnorm(inner)  # nothing left to convert: no warning


@pytest.mark.cuda
def test_train_and_test_on_one_gpu() -> None:
    from mmpar.collate import collate as collate_fn

    torch.manual_seed(0)
    model = wrap_model(
        build_model(dict(type="TinyDet", num_classes=3, width=16)), distributed=False
    )
    optimizer = build_optimizer(model, dict(type="Adam", lr=1e-3))
    dataset = build_dataset(dict(type="SyntheticShapes", num_samples=4, min_size=48, max_size=80))
    data = collate_fn([dataset[i] for i in range(4)], samples_per_gpu=4)
    out = model.train_step(data, optimizer)
    assert out["loss"].device.type == "cuda"
    out["loss"].backward()
    optimizer.step()
    test_set = build_dataset(
        dict(type="SyntheticShapes", num_samples=2, min_size=48, max_size=80), test_mode=True
    )
    results = model.eval()(
        return_loss=False, **collate_fn([test_set[0], test_set[1]], samples_per_gpu=2)
    )
    assert len(results) == 2 and all(isinstance(d, np.ndarray) for d in results[0])
