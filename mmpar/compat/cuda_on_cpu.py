"""Code paths that only CUDA can take, met on a CPU-only process: plugins' ``.cuda()`` and fp16.

DETR3D's ``GridMask`` (``projects/mmdet3d_plugin/models/utils/grid_mask.py``, kept at
that path by PETR, BEVFormer, UniAD and VAD) draws its mask with numpy and moves it
to the GPU with ``torch.from_numpy(mask)....cuda()`` in ``forward``, wherever the
images are: on a process without a GPU the first training step stops there ("Found no
NVIDIA driver", or "Torch not compiled with CUDA enabled").

:func:`mend_cuda_on_cpu` (called by ``patch_mmcv()``) wraps each method of
:data:`CUDA_TENSOR_METHODS` on import of its module. When, and only when, the process
has no CUDA, MLU or NPU device, ``torch.Tensor.cuda`` returns the tensor unmoved for
the duration of such a call (the CPU is then the only device the images can be on),
and is put back afterwards. Elsewhere, and on a machine with a GPU, ``.cuda()``
behaves as it always does.

mmcv 1.x's fp16 training (``optimizer_config = dict(type='Fp16OptimizerHook', ...)``,
PETR's configs; or ``fp16 = dict(...)``) calls ``wrap_fp16_model``, which turns on
every ``fp16_enabled`` flag: ``@auto_fp16`` then casts the inputs to half and runs the
method under ``torch.cuda.amp.autocast``, which torch disables without a GPU, so the
first convolution meets half inputs and float weights. In a process without a GPU
``wrap_fp16_model`` leaves the flags off, with a warning: the model trains and tests
in fp32, as torch's own ``autocast`` and ``GradScaler`` (which the hook uses, and which
torch disables too) fall back to. With a GPU it does what mmcv's does.
"""

from __future__ import annotations

import functools
import threading
import warnings
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Callable, Iterator

from mmpar.compat.cuda_as_cpu import has_accelerator
from mmpar.compat.import_hook import on_import

__all__ = [
    "CUDA_TENSOR_METHODS",
    "FP16_MODULES",
    "mend_cuda_on_cpu",
    "no_accelerator",
    "tensor_cuda_stays",
]

#: Methods, as (module, class, method) triples, that call ``.cuda()`` on tensors they make.
CUDA_TENSOR_METHODS = (("projects.mmdet3d_plugin.models.utils.grid_mask", "GridMask", "forward"),)

#: mmcv's module defining ``wrap_fp16_model``, then those that bind it by name.
FP16_MODULES = ("mmcv.runner.fp16_utils", "mmcv.runner.hooks.optimizer", "mmcv.runner")

_lock = threading.Lock()
_depth = [0]
_saved: list = []


@functools.lru_cache(maxsize=None)  # hooked once, however often patch_mmcv() runs
def mend_cuda_on_cpu() -> None:
    """Wrap the methods of :data:`CUDA_TENSOR_METHODS` and mmcv's ``wrap_fp16_model``.

    Each on import of its module (:data:`FP16_MODULES` for the latter).
    """
    for name, cls, method in CUDA_TENSOR_METHODS:
        on_import(name, functools.partial(_mend_method, cls=cls, method=method))
    for name in FP16_MODULES:
        on_import(name, _mend_wrap_fp16)


def no_accelerator() -> bool:
    """Whether this process has no CUDA, MLU or NPU device."""
    return not has_accelerator()


def _stay(tensor: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    return tensor


@contextmanager
def tensor_cuda_stays() -> Iterator[None]:
    """Within it, ``tensor.cuda(...)`` returns ``tensor`` unmoved; re-entrant.

    Meant for CPU-only processes, where ``.cuda()`` could only have raised: the
    attribute of ``torch.Tensor`` is swapped for the outermost call's duration.
    """
    import torch

    with _lock:
        if _depth[0] == 0:
            _saved.append(torch.Tensor.cuda)
            torch.Tensor.cuda = _stay  # type: ignore[method-assign]
        _depth[0] += 1
    try:
        yield
    finally:
        with _lock:
            _depth[0] -= 1
            if _depth[0] == 0:
                torch.Tensor.cuda = _saved.pop()  # type: ignore[method-assign]


def _mend_method(module: ModuleType, cls: str, method: str) -> None:
    owner = getattr(module, cls)
    original: Callable[..., Any] = getattr(owner, method)
    if getattr(original, "__mmpar_cpu__", False):
        return

    @functools.wraps(original)
    def mended(*args: Any, **kwargs: Any) -> Any:
        if not no_accelerator():
            return original(*args, **kwargs)
        with tensor_cuda_stays():
            return original(*args, **kwargs)

    mended.__mmpar_cpu__ = True  # type: ignore[attr-defined]
    setattr(owner, method, mended)


def _mend_wrap_fp16(module: ModuleType) -> None:
    original = getattr(module, "wrap_fp16_model", None)
    if original is None or getattr(original, "__mmpar_cpu__", False):
        return
    if getattr(original, "__module__", None) != FP16_MODULES[0]:
        return  # not mmcv's

    @functools.wraps(original)
    def wrap_fp16_model(model: Any) -> None:
        if not no_accelerator():
            return original(model)
        warnings.warn(
            "mmpar: fp16 needs CUDA's autocast and this process has no GPU: "
            "wrap_fp16_model leaves the model in fp32",
            RuntimeWarning,
            stacklevel=2,
        )
        return None

    wrap_fp16_model.__mmpar_cpu__ = True  # type: ignore[attr-defined]
    module.wrap_fp16_model = wrap_fp16_model
