"""Detection datasets whose samples end in DataContainers.

Importing this package registers them in :data:`mmpar.registry.DATASETS`
(and the transforms in ``TRANSFORMS``).
"""

from mmpar.data import transforms as _transforms  # noqa: F401  (registers the pipeline steps)
from mmpar.data.datasets.base import DetectionDataset
from mmpar.data.datasets.coco import CocoDetection
from mmpar.data.datasets.synthetic import SyntheticShapes

__all__ = ["DetectionDataset", "SyntheticShapes", "CocoDetection"]
