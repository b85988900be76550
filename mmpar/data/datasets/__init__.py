"""Detection datasets whose samples end in DataContainers.

Importing this package registers them in :data:`mmpar.data.registry.DATASETS`
(and the transforms in ``TRANSFORMS``).
"""
from .. import transforms as _transforms  # noqa: F401  (registers the pipeline steps)
from .base import DetectionDataset
from .coco import CocoDetection
from .synthetic import SyntheticShapes

__all__ = ["DetectionDataset", "SyntheticShapes", "CocoDetection"]
