"""mmdet 2.x's other speed options: ``cudnn_benchmark`` and ``channels_last``.

Both are off by default:

* ``cudnn_benchmark = True`` lets cuDNN time its convolution algorithms for each
  new input shape and keep the fastest (``torch.backends.cudnn.benchmark``).
  Results may then differ from run to run, so ``--deterministic`` (or
  ``deterministic = True``) wins over it, with a warning.
* ``channels_last = True`` stores the model's 4-D weights and the batch images
  (every 4-D floating tensor passed to the model's ``forward``) as NHWC, which
  tensor cores on today's GPUs run faster, with AMP above all. Checkpoint keys and
  shapes are unchanged: a checkpoint loads in either layout.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Tuple

import torch
from torch import nn

__all__ = ["apply_speed_options", "check_flag", "set_channels_last", "set_cudnn_benchmark"]


def check_flag(cfg: Mapping[str, Any], key: str) -> bool:
    """``cfg[key]`` (default False), checked to be a bool.

    Raises:
        TypeError: anything other than True, False or None.
    """
    value = cfg.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise TypeError(f"{key}: expected True or False, got {type(value).__name__} {value!r}")
    return value


def set_cudnn_benchmark(
    cfg: Mapping[str, Any], deterministic: bool, logger: logging.Logger
) -> bool:
    """Apply the config's ``cudnn_benchmark``; returns whether it is on.

    Call it after :func:`mmpar.runner.rng.set_random_seed`, which turns it off for
    deterministic runs.
    """
    if not check_flag(cfg, "cudnn_benchmark"):
        return False
    if deterministic:
        logger.warning("cudnn_benchmark = True is ignored: deterministic runs need it off")
        return False
    torch.backends.cudnn.benchmark = True
    logger.info("cudnn_benchmark: on (cuDNN picks the fastest algorithm per input shape)")
    return True


def _to_channels_last(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() == 4 and value.is_floating_point():
        return value.contiguous(memory_format=torch.channels_last)
    return value


def _channels_last_inputs(
    module: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]
) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    return (
        tuple(_to_channels_last(a) for a in args),
        {k: _to_channels_last(v) for k, v in kwargs.items()},
    )


def set_channels_last(model: nn.Module) -> nn.Module:
    """Make ``model``'s 4-D weights and 4-D floating inputs channels-last, in place.

    Call it on the unwrapped model, before compiling and wrapping it. The inputs
    are converted by a forward pre-hook, on the device, after the wrapper's scatter.

    Returns:
        ``model``.
    """
    model.to(memory_format=torch.channels_last)
    model.register_forward_pre_hook(_channels_last_inputs, with_kwargs=True)
    return model


def apply_speed_options(
    cfg: Mapping[str, Any], model: nn.Module, deterministic: bool, logger: logging.Logger
) -> None:
    """``cudnn_benchmark`` and ``channels_last`` of a config, on ``model`` (unwrapped).

    Raises:
        TypeError: either key is not a bool.
    """
    set_cudnn_benchmark(cfg, deterministic, logger)
    if check_flag(cfg, "channels_last"):
        set_channels_last(model)
        logger.info("channels_last: model weights and batch images in NHWC memory format")
