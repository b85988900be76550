"""The images and image metas every codebase's batch is made of, as the pipelines leave them."""

from __future__ import annotations

from typing import Any, Tuple

#: The normalization the metas name (the images are random normal values already).
IMG_NORM = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)


def image_meta(index: int, shape: Tuple[int, int], pad: Tuple[int, int], scale: float) -> dict:
    """An image's meta as mmdet's Collect gives it (``ori_shape`` = ``img_shape`` / ``scale``)."""
    import numpy as np

    h, w = shape
    ori = (int(round(h / scale)), int(round(w / scale)))
    factor = np.array([w / ori[1], h / ori[0]] * 2, dtype=np.float32)
    return dict(
        filename=f"zoo_{index}.jpg",
        ori_filename=f"zoo_{index}.jpg",
        ori_shape=ori + (3,),
        img_shape=(h, w, 3),
        pad_shape=pad + (3,),
        scale_factor=factor,
        flip=False,
        flip_direction=None,
        img_norm_cfg={k: np.array(v, dtype=np.float32) for k, v in IMG_NORM.items()},
        border=np.array([0, h, 0, w], dtype=np.float32),
    )


def image(rng: Any, shape: Tuple[int, int], pad: Tuple[int, int]) -> Any:
    """A normalized random image (3, *pad), zero in the padding, as Normalize and Pad leave it."""
    import torch

    img = torch.zeros(3, *pad)
    img[:, : shape[0], : shape[1]] = torch.from_numpy(rng.standard_normal((3,) + shape)).float()
    return img
