"""Models: builders for models and optimizers, normalization layers and TinyDet."""

from mmpar.models.builder import build_model, build_optimizer
from mmpar.models.norm import build_norm, has_sync_batchnorm, revert_sync_batchnorm
from mmpar.models.tiny_det import TinyDet, parse_losses
from mmpar.registry import MODELS, OPTIMIZERS

__all__ = [
    "MODELS",
    "OPTIMIZERS",
    "TinyDet",
    "build_model",
    "build_norm",
    "build_optimizer",
    "has_sync_batchnorm",
    "parse_losses",
    "revert_sync_batchnorm",
]
