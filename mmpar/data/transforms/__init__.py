"""Detection data pipeline steps that end in DataContainers (mmdet 2.x style).

Importing this package registers every step in
:data:`mmpar.registry.TRANSFORMS`.
"""

from mmpar.data.transforms.compose import Compose
from mmpar.data.transforms.formatting import (
    DEFAULT_META_KEYS,
    Collect,
    DefaultFormatBundle,
    to_tensor,
)
from mmpar.data.transforms.geometric import Pad, RandomFlip, Resize
from mmpar.data.transforms.loading import LoadAnnotations, LoadImageFromArray, LoadImageFromFile
from mmpar.data.transforms.photometric import Normalize

__all__ = [
    "Compose",
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
    "DEFAULT_META_KEYS",
]
