"""Helpers of the ``pipeline`` section: JPEG files, input dicts, imports, one thread.

The images look like photographs to the decoder: a smooth random field (coarse and
fine grids of colours upscaled bicubically), a few flat rectangles and mild noise
(about 65 KB per 640x480 file). Pure noise would be unrealistically expensive to
decode.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import os
import os.path as osp
import sys
import warnings
from types import ModuleType
from typing import Callable, Iterator, List, NamedTuple, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from mmpar.compat.mmcv_ops import compiled_ops_error, supply_mmcv_ops

#: ``(width, height)`` of the files, alternating: landscape and portrait VGA-like.
SIZES = ((640, 480), (427, 640))
QUALITY = 90
MAX_BOXES = 8
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class ImageFile(NamedTuple):
    """One generated file and its annotations (boxes x1y1x2y2 in pixels)."""

    name: str
    width: int
    height: int
    bboxes: np.ndarray
    labels: np.ndarray


def _field(rng: np.random.Generator, width: int, height: int, cell: int) -> np.ndarray:
    """Random colours on a grid of ``cell`` pixels, upscaled bicubically: float32 HWC in 0-255."""
    from PIL import Image

    grid = rng.integers(0, 256, (height // cell + 2, width // cell + 2, 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(grid).resize((width, height), Image.BICUBIC), np.float32)


def _content(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """An HWC uint8 image: smooth colour field with finer detail, a few flat rectangles, noise."""
    from PIL import Image, ImageDraw

    img = 0.8 * _field(rng, width, height, 48) + 0.2 * _field(rng, width, height, 6)
    pil = Image.fromarray(img.astype(np.uint8))
    draw = ImageDraw.Draw(pil)
    for _ in range(int(rng.integers(2, 6))):
        x0, y0 = int(rng.integers(0, width - 20)), int(rng.integers(0, height - 20))
        x1, y1 = x0 + int(rng.integers(10, width // 3)), y0 + int(rng.integers(10, height // 3))
        draw.rectangle((x0, y0, x1, y1), fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    noisy = np.asarray(pil, np.float32) + rng.normal(0, 3, (height, width, 3))
    return np.clip(noisy, 0, 255).astype(np.uint8)


def _boxes(rng: np.random.Generator, width: int, height: int) -> Tuple[np.ndarray, np.ndarray]:
    """1 to MAX_BOXES float32 boxes inside the image, and int64 labels in [0, 80)."""
    k = int(rng.integers(1, MAX_BOXES + 1))
    bw, bh = rng.uniform(8, width / 2, k), rng.uniform(8, height / 2, k)
    x1, y1 = rng.uniform(0, width - bw), rng.uniform(0, height - bh)
    boxes = np.stack([x1, y1, x1 + bw, y1 + bh], axis=1)
    return boxes.astype(np.float32), rng.integers(0, 80, k).astype(np.int64)


def write_images(folder: str, n: int, seed: int = 0) -> List[ImageFile]:
    """Write ``n`` JPEG files (quality QUALITY, sizes SIZES alternating) into ``folder``.

    Args:
        folder: An existing directory.
        n: Number of files.
        seed: Seed of the content and the boxes.

    Returns:
        The files, in order.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    files = []
    for i in range(n):
        width, height = SIZES[i % len(SIZES)]
        name = f"{i:03d}.jpg"
        Image.fromarray(_content(rng, width, height)).save(osp.join(folder, name), quality=QUALITY)
        files.append(ImageFile(name, width, height, *_boxes(rng, width, height)))
    return files


def mmpar_input(f: ImageFile, folder: str, flip: bool) -> dict:
    """What mmpar's detection datasets hand their pipeline, with the flip decided."""
    return dict(
        img_info=dict(filename=f.name, height=f.height, width=f.width),
        ann_info=dict(bboxes=f.bboxes, labels=f.labels),
        img_prefix=folder,
        flip=flip,
        flip_direction="horizontal" if flip else None,
    )


