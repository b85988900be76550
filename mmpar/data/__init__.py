"""Detection data: samplers that pad less, datasets that emit DataContainers,
transforms, and the loader that ties them to :func:`mmpar.collate`.

Nothing here imports the model wrappers.
"""

from mmpar.data.batch_sampler_loader import BatchSamplerLoader
from mmpar.data.builder import build_dataloader, build_dataset
from mmpar.data.datasets import CocoDetection, DetectionDataset, SyntheticShapes
from mmpar.data.padding_stats import (
    PaddingStats,
    loader_padding_ratio,
    padding_counts,
    padding_ratio,
)
from mmpar.data.samplers import (
    DistributedGroupSampler,
    DistributedSampler,
    GroupSampler,
    InfiniteBatchSampler,
    InfiniteGroupBatchSampler,
)
from mmpar.data.transforms import (
    Collect,
    Compose,
    DefaultFormatBundle,
    LoadAnnotations,
    LoadImageFromArray,
    LoadImageFromFile,
    Normalize,
    Pad,
    RandomFlip,
    Resize,
)
from mmpar.data.worker_seeds import seed_worker, set_loader_epoch

__all__ = [
    "BatchSamplerLoader",
    "CocoDetection",
    "Collect",
    "Compose",
    "DefaultFormatBundle",
    "DetectionDataset",
    "DistributedGroupSampler",
    "DistributedSampler",
    "GroupSampler",
    "InfiniteBatchSampler",
    "InfiniteGroupBatchSampler",
    "LoadAnnotations",
    "LoadImageFromArray",
    "LoadImageFromFile",
    "Normalize",
    "Pad",
    "PaddingStats",
    "RandomFlip",
    "Resize",
    "SyntheticShapes",
    "build_dataloader",
    "build_dataset",
    "loader_padding_ratio",
    "padding_counts",
    "padding_ratio",
    "seed_worker",
    "set_loader_epoch",
]
