"""The optional config keys that tools/train.py, tools/test.py and the runner read.

``--cfg-options`` accepts a key that the loaded config lacks only when it is listed
here (or is a parameter of the class that its dict builds, see
:func:`registered_type_accepts`). A new optional key read anywhere in the tools
or the runner is one more line in :data:`TOOL_KEYS`. Patterns are dotted keys
in which ``*`` stands for any one part and a last ``**`` for anything below.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Tuple

from mmpar.registry.root import DATASETS, MODELS, OPTIMIZERS, TRANSFORMS

__all__ = ["TOOL_KEYS", "registered_type_accepts"]

TOOL_KEYS: Tuple[str, ...] = (
    # where and how a run goes
    "work_dir",
    "seed",
    "deterministic",
    "resume_from",
    "load_from",
    "find_unused_parameters",
    "log_level",
    "custom_imports",
    "custom_imports.imports",
    "custom_imports.allow_failed_imports",
    "dist_params",
    "dist_params.backend",
    "dist_params.timeout",
    "dist_params.port",
    "dist_params.pg_options",
    # data
    "data.samples_per_gpu",
    "data.workers_per_gpu",
    "data.persistent_workers",
    "data.test_samples_per_gpu",
    # schedule, checkpoints, logs, evaluation
    "runner",
    "runner.max_epochs",
    "runner.type",
    "lr_config",
    "lr_config.policy",
    "lr_config.step",
    "lr_config.gamma",
    "lr_config.min_lr",
    "lr_config.warmup",
    "lr_config.warmup_iters",
    "lr_config.warmup_ratio",
    "auto_scale_lr",
    "auto_scale_lr.base_batch_size",
    "checkpoint_config",
    "checkpoint_config.interval",
    "log_config",
    "log_config.interval",
    "log_config.hooks",
    "evaluation",
    "evaluation.interval",
    "evaluation.before_train",
    "evaluation.metric",
    # optimizer step: clipping, accumulation, loss scaling
    "optimizer_config",
    "optimizer_config.type",
    "optimizer_config.grad_clip",
    "optimizer_config.grad_clip.max_norm",
    "optimizer_config.grad_clip.norm_type",
    "optimizer_config.grad_clip.error_if_nonfinite",
    "optimizer_config.grad_clip.foreach",
    "optimizer_config.cumulative_iters",
    "optimizer_config.loss_scale",
    "optimizer_config.loss_scale.**",
    # mixed precision and compilation
    "amp",
    "amp.dtype",
    "amp.loss_scale",
    "amp.loss_scale.**",
    "fp16",
    "fp16.loss_scale",
    "fp16.loss_scale.**",
    "compile",
    "compile.backend",
    "compile.mode",
    "compile.fullgraph",
    "compile.dynamic",
    "compile.disable",
    "compile.options",
    "compile.options.**",
    "cudnn_benchmark",
    "channels_last",
)

_REGISTRIES = (MODELS, DATASETS, OPTIMIZERS, TRANSFORMS)


def registered_type_accepts(node: Mapping[str, Any], name: str) -> bool:
    """Whether the class that ``node`` builds (its ``type``) takes a parameter ``name``.

    ``node`` is a dict of the config such as ``dict(type="SGD", lr=0.1)``; its ``type``
    is looked up in mmpar's registries (models, datasets, optimizers, transforms).
    A class that takes ``**kwargs`` accepts any name. Unknown or missing types accept none.
    """
    kind = node.get("type")
    target = kind if callable(kind) else None
    if isinstance(kind, str):
        for registry in _REGISTRIES:
            if kind in registry:
                target = registry.get(kind)
                break
    if target is None:
        return False
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return name in params and params[name].kind is not inspect.Parameter.VAR_POSITIONAL
