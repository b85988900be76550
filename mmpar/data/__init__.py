"""Detection data: samplers that pad less, datasets that emit DataContainers,
transforms, and the loader that ties them to :func:`mmpar.collate`.

Nothing here imports the model wrappers.
"""
from .batch_sampler_loader import BatchSamplerLoader
from .builder import build_dataloader, seed_worker, set_loader_epoch
from .datasets import CocoDetection, DetectionDataset, SyntheticShapes
from .padding_stats import PaddingStats, loader_padding_ratio, padding_counts, padding_ratio
from .registry import DATASETS, TRANSFORMS
from .samplers import (
    DistributedGroupSampler,
    DistributedSampler,
    GroupSampler,
    InfiniteBatchSampler,
    InfiniteGroupBatchSampler,
)
from .transforms import (
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

__all__ = [
    "BatchSamplerLoader",
    "DATASETS",
    "TRANSFORMS",
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
    "loader_padding_ratio",
    "padding_counts",
    "padding_ratio",
    "seed_worker",
    "set_loader_epoch",
]
