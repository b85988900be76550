"""Detection data pipeline steps that end in DataContainers (mmdet 2.x style).

Importing this package registers every step in
:data:`mmpar.data.registry.TRANSFORMS`.
"""
from .compose import Compose
from .formatting import DEFAULT_META_KEYS, Collect, DefaultFormatBundle, to_tensor
from .geometric import Pad, RandomFlip, Resize
from .loading import LoadAnnotations, LoadImageFromArray, LoadImageFromFile
from .photometric import Normalize

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
