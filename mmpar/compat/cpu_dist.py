"""Training on the CPU, one process or several (gloo), for mmcv 1.x codebases' scripts.

Three places in those codebases assume CUDA:

- mmcv's ``init_dist('pytorch', backend)`` calls ``torch.cuda.set_device(rank %
  torch.cuda.device_count())``: a division by zero without a GPU.
- mmdet's and mmseg's ``build_ddp(model, device, device_ids=[LOCAL_RANK], ...)``
  accept ``device`` cuda/mlu/npu only (``cfg.device`` is ``"cpu"`` without a
  GPU), and torch's DDP refuses ``device_ids`` for a CPU module.
- Training functions that wrap the model themselves, as mmdet did before
  ``build_dp``: ``MMDataParallel(model.cuda(cfg.gpu_ids[0]), ...)`` and
  ``MMDistributedDataParallel(model.cuda(), device_ids=[torch.cuda.current_device()],
  ...)`` (mmrotate 0.x's and mmdet3d 1.0's ``train_detector``, and the
  ``custom_train_detector`` of BEVFormer's plugin and of VAD and UniAD, which keep its
  layout: :data:`CUDA_TRAIN_FUNCTIONS`).
- mmrotate 0.x's ``RotatedAnchorHead.get_anchors`` calls mmdet 2.x's
  ``grid_priors(featmap_sizes, dtype=torch.float32, device='cuda')`` as
  ``grid_priors(featmap_sizes, device)``: the device lands in ``dtype`` and the
  anchors on ``'cuda'``, wherever the features are (:data:`DEVICE_AS_DTYPE`).

:func:`enable_cpu_dist` (called by ``patch_mmcv()``) mends them when, and only
when, the process has no CUDA, MLU or NPU device: the process group is then
joined by :func:`mmpar.dist.init_dist` (the backend from the config, e.g.
``dist_params = dict(backend='gloo')``); ``build_ddp(model, 'cpu', ...)``
wraps the model in ``mmcv.parallel.MMDistributedDataParallel`` (mmpar's)
without ``device_ids``; during a call of a training function of
:data:`CUDA_TRAIN_FUNCTIONS`, ``model.cuda(...)`` leaves the model on the CPU,
``torch.cuda.current_device()`` (as that function's module sees it) is 0, and
the module's ``MMDistributedDataParallel`` drops ``device_ids`` (mmpar's
``MMDataParallel`` already runs ``device_ids=[0]`` on the CPU). On a machine
with GPUs nothing of this changes. The anchor generators of
:data:`DEVICE_AS_DTYPE` take a device passed in ``dtype``'s place as the device,
everywhere (on a GPU the anchors landed on the right device by chance).
"""

from __future__ import annotations

import functools
import warnings
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Callable, Iterator

from mmpar.compat.cuda_as_cpu import has_accelerator
from mmpar.compat.import_hook import on_import

__all__ = ["BUILD_DDP_MODULES", "CUDA_TRAIN_FUNCTIONS", "DEVICE_AS_DTYPE", "enable_cpu_dist"]

#: Modules holding a ``build_ddp`` that refuses ``device='cpu'``.
BUILD_DDP_MODULES = ("mmdet.utils.util_distribution", "mmseg.utils.util_distribution")
#: Training functions, as (module, function) pairs, that call ``model.cuda()`` and
#: ``torch.cuda.current_device()`` themselves; their first argument is the model.
CUDA_TRAIN_FUNCTIONS = (
    ("mmrotate.apis.train", "train_detector"),
    ("mmdet3d.apis.train", "train_detector"),
    # BEVFormer's plugin layout, which the camera-only driving stacks built on it keep
    ("projects.mmdet3d_plugin.bevformer.apis.mmdet_train", "custom_train_detector"),
    ("projects.mmdet3d_plugin.VAD.apis.mmdet_train", "custom_train_detector"),
    ("projects.mmdet3d_plugin.uniad.apis.mmdet_train", "custom_train_detector"),
)
#: Anchor generators, as (module, class) pairs, whose ``grid_priors`` is called with
#: the device where its ``dtype`` goes.
DEVICE_AS_DTYPE = (("mmrotate.core.anchor.anchor_generator", "RotatedAnchorGenerator"),)


