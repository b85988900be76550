"""Normalization layers from configs, and SyncBN -> BatchNorm for runs without a process group."""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional

from torch import nn

from mmpar.dist import is_distributed

__all__ = ["build_norm", "revert_sync_batchnorm", "has_sync_batchnorm"]

_NORMS = {"BN": nn.BatchNorm2d, "SyncBN": nn.SyncBatchNorm, "GN": nn.GroupNorm}


def build_norm(cfg: Optional[Mapping[str, Any]], channels: int) -> nn.Module:
    """A normalization layer over ``channels`` channels of ``(N, C, H, W)`` maps.

    Args:
        cfg: ``dict(type="BN")``, ``dict(type="SyncBN")``,
            ``dict(type="GN", num_groups=8)`` or None (identity).
        channels: Number of channels.

    Raises:
        TypeError: ``cfg`` is not a dict or None.
        ValueError: an unknown ``type``.
    """
    if cfg is None:
        return nn.Identity()
    if not isinstance(cfg, Mapping):
        raise TypeError(
            f"norm_cfg: expected a dict such as dict(type='BN') or None, got {type(cfg).__name__}"
        )
    kwargs = dict(cfg)
    kind = kwargs.pop("type", None)
    if kind not in _NORMS:
        raise ValueError(f"norm_cfg.type: expected one of {sorted(_NORMS)}, got {kind!r}")
    if kind == "GN":
        return nn.GroupNorm(num_channels=channels, **kwargs)
    return _NORMS[kind](channels, **kwargs)


def has_sync_batchnorm(module: nn.Module) -> bool:
    """Whether any submodule of ``module`` is a ``SyncBatchNorm``."""
    return any(isinstance(m, nn.SyncBatchNorm) for m in module.modules())


def revert_sync_batchnorm(module: nn.Module, reason: str = "") -> nn.Module:
    """Replace every ``SyncBatchNorm`` of ``module`` by an equivalent ``BatchNorm2d``.

    ``SyncBatchNorm`` needs a process group (and CUDA); in a single-process or
    CPU run it fails deep inside its forward. Parameters, running statistics and
    the train/eval mode are carried over, so a checkpoint still loads. A
    ``UserWarning`` says that the conversion happened and why.

    Args:
        module: The model (modified in place where possible).
        reason: Why, appended to the warning (e.g. "no process group").

    Returns:
        The model; a new object only when ``module`` itself is a SyncBatchNorm.
    """
    if not has_sync_batchnorm(module):
        return module
    why = reason or ("no process group" if not is_distributed() else "CPU run")
    warnings.warn(
        f"SyncBatchNorm layers converted to BatchNorm2d ({why}); statistics are per process",
        UserWarning,
        stacklevel=2,
    )
    return _convert(module)


def _convert(module: nn.Module) -> nn.Module:
    if isinstance(module, nn.SyncBatchNorm):
        bn = nn.BatchNorm2d(
            module.num_features,
            module.eps,
            module.momentum,
            module.affine,
            module.track_running_stats,
        )
        bn.load_state_dict(module.state_dict())
        bn.train(module.training)
        return bn
    for name, child in module.named_children():
        new = _convert(child)
        if new is not child:
            setattr(module, name, new)
    return module