def mmdet_input(f: ImageFile, folder: str, flip: bool) -> dict:
    """What mmdet 2.x's ``CustomDataset.pre_pipeline`` builds, with the flip decided.

    mmdet's RandomFlip draws only when ``flip`` is absent and then reads
    ``flip_direction``: both are set.
    """
    return dict(
        mmpar_input(f, folder, flip),
        seg_prefix=None,
        proposal_file=None,
        bbox_fields=[],
        mask_fields=[],
        seg_fields=[],
    )


class Mmdet(NamedTuple):
    """mmdet's side: ``mmdet.datasets.pipelines`` and mmcv's own ``collate``."""

    pipelines: ModuleType
    collate: Callable


def import_mmdet() -> Union[Mmdet, str]:
    """mmdet's side, or why there is none (``"mmdet not installed"``, an import error).

    ``mmdet.datasets`` imports ``mmcv.ops``; where mmcv's compiled ops do not load
    (pure-python mmcv), mmpar's serve them (the data pipeline uses none). Nothing
    else is patched: ``mmcv.parallel`` stays mmcv's, and that is checked.
    """
    if importlib.util.find_spec("mmdet") is None or importlib.util.find_spec("mmcv") is None:
        return "mmdet not installed"
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # mmcv 1.x announces its 2.0 rename on import
            from mmcv.parallel import collate

            if compiled_ops_error() is not None:
                supply_mmcv_ops("auto")
            import mmdet.datasets.pipelines as pipelines
    except ImportError as err:
        return f"mmdet not importable ({type(err).__name__}: {err})"
    if not collate.__module__.startswith("mmcv."):
        return f"mmcv.parallel is patched (collate from {collate.__module__})"
    return Mmdet(pipelines, collate)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch, OpenCV and OMP/MKL on one thread; the previous settings restored after."""
    cv2 = importlib.import_module("cv2") if importlib.util.find_spec("cv2") else None
    saved_env = {k: os.environ.get(k) for k in _THREAD_VARS}
    saved = torch.get_num_threads(), cv2.getNumThreads() if cv2 else None
    os.environ.update({k: "1" for k in _THREAD_VARS})
    torch.set_num_threads(1)
    if cv2:
        cv2.setNumThreads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved[0])
        if cv2:
            cv2.setNumThreads(saved[1])
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def versions(with_mmdet: bool) -> str:
    """The versions of the libraries measured, for the section's text."""
    import PIL

    names = ["mmdet", "mmcv", "cv2"] if with_mmdet else ["cv2"]
    found = [(n, sys.modules.get(n)) for n in names]
    parts = [f"{n} {getattr(m, '__version__', '?')}" for n, m in found if m is not None]
    return ", ".join(parts + [f"Pillow {PIL.__version__}", f"torch {torch.__version__}"])


class PipelineDataset(Dataset):
    """Map-style dataset: sample ``i`` is ``pipeline(fresh copy of inputs[i % len(inputs)])``.

    Args:
        pipeline: A composed pipeline.
        inputs: One input dict per file (copied per call: pipelines mutate them).
        length: Samples per epoch (cycles over the files).
    """

    def __init__(self, pipeline: Callable[[dict], dict], inputs: List[dict], length: int) -> None:
        self.pipeline = pipeline
        self.inputs = inputs
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        return self.pipeline(copy.deepcopy(self.inputs[i % len(self.inputs)]))


def orientation_batches(inputs: List[dict], batch: int, length: int) -> List[dict]:
    """``length`` input dicts, each run of ``batch`` of one orientation (landscape, then
    portrait, ...), cycling over the files of that orientation: the batches mmdet's
    ``GroupSampler`` (and mmpar's ``build_dataloader``) make, padded to their own shape.
    """
    landscape = [x for x in inputs if x["img_info"]["width"] >= x["img_info"]["height"]]
    portrait = [x for x in inputs if x["img_info"]["width"] < x["img_info"]["height"]]
    groups = [g for g in (landscape, portrait) if g]
    return [
        groups[(i // batch) % len(groups)][i % batch % len(groups[(i // batch) % len(groups)])]
        for i in range(length)
    ]
