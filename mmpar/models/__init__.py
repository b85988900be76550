"""Models: the MODELS/OPTIMIZERS registries, their builders and TinyDet."""
from .builder import MODELS, OPTIMIZERS, build_dataset, build_model, build_optimizer
from .norm import build_norm, has_sync_batchnorm, revert_sync_batchnorm
from .tiny_det import TinyDet, parse_losses

__all__ = [
    "MODELS",
    "OPTIMIZERS",
    "TinyDet",
    "build_dataset",
    "build_model",
    "build_norm",
    "build_optimizer",
    "has_sync_batchnorm",
    "parse_losses",
    "revert_sync_batchnorm",
]
