"""The geometric steps, kept importable from here: they live in
:mod:`mmpar.data.transforms.resize`, :mod:`~mmpar.data.transforms.flip` and
:mod:`~mmpar.data.transforms.pad`."""

from mmpar.data.transforms.flip import RandomFlip, flip_boxes
from mmpar.data.transforms.pad import Pad
from mmpar.data.transforms.resize import Resize, rescale_size, resize_image, resize_seg

__all__ = [
    "Resize",
    "RandomFlip",
    "Pad",
    "rescale_size",
    "resize_image",
    "resize_seg",
    "flip_boxes",
]
