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

from types import ModuleType
from typing import Any, Callable

from mmpar.compat.import_hook import on_import

__all__ = ["enable_cpu_dist"]

#: Modules holding a ``build_ddp`` that refuses ``device='cpu'``.
BUILD_DDP_MODULES = ("mmdet.utils.util_distribution", "mmseg.utils.util_distribution")


def enable_cpu_dist() -> None:
    """Mend mmcv's ``init_dist`` and mmdet's/mmseg's ``build_ddp`` for CPU-only processes."""
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

    def _init_dist_pytorch(backend: str, **kwargs: Any) -> None:
        if not _no_accelerator():
            return original(backend, **kwargs)
        from mmpar.dist import init_dist

        init_dist("pytorch", backend=backend, **kwargs)

    _init_dist_pytorch.__mmpar_cpu__ = True  # type: ignore[attr-defined]
    module._init_dist_pytorch = _init_dist_pytorch


def _mend_build_ddp(module: ModuleType) -> None:
    original: Callable[..., Any] = module.build_ddp
    if getattr(original, "__mmpar_cpu__", False):
        return

    def build_ddp(model: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> Any:
        if device != "cpu" or not _no_accelerator():
            return original(model, device, *args, **kwargs)
        from mmcv.parallel import MMDistributedDataParallel

        kwargs.pop("device_ids", None)  # torch's DDP takes none for a CPU module
        return MMDistributedDataParallel(model, *args, **kwargs)

    build_ddp.__doc__ = original.__doc__
    build_ddp.__mmpar_cpu__ = True  # type: ignore[attr-defined]
    module.build_ddp = build_ddp