@functools.lru_cache(maxsize=None)  # hooked once, however often patch_mmcv() runs
def enable_cpu_dist() -> None:
    """Mend, for CPU-only processes, what the module docstring lists, on import of each module.

    mmcv's ``init_dist``, mmdet's/mmseg's ``build_ddp``, the training functions of
    :data:`CUDA_TRAIN_FUNCTIONS` and the anchor generators of :data:`DEVICE_AS_DTYPE`
    (the last on any machine). A config's ``dist_params.backend='nccl'`` (mmdet's
    default runtime) becomes gloo there, with a warning: nccl needs a GPU.
    """
    on_import("mmcv.runner.dist_utils", _mend_init_dist)
    for name in BUILD_DDP_MODULES:
        on_import(name, _mend_build_ddp)
    for name, function in CUDA_TRAIN_FUNCTIONS:
        on_import(name, functools.partial(_mend_cuda_train, function=function))
    for name, cls in DEVICE_AS_DTYPE:
        on_import(name, functools.partial(_mend_grid_priors, cls=cls))


def _no_accelerator() -> bool:
    return not has_accelerator()


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
        return _cpu_ddp(model, *args, **kwargs)

    build_ddp.__mmpar_cpu__ = True  # type: ignore[attr-defined]
    module.build_ddp = build_ddp


def _cpu_ddp(model: Any, *args: Any, **kwargs: Any) -> Any:
    """``mmcv.parallel.MMDistributedDataParallel`` (mmpar's) for a CPU module."""
    from mmcv.parallel import MMDistributedDataParallel

    kwargs.pop("device_ids", None)  # torch's DDP takes none for a CPU module
    kwargs.pop("output_device", None)
    return MMDistributedDataParallel(model, *args, **kwargs)


def _mend_cuda_train(module: ModuleType, function: str) -> None:
    original: Callable[..., Any] = getattr(module, function)
    if getattr(original, "__mmpar_cpu__", False):
        return

    @functools.wraps(original)
    def train(model: Any, *args: Any, **kwargs: Any) -> Any:
        if not _no_accelerator():
            return original(model, *args, **kwargs)
        with _cuda_calls_on_cpu(module, model):
            return original(model, *args, **kwargs)

    train.__mmpar_cpu__ = True  # type: ignore[attr-defined]
    setattr(module, function, train)


class _CudaOnCpu:
    """``torch.cuda`` for code that asks which GPU it is on, in a process that has none."""

    @staticmethod
    def current_device() -> int:
        return 0

    def __getattr__(self, name: str) -> Any:
        import torch

        return getattr(torch.cuda, name)


class _TorchOnCpu:
    """``torch``, but with :class:`_CudaOnCpu` as ``torch.cuda``."""

    cuda = _CudaOnCpu()

    def __getattr__(self, name: str) -> Any:
        import torch

        return getattr(torch, name)


def _stay(model: Any) -> Callable[..., Any]:
    def cuda(device: Any = None) -> Any:
        return model

    return cuda


@contextmanager
def _cuda_calls_on_cpu(module: ModuleType, model: Any) -> Iterator[None]:
    """While a training function of ``module`` runs: its CUDA calls keep ``model`` on the CPU.

    ``model.cuda`` is an instance attribute returning the model unmoved, and the
    module's ``torch`` and ``MMDistributedDataParallel`` are :class:`_TorchOnCpu`
    and :func:`_cpu_ddp`; all three are put back afterwards.
    """
    names = {"torch": _TorchOnCpu(), "MMDistributedDataParallel": _cpu_ddp}
    saved = {name: vars(module)[name] for name in names if name in vars(module)}
    vars(module).update(names)
    model.cuda = _stay(model)
    try:
        yield
    finally:
        for name in names:
            if name in saved:
                setattr(module, name, saved[name])
            else:
                delattr(module, name)
        del model.cuda


def _mend_grid_priors(module: ModuleType, cls: str) -> None:
    generator = getattr(module, cls)
    original: Callable[..., Any] = generator.grid_priors
    if getattr(original, "__mmpar_cpu__", False):
        return

    @functools.wraps(original)
    def grid_priors(self: Any, featmap_sizes: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        if args and isinstance(args[0], (str, torch.device)):
            kwargs["device"], args = args[0], args[1:]
        return original(self, featmap_sizes, *args, **kwargs)

    grid_priors.__mmpar_cpu__ = True  # type: ignore[attr-defined]
    generator.grid_priors = grid_priors
