"""Registries of the data pipeline: datasets and transforms, built from configs."""
from __future__ import annotations

from ..registry import Registry

__all__ = ["DATASETS", "TRANSFORMS"]

#: Datasets, e.g. ``DATASETS.build(dict(type="SyntheticShapes", num_samples=64))``.
DATASETS = Registry("dataset")

#: Pipeline steps, e.g. ``TRANSFORMS.build(dict(type="Resize", img_scale=(1333, 800)))``.
TRANSFORMS = Registry("transform")
