"""Build models and optimizers from configs, with :data:`mmpar.registry.MODELS` and
:data:`mmpar.registry.OPTIMIZERS`."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch
from torch import nn

from mmpar.registry import MODELS, OPTIMIZERS, check_build_cfg

__all__ = ["build_model", "build_optimizer"]


def build_model(cfg: Mapping[str, Any]) -> nn.Module:
    """Build a model from ``cfg`` (``type`` names a class of :data:`MODELS`).

    Importing :mod:`mmpar.models` registers the built-in models.

    Raises:
        TypeError: ``cfg`` is not a dict, or the built object is not an ``nn.Module``.
        KeyError: ``cfg`` has no ``type`` or names an unregistered model.
    """
    model = MODELS.build(check_build_cfg(cfg, "model"))
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model: {cfg['type']!r} built a {type(model).__name__}, expected an nn.Module"
        )
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
        raise ValueError(
            f"build_optimizer: {type(model).__name__} has no parameter with requires_grad=True"
        )
    return OPTIMIZERS.build(check_build_cfg(cfg, "optimizer"), params=params)
