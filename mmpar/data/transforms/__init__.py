"""Detection data pipeline steps that end in DataContainers (mmdet 2.x style).

Importing this package registers every step in
:data:`mmpar.registry.TRANSFORMS`. Every step declares the size of the image it
outputs (``output_size(height, width)``; see :mod:`mmpar.data.transforms.compose`).
"""

from mmpar.data.transforms.compose import Compose, KeepsSize, step_output_size
from mmpar.data.transforms.flip import RandomFlip
from mmpar.data.transforms.formatting import (
    DEFAULT_META_KEYS,
    Collect,
    DefaultFormatBundle,
    to_tensor,
)
from mmpar.data.transforms.loading import LoadAnnotations, LoadImageFromArray, LoadImageFromFile
from mmpar.data.transforms.pad import Pad
from mmpar.data.transforms.photometric import Normalize
from mmpar.data.transforms.resize import Resize, rescale_size

__all__ = [
    "Compose",
    "KeepsSize",
    "step_output_size",
    "LoadImageFromFile",
    "LoadImageFromArray",
    "LoadAnnotations",
    "Resize",
    "RandomFlip",
    "Pad",
    "Normalize",
    "DefaultFormatBundle",
    "Collect",
    "to_tensor",
    "rescale_size",
    "DEFAULT_META_KEYS",
]
