"""Registries of models and optimizers, and the functions that build them from configs."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch
from torch import nn

from mmpar.registry import Registry

__all__ = ["MODELS", "OPTIMIZERS", "build_model", "build_optimizer", "build_dataset"]

#: Models, e.g. ``MODELS.build(dict(type="TinyDet", num_classes=3))``.
MODELS = Registry("model")

#: Optimizers; ``torch.optim``'s SGD, Adam and AdamW are registered.
OPTIMIZERS = Registry("optimizer")
for _cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
    OPTIMIZERS.register_module(module=_cls)


def _check_cfg(cfg: Any, argument: str) -> Mapping[str, Any]:
    if not isinstance(cfg, Mapping):
        raise TypeError(f"{argument}: expected a dict with a 'type' key, got {type(cfg).__name__} {cfg!r}")
    if "type" not in cfg:
        raise KeyError(f"{argument}: expected a dict with a 'type' key, got keys {sorted(map(str, cfg))}")
    return cfg


def build_model(cfg: Mapping[str, Any]) -> nn.Module:
    """Build a model from ``cfg`` (``type`` names a class of :data:`MODELS`).

    Importing :mod:`mmpar.models` registers the built-in models.

    Raises:
        TypeError: ``cfg`` is not a dict, or the built object is not an ``nn.Module``.
        KeyError: ``cfg`` has no ``type`` or names an unregistered model.
    """
    model = MODELS.build(_check_cfg(cfg, "model"))
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: {cfg['type']!r} built a {type(model).__name__}, expected an nn.Module")
    return model


def build_optimizer(model: nn.Module, cfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    """Build an optimizer over the trainable parameters of ``model``.

    Args:
        model: The model, or a wrapper (``MMDataParallel``...): its ``.module``
            parameters are the same tensors.
        cfg: e.g. ``dict(type="AdamW", lr=1e-3, weight_decay=1e-4)``; every key
            but ``type`` goes to the optimizer's constructor.

    Returns:
        The optimizer, with one parameter group.

    Raises:
        TypeError: ``model`` is not an ``nn.Module`` or ``cfg`` is not a dict.
        KeyError: ``cfg`` has no ``type`` or names an unregistered optimizer.
        ValueError: the model has no trainable parameter.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"build_optimizer: model must be an nn.Module, got {type(model).__name__}")
    params: Iterable[nn.Parameter] = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"build_optimizer: {type(model).__name__} has no parameter with requires_grad=True")
    return OPTIMIZERS.build(_check_cfg(cfg, "optimizer"), params=params)


def build_dataset(cfg: Mapping[str, Any], **default_args: Any) -> Any:
    """Build a dataset from ``cfg`` with :data:`mmpar.data.registry.DATASETS`.

    Importing :mod:`mmpar.data.datasets` (done here) registers the built-in
    datasets (``SyntheticShapes``, ``CocoDetection``) and transforms.

    Args:
        cfg: e.g. ``dict(type="SyntheticShapes", num_samples=256)``.
        **default_args: Used where ``cfg`` has no such key (e.g. ``test_mode=True``).

    Raises:
        TypeError: ``cfg`` is not a dict.
        KeyError: ``cfg`` has no ``type`` or names an unregistered dataset.
    """
    import mmpar.data.datasets  # noqa: F401  (registers the datasets and transforms)
    from mmpar.data.registry import DATASETS

    return DATASETS.build(_check_cfg(cfg, "dataset"), **default_args)
