"""The image libraries behind the pipeline steps: OpenCV where installed, Pillow and torch else.

Each step is run with both libraries on real files and arrays; the results must
agree exactly (decoding colour JPEG/PNG, flipping, normalizing, every piece of
metadata and every box) or, for the resize, each be within one grey level of
bilinear sampling computed here from its definition.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from mmpar import collate
from mmpar.data.transforms import (
    Compose,
    DefaultFormatBundle,
    LoadImageFromFile,
    Normalize,
    Pad,
    Resize,
)
from mmpar.data.transforms.backends import opencv, resolve_backend
from mmpar.data.transforms.flip import flip_array
from mmpar.data.transforms.photometric import normalize_image
from mmpar.data.transforms.planar import channels_first, is_planar, pad_image
from mmpar.data.transforms.resize import resize_image

Image = pytest.importorskip("PIL.Image")
requires_cv2 = pytest.mark.skipif(opencv() is None, reason="OpenCV is not installed")

MEAN = np.array([123.675, 116.28, 103.53], np.float32)
STD = np.array([58.395, 57.12, 57.375], np.float32)


@pytest.fixture
def no_cv2(monkeypatch):
    """OpenCV made unimportable for the test: every step takes its fallback."""
    monkeypatch.setitem(sys.modules, "cv2", None)
    opencv.cache_clear()
    yield
    opencv.cache_clear()


@pytest.fixture(params=["opencv", "fallback"])
def library(request) -> str:
    """The test runs twice: with OpenCV, then with it unimportable (:func:`no_cv2`)."""
    if request.param == "fallback":
        request.getfixturevalue("no_cv2")
    return request.param


def _photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A photo-like uint8 RGB image: a smooth field, mild noise and a sharp rectangle."""
    rng = np.random.default_rng(seed)
    coarse = torch.from_numpy(rng.random((1, 3, h // 8 + 2, w // 8 + 2), dtype=np.float32))
    field = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bicubic")[0]
    img = field.permute(1, 2, 0).numpy() * 200 + rng.normal(0, 8, (h, w, 3))
    img[h // 4 : h // 2, w // 3 : w // 2] = (250, 20, 60)
    return np.clip(img, 0, 255).astype(np.uint8)


def _load(folder, name: str, **kwargs) -> dict:
    return LoadImageFromFile(**kwargs)(dict(img_prefix=str(folder), img_info=dict(filename=name)))


# ------------------------------------------------------------------ choosing the library


def test_auto_picks_opencv_when_it_imports_and_the_fallback_otherwise(no_cv2):
    assert resolve_backend("auto", "torch", "Resize") == "torch"
    assert LoadImageFromFile().backend == "pillow" and Resize().backend == "torch"
    with pytest.raises(ImportError, match="Resize: backend='cv2' needs OpenCV.*pip install"):
        Resize(backend="cv2")


def test_an_unknown_backend_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"LoadImageFromFile: backend must be one of .*'turbo'"):
        LoadImageFromFile(backend="turbo")
    with pytest.raises(
        ValueError, match=r"Resize: backend must be one of \('auto', 'cv2', 'torch'"
    ):
        Resize(backend="pillow")


# ------------------------------------------------------------------ decoding


@requires_cv2
@pytest.mark.parametrize("suffix", ["jpg", "png"])
@pytest.mark.parametrize("order", ["rgb", "bgr"])
def test_opencv_and_pillow_decode_colour_files_to_the_same_pixels(tmp_path, suffix, order):
    Image.fromarray(_photo(48, 61)).save(tmp_path / f"a.{suffix}", quality=90)
    by_cv2 = _load(tmp_path, f"a.{suffix}", channel_order=order, backend="cv2")
    by_pil = _load(tmp_path, f"a.{suffix}", channel_order=order, backend="pillow")
    assert by_cv2["img"].dtype == np.uint8 and by_cv2["img"].shape == (48, 61, 3)
    np.testing.assert_array_equal(by_cv2["img"], by_pil["img"])
    assert by_cv2["channel_order"] == by_pil["channel_order"] == order


@requires_cv2
def test_opencv_applies_the_exif_orientation_as_pillow_does(tmp_path):
    pil = Image.fromarray(_photo(40, 64))
    exif = pil.getexif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    pil.save(tmp_path / "r.jpg", exif=exif, quality=90)
    by_cv2 = _load(tmp_path, "r.jpg", backend="cv2")["img"]
    assert by_cv2.shape == (64, 40, 3)
    np.testing.assert_array_equal(by_cv2, _load(tmp_path, "r.jpg", backend="pillow")["img"])


@requires_cv2
def test_grayscale_and_files_opencv_cannot_read_go_to_pillow(tmp_path):
    img = _photo(30, 20)
    Image.fromarray(img).save(tmp_path / "a.jpg", quality=90)
    Image.fromarray(img).save(tmp_path / "a.pcx")  # a format OpenCV does not read
    gray = _load(tmp_path, "a.jpg", color_type="grayscale", backend="cv2")["img"]
    np.testing.assert_array_equal(
        gray, _load(tmp_path, "a.jpg", color_type="grayscale", backend="pillow")["img"]
    )
    np.testing.assert_array_equal(_load(tmp_path, "a.pcx", backend="cv2")["img"], img)


@pytest.mark.parametrize("backend", ["cv2", "pillow"])
def test_a_file_neither_library_decodes_is_named(tmp_path, backend):
    if backend == "cv2" and opencv() is None:
        pytest.skip("OpenCV is not installed")
    (tmp_path / "bad.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    (tmp_path / "empty.jpg").write_bytes(b"")
    for name in ("bad.jpg", "empty.jpg"):
        with pytest.raises(ValueError, match=f"cannot decode image file .*{name}"):
            _load(tmp_path, name, backend=backend)


def test_without_opencv_colour_files_decode_with_pillow(tmp_path, no_cv2):
    img = _photo(20, 30)
    Image.fromarray(img).save(tmp_path / "a.png")
    np.testing.assert_array_equal(_load(tmp_path, "a.png")["img"], img)


# ------------------------------------------------------------------ resizing


def _bilinear(img: np.ndarray, size_hw) -> np.ndarray:
    """Bilinear sampling with half-pixel centres, no antialiasing, edges clamped, in float64."""
    out_h, out_w = size_hw
    h, w = img.shape[:2]

    def taps(n_out: int, n_in: int):
        src = np.maximum((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0)
        lo = np.minimum(np.floor(src).astype(int), n_in - 1)
        hi = np.minimum(lo + 1, n_in - 1)
        return lo, hi, src - lo

    r0, r1, fy = taps(out_h, h)
    c0, c1, fx = taps(out_w, w)
    x = img.astype(np.float64)
    fy, fx = fy[:, None, None], fx[None, :, None]
    top = x[r0][:, c0] * (1 - fx) + x[r0][:, c1] * fx
    bottom = x[r1][:, c0] * (1 - fx) + x[r1][:, c1] * fx
    return top * (1 - fy) + bottom * fy


@pytest.mark.parametrize("backend", ["cv2", "torch"])
@pytest.mark.parametrize(
    "src_hw, dst_hw, channels",
    [
        ((48, 64), (80, 107), 3),
        ((64, 43), (100, 67), 3),
        ((90, 120), (37, 50), 3),
        ((33, 21), (50, 70), 1),
    ],
)
def test_uint8_resize_is_within_one_grey_level_of_bilinear(backend, src_hw, dst_hw, channels):
    if backend == "cv2" and opencv() is None:
        pytest.skip("OpenCV is not installed")
    img = _photo(*src_hw)[:, :, :channels]
    out = resize_image(img, dst_hw, backend)
    assert out.shape == tuple(dst_hw) + (channels,) and out.dtype == np.uint8
    assert np.abs(out - _bilinear(img, dst_hw)).max() <= 1.0


@pytest.mark.parametrize("backend", ["cv2", "torch"])
def test_float_resize_matches_bilinear(backend):
    if backend == "cv2" and opencv() is None:
        pytest.skip("OpenCV is not installed")
    img = _photo(30, 40).astype(np.float32)
    out = resize_image(img, (45, 61), backend)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, _bilinear(img, (45, 61)), atol=1e-3)


@requires_cv2
def test_the_resize_step_gives_the_same_boxes_and_metadata_with_either_library():
    boxes = np.array([[3.5, 2.0, 40.0, 30.25], [0, 0, 64, 48]], np.float32)
    out = {}
    for backend in ("cv2", "torch"):
        results = dict(img=_photo(48, 64), gt_bboxes=boxes.copy(), bbox_fields=["gt_bboxes"])
        out[backend] = Resize((1333, 800), backend=backend)(results)
    a, b = out["cv2"], out["torch"]
    for key in ("img_shape", "pad_shape", "scale", "keep_ratio"):
        assert a[key] == b[key]
    np.testing.assert_array_equal(a["scale_factor"], b["scale_factor"])
    np.testing.assert_array_equal(a["gt_bboxes"], b["gt_bboxes"])
    assert np.abs(a["img"].astype(int) - b["img"]).max() <= 2  # each within 1 of exact


# ------------------------------------------------------------------ flipping


@pytest.mark.parametrize("direction", ["horizontal", "vertical", "diagonal"])
@pytest.mark.parametrize(
    "arr",
    [
        np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3),
        np.arange(5 * 7, dtype=np.float32).reshape(5, 7, 1),
        np.arange(5 * 7, dtype=np.int64).reshape(5, 7),  # a label map
        (np.arange(5 * 7) % 3 == 0).reshape(5, 7),
    ],
    ids=["uint8", "float-1ch", "int64-map", "bool-map"],
)
def test_flip_array_mirrors_exactly(direction, arr, library):
    axes = {"horizontal": (1,), "vertical": (0,), "diagonal": (0, 1)}[direction]
    out = flip_array(arr, direction)
    assert out.dtype == arr.dtype and out.flags.c_contiguous
    np.testing.assert_array_equal(out, np.flip(arr, axes))


# ------------------------------------------------------------------ normalizing, the layout


def _normalized(img: np.ndarray, swap: bool) -> np.ndarray:
    """What Normalize computed before it wrote planes: float32, mean then std."""
    if swap:
        img = img[..., ::-1]
    out = img.astype(np.float32)
    out -= MEAN[: out.shape[-1]]
    out /= STD[: out.shape[-1]]
    return out


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64])
def test_normalize_is_bit_exact_and_planar(swap, dtype, library):
    img = _photo(37, 53).astype(dtype)
    out = normalize_image(img, MEAN, STD, swap)
    assert out.dtype == np.float32 and out.shape == (37, 53, 3) and is_planar(out)
    np.testing.assert_array_equal(out, _normalized(img, swap))


def test_normalize_keeps_a_single_channel_and_a_2d_image():
    img = _photo(9, 11)[:, :, :1]
    one = normalize_image(img, MEAN[:1], STD[:1])
    np.testing.assert_array_equal(one, _normalized(img, False))
    flat = normalize_image(img[:, :, 0], MEAN[:1], STD[:1])
    assert flat.shape == (9, 11)
    np.testing.assert_array_equal(flat, one[:, :, 0])


def test_pad_keeps_the_planar_layout_and_fills_only_the_margins():
    planar = normalize_image(_photo(10, 13), MEAN, STD)
    padded = pad_image(planar, (16, 32), -1.5)
    assert is_planar(padded) and padded.shape == (16, 32, 3)
    np.testing.assert_array_equal(padded[:10, :13], planar)
    assert (padded[10:] == -1.5).all() and (padded[:10, 13:] == -1.5).all()
    plain = pad_image(_photo(10, 13), (16, 32), 7)
    assert plain.flags.c_contiguous and (plain[10:] == 7).all()
    np.testing.assert_array_equal(plain[:10, :13], _photo(10, 13))


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_channels_first_shares_a_planar_image_and_copies_others_once(dtype):
    planar = normalize_image(_photo(6, 8), MEAN, STD).astype(dtype, copy=False)
    if dtype == np.uint8:
        planar = pad_image(_photo(6, 8), (6, 8), 0)  # an interleaved uint8 image
    chw = channels_first(planar)
    assert chw.shape == (3, 6, 8) and chw.flags.c_contiguous
    np.testing.assert_array_equal(chw, planar.transpose(2, 0, 1))
    assert np.shares_memory(chw, planar) == is_planar(planar)


def test_the_bundle_takes_a_normalized_image_without_copying_it():
    results = Normalize(MEAN, STD)(dict(img=_photo(12, 20)))
    results = Pad(size_divisor=8)(results)
    img = results["img"]
    tensor = DefaultFormatBundle()(results)["img"].data
    assert tensor.shape == (3, 16, 24) and tensor.is_contiguous()
    assert tensor.data_ptr() == img.__array_interface__["data"][0]


# ------------------------------------------------------------------ the whole pipeline


PIPELINE = [
    dict(type="LoadImageFromFile"),
    dict(type="LoadAnnotations", with_bbox=True),
    dict(type="Resize", img_scale=(1333, 800), keep_ratio=True),
    dict(type="RandomFlip", flip_ratio=0.5),
    dict(type="Normalize", mean=MEAN.tolist(), std=STD.tolist(), to_rgb=True),
    dict(type="Pad", size_divisor=32),
    dict(type="DefaultFormatBundle"),
    dict(type="Collect", keys=["img", "gt_bboxes", "gt_labels"]),
]


def _with_backends(load: str, resize: str) -> list:
    steps = [dict(step) for step in PIPELINE]
    steps[0]["backend"], steps[2]["backend"] = load, resize
    return steps


@requires_cv2
@pytest.mark.parametrize("flip", [False, True])
def test_the_standard_pipeline_gives_the_same_batch_with_either_library(tmp_path, flip):
    samples = {}
    for i, (h, w) in enumerate([(48, 64), (64, 43)]):
        Image.fromarray(_photo(h, w, seed=i)).save(tmp_path / f"{i}.jpg", quality=90)
    for name, steps in {
        "cv2": _with_backends("cv2", "cv2"),
        "fallback": _with_backends("pillow", "torch"),
    }.items():
        pipeline = Compose(steps)
        samples[name] = [
            pipeline(
                dict(
                    img_prefix=str(tmp_path),
                    img_info=dict(filename=f"{i}.jpg"),
                    ann_info=dict(
                        bboxes=np.array([[1, 2, 30, 40]], np.float32), labels=np.array([3])
                    ),
                    flip=flip,
                )
            )
            for i in range(2)
        ]
    for a, b in zip(samples["cv2"], samples["fallback"]):
        meta_a, meta_b = a["img_metas"].data, b["img_metas"].data
        assert set(meta_a) == set(meta_b)
        for key in ("img_shape", "ori_shape", "pad_shape", "flip", "flip_direction"):
            assert meta_a[key] == meta_b[key], key
        np.testing.assert_array_equal(meta_a["scale_factor"], meta_b["scale_factor"])
        torch.testing.assert_close(a["gt_bboxes"].data, b["gt_bboxes"].data, rtol=0, atol=0)
        diff = (a["img"].data - b["img"].data).abs().max().item()
        assert diff <= 2 / STD.min() + 1e-5  # two grey levels: each resize within one of exact
    batches = [collate(s, samples_per_gpu=2)["img"].data[0] for s in samples.values()]
    # 64 x 48 -> 1067 x 800 and 43 x 64 -> 800 x 1191, padded to multiples of 32
    assert batches[0].shape == batches[1].shape == (2, 3, 1216, 1088)
    assert (batches[0] - batches[1]).abs().max().item() <= 2 / STD.min() + 1e-5
