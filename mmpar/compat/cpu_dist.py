"""Distributed training on the CPU for mmcv 1.x / mmdet 2.x / mmseg 0.x scripts (gloo).

Two places in those codebases assume CUDA when launched with ``--launcher pytorch``:

- mmcv's ``init_dist('pytorch', backend)`` calls ``torch.cuda.set_device(rank %
  torch.cuda.device_count())``: a division by zero without a GPU.
- mmdet's and mmseg's ``build_ddp(model, device, device_ids=[LOCAL_RANK], ...)``
  accept ``device`` cuda/mlu/npu only (``cfg.device`` is ``"cpu"`` without a
  GPU), and torch's DDP refuses ``device_ids`` for a CPU module.

:func:`enable_cpu_dist` (called by ``patch_mmcv()``) mends both when, and only
when, the process has no CUDA, MLU or NPU device: the process group is then
joined by :func:`mmpar.dist.init_dist` (the backend from the config, e.g.
``dist_params = dict(backend='gloo')``), and ``build_ddp(model, 'cpu', ...)``
wraps the model in ``mmcv.parallel.MMDistributedDataParallel`` (mmpar's)
without ``device_ids``. On a machine with GPUs nothing changes.
"""

from __future__ import annotations

import functools
import warnings
from types import ModuleType
from typing import Any, Callable

from mmpar.compat.import_hook import on_import

__all__ = ["enable_cpu_dist"]

#: Modules holding a ``build_ddp`` that refuses ``device='cpu'``.
BUILD_DDP_MODULES = ("mmdet.utils.util_distribution", "mmseg.utils.util_distribution")


_hooked = []


def enable_cpu_dist() -> None:
    """Mend mmcv's ``init_dist`` and mmdet's/mmseg's ``build_ddp`` for CPU-only processes.

    A config's ``dist_params.backend='nccl'`` (mmdet's default runtime) becomes gloo
    there, with a warning: nccl needs a GPU.
    """
    if _hooked:
        return
    _hooked.append(True)
    on_import("mmcv.runner.dist_utils", _mend_init_dist)
    for name in BUILD_DDP_MODULES:
        on_import(name, _mend_build_ddp)


def _no_accelerator() -> bool:
    import torch

    npu = getattr(torch, "npu", None)
    return not (
        torch.cuda.is_available()
        or getattr(torch, "is_mlu_available", lambda: False)()
        or (npu is not None and npu.is_available())
    )


def _mend_init_dist(module: ModuleType) -> None:
    original = module._init_dist_pytorch
    if getattr(original, "__mmpar_cpu__", False):
        return

    @functools.wraps(original)
    def _init_dist_pytorch(backend: str, **kwargs: Any) -> None:
        if not _no_accelerator():
            return original(backend, **kwargs)
        from mmpar.dist import init_dist

        if backend == "nccl":  # mmdet's default_runtime.py says nccl
            warnings.warn(
                "mmpar: dist_params.backend='nccl' needs a GPU and this process has none: "
                "using gloo (set dist_params.backend='gloo' to silence this)",
                RuntimeWarning,
                stacklevel=2,
            )
            backend = "gloo"
        init_dist("pytorch", backend=backend, **kwargs)

    _init_dist_pytorch.__mmpar_cpu__ = True  # type: ignore[attr-defined]
    module._init_dist_pytorch = _init_dist_pytorch


def _mend_build_ddp(module: ModuleType) -> None:
    original: Callable[..., Any] = module.build_ddp
    if getattr(original, "__mmpar_cpu__", False):
        return

    @functools.wraps(original)
    def build_ddp(model: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> Any:
        if device != "cpu" or not _no_accelerator():
            return original(model, device, *args, **kwargs)
        from mmcv.parallel import MMDistributedDataParallel

        kwargs.pop("device_ids", None)  # torch's DDP takes none for a CPU module
        return MMDistributedDataParallel(model, *args, **kwargs)

    build_ddp.__mmpar_cpu__ = True  # type: ignore[attr-defined]
    module.build_ddp = build_ddp
