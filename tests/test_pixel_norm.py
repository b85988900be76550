"""Normalizing while collate writes the batch: PixelNorm, its container, and the deferred Normalize.

Every deferred path is compared bit for bit with the worker-side steps it
replaces: ``Normalize`` computing float32 images, ``Pad`` padding them,
``DefaultFormatBundle`` laying them out.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from mmpar import DataContainer, collate
from mmpar.data.transforms import Collect, Compose, DefaultFormatBundle, Normalize, Pad
from mmpar.data.transforms.photometric import DEFERRED_NORM
from mmpar.pixel_norm import PixelNorm

MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


def _reference(raw: torch.Tensor, norm: PixelNorm) -> torch.Tensor:
    """From the definition: float32 ``(x - mean) / std`` per channel, then the margin."""
    x = raw.numpy().astype(np.float32)
    if norm.swap_rb:
        x = x[::-1]
    out = (x - np.float32(norm.mean)[:, None, None]) / np.float32(norm.std)[:, None, None]
    h, w = norm.content_hw
    out[:, h:] = norm.margin
    out[:, :, w:] = norm.margin
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))


def _raw(h: int = 9, w: int = 13, seed: int = 0, dtype=torch.uint8) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.int64).to(dtype)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float64])
@pytest.mark.parametrize("content_hw, margin", [((9, 13), 0), ((7, 10), -1.5)])
def test_pixel_norm_is_the_float32_arithmetic_then_the_margin(swap, dtype, content_hw, margin):
    norm = PixelNorm(tuple(MEAN), tuple(STD), swap, content_hw, margin)
    raw = _raw(dtype=dtype)
    assert torch.equal(norm.apply(raw), _reference(raw, norm))
    wide = torch.full((3, 16, 32), 99.0)
    norm.write(wide[:, :9, :13], raw)  # a strided corner of a padded batch
    assert torch.equal(wide[:, :9, :13], _reference(raw, norm))
    assert (wide[:, 9:] == 99).all() and (wide[:, :, 13:] == 99).all()


def test_pixel_norm_reads_a_channels_last_view_without_copying_it():
    hwc = _raw().permute(1, 2, 0).contiguous()
    norm = PixelNorm(tuple(MEAN), tuple(STD), True, (9, 13))
    view = hwc.permute(2, 0, 1)
    assert torch.equal(norm.apply(view), _reference(view.contiguous(), norm))


# ------------------------------------------------------------------ the container


def _container(raw=None, **norm) -> DataContainer:
    raw = _raw() if raw is None else raw
    args = dict(mean=tuple(MEAN), std=tuple(STD), swap_rb=False, content_hw=(9, 13))
    args.update(norm)
    return DataContainer(raw, stack=True, pixel_norm=PixelNorm(**args))


def test_a_containers_data_is_the_normalized_image_and_raw_data_what_was_given():
    raw = _raw()
    dc = _container(raw)
    assert dc.raw_data is raw and dc.pixel_norm.content_hw == (9, 13)
    assert dc.data.dtype == torch.float32 and dc.data is dc.data  # made once
    assert torch.equal(dc.data, _reference(raw, dc.pixel_norm))
    assert dc.datatype == "torch.FloatTensor" and dc.size() == (3, 9, 13)
    assert dc.with_data(dc.data).pixel_norm is None  # other data: no norm
    back = pickle.loads(pickle.dumps(dc))
    assert back.pixel_norm == dc.pixel_norm and torch.equal(back.raw_data, raw)
    assert torch.equal(back.data, dc.data)


def test_a_bad_pixel_norm_is_refused_naming_what_is_wrong():
    norm = PixelNorm(tuple(MEAN), tuple(STD), False, (9, 13))
    with pytest.raises(ValueError, match="pixel_norm needs stack=True"):
        DataContainer(_raw(), pixel_norm=norm)
    with pytest.raises(TypeError, match="pixel_norm must be a PixelNorm, got dict"):
        DataContainer(_raw(), stack=True, pixel_norm=dict(mean=MEAN))
    with pytest.raises(TypeError, match="needs tensor data, got ndarray"):
        DataContainer(np.zeros((3, 9, 13)), stack=True, pixel_norm=norm)
    with pytest.raises(ValueError, match=r"3 means and 3 stds needs .* got shape \(1, 9, 13\)"):
        DataContainer(_raw()[:1], stack=True, pixel_norm=norm)
    with pytest.raises(
        ValueError, match=r"content_hw \(9, 13\) is larger than the image \(8, 13\)"
    ):
        DataContainer(_raw()[:, :8], stack=True, pixel_norm=norm)


def test_collate_writes_the_normalized_batch_the_eager_containers_make():
    raws = [_raw(9, 13, 0), _raw(12, 7, 1), _raw(5, 20, 2)]
    deferred = [
        dict(img=_container(r, content_hw=tuple(r.shape[1:]), swap_rb=bool(i % 2)))
        for i, r in enumerate(raws)
    ]
    eager = [dict(img=DataContainer(s["img"].data.clone(), stack=True)) for s in deferred]
    a = collate(deferred, samples_per_gpu=2)["img"]
    b = collate(eager, samples_per_gpu=2)["img"]
    assert a.pixel_norm is None and len(a.data) == 2
    for x, y in zip(a.data, b.data):
        assert x.dtype == torch.float32 and torch.equal(x, y)
    assert a.buffer is not None  # one buffer, as any batch


def test_collate_refuses_samples_normalized_differently_naming_the_field():
    with pytest.raises(
        ValueError, match=r"field 'img'.*sample 0 has a pixel_norm, sample 1 has none"
    ):
        collate([dict(img=_container()), dict(img=DataContainer(_raw(), stack=True))])


# ------------------------------------------------------------------ the deferred Normalize


def _steps(pad: bool, to_rgb: bool = True, pad_val: float = 0) -> list:
    steps = [Normalize(MEAN, STD, to_rgb=to_rgb)]
    if pad:
        steps.append(Pad(size_divisor=8, pad_val=pad_val))
    steps += [
        DefaultFormatBundle(size_divisor=None if pad else 8, pad_val=dict(img=pad_val)),
        Collect(["img"]),
    ]
    return steps


def _sample(i: int, order: str = "rgb") -> dict:
    rng = np.random.default_rng(i)
    h, w = (11, 17) if i % 2 else (14, 6)
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    return dict(
        img=img,
        img_shape=img.shape,
        ori_shape=img.shape,
        filename=f"{i}.jpg",
        ori_filename=f"{i}.jpg",
        channel_order=order,
    )


def _assert_same(a, b, key: str) -> None:
    if isinstance(b, dict):
        assert a.keys() == b.keys(), key
        for k in b:
            _assert_same(a[k], b[k], f"{key}.{k}")
    else:
        np.testing.assert_array_equal(a, b, err_msg=key)


def _eager(steps: list, results: dict) -> dict:
    for step in steps:  # step by step: no Compose, no deferral
        results = step(results)
    return results


@pytest.mark.parametrize("pad, pad_val", [(True, 0), (True, -2.5), (False, 0)])
@pytest.mark.parametrize("order", ["rgb", "bgr"])
def test_a_composed_pipeline_defers_and_gives_the_same_samples_and_batch(pad, pad_val, order):
    steps = _steps(pad, pad_val=pad_val)
    pipeline = Compose(steps)
    assert pipeline.transforms[0]._deferred and not steps[0]._deferred
    deferred = [pipeline(_sample(i, order)) for i in range(4)]
    eager = [_eager(steps, _sample(i, order)) for i in range(4)]
    for d, e in zip(deferred, eager):
        assert d["img"].pixel_norm is not None and e["img"].pixel_norm is None
        assert d["img"].raw_data.dtype == torch.uint8
        assert torch.equal(d["img"].data, e["img"].data)
        meta_d, meta_e = d["img_metas"].data, e["img_metas"].data
        assert meta_d.keys() == meta_e.keys() and DEFERRED_NORM not in meta_d
        for key, value in meta_e.items():
            _assert_same(meta_d[key], value, key)
    batch_d = collate(deferred, samples_per_gpu=4)["img"].data[0]
    batch_e = collate(eager, samples_per_gpu=4)["img"].data[0]
    assert batch_d.dtype == torch.float32 and torch.equal(batch_d, batch_e)


def test_a_step_that_reads_pixels_after_normalize_keeps_it_eager():
    seen = []
    steps = _steps(pad=True)
    steps.insert(1, lambda results: seen.append(results["img"].dtype) or results)
    pipeline = Compose(steps)
    assert not pipeline.transforms[0]._deferred
    out = pipeline(_sample(0))
    assert seen == [np.float32] and out["img"].pixel_norm is None


def test_on_device_normalize_is_not_deferred_to_collate():
    steps = [Normalize(MEAN, STD, on_device=True), DefaultFormatBundle(), Collect(["img"])]
    pipeline = Compose(steps)
    assert pipeline.transforms[0] is steps[0]
    assert pipeline(_sample(0))["img"].data.dtype == torch.uint8


class _Samples(torch.utils.data.Dataset):
    def __init__(self, pipeline) -> None:
        self.pipeline = pipeline

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> dict:
        return self.pipeline(_sample(i, "bgr"))


def test_dataloader_workers_deliver_the_eager_batches():
    steps = _steps(pad=True, pad_val=1.0)
    loader = DataLoader(
        _Samples(Compose(steps)),
        batch_size=4,
        num_workers=2,
        collate_fn=lambda b: collate(b, samples_per_gpu=2),
        timeout=60,
    )
    batches = list(loader)
    assert len(batches) == 3
    for k, batch in enumerate(batches):
        eager = collate([_eager(steps, _sample(4 * k + i, "bgr")) for i in range(4)], 2)
        for x, y in zip(batch["img"].data, eager["img"].data):
            assert torch.equal(x, y)
