"""Registries: map names in configs to classes, and mmpar's root registries."""

from mmpar.registry.registry import Registry, check_build_cfg
from mmpar.registry.root import DATASETS, MODELS, MODULE_WRAPPERS, OPTIMIZERS, TRANSFORMS

__all__ = [
    "DATASETS",
    "MODELS",
    "MODULE_WRAPPERS",
    "OPTIMIZERS",
    "TRANSFORMS",
    "Registry",
    "check_build_cfg",
]
