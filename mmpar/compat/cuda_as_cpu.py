"""GPU-only scripts on a CPU-only process: ``python -m mmpar.compat.run --cuda-on-cpu SCRIPT``.

The research code of the mmdet3d 0.17 era (BEVFormer, UniAD, VAD and the repositories
forked from them) was written for GPUs only: its test scripts call ``model.cuda()`` and
``torch.cuda.current_device()`` in their ``main``, its result collection makes tensors
with ``device='cuda'``, and its modules move what they make with ``.cuda()``. On a
process without a GPU each of those raises ("Found no NVIDIA driver"), so such code
cannot be smoke-tested, or a synthetic install check run, on a CPU machine.

:func:`enable_cuda_as_cpu` makes the CPU stand in for the GPU, process-wide, when and
only when the process has no CUDA, MLU or NPU device:

- ``Module.cuda()`` and ``Tensor.cuda()`` return the module or tensor unmoved;
- a ``device`` argument naming CUDA (``'cuda'``, ``'cuda:1'``, ``torch.device('cuda')``),
  to a factory function or to ``Tensor.to``, means the CPU;
- ``torch.cuda.current_device()`` is 0, ``torch.cuda.set_device`` and
  ``torch.cuda.synchronize`` do nothing;
- ``DistributedDataParallel`` (and ``MMDistributedDataParallel``, built on it) drops
  the ``device_ids`` and ``output_device`` it is given for a module on the CPU, where
  torch accepts none.

``torch.cuda.is_available()`` stays ``False``, so code that chooses its path by it
still takes its CPU path. It is opt-in, because code that catches the CUDA error to fall
back would now take its GPU branch on the CPU. ``$MMPAR_CUDA_ON_CPU=1`` carries the
choice to spawned children. On a machine with a GPU nothing changes.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["ENV", "CudaAsCpuMode", "enable_cuda_as_cpu", "has_accelerator"]

#: Set to ``1`` by ``--cuda-on-cpu``; read by spawned children.
ENV = "MMPAR_CUDA_ON_CPU"

_state: Dict[str, Any] = {}


def has_accelerator() -> bool:
    """Whether this process has a CUDA, MLU or NPU device."""
    npu = getattr(torch, "npu", None)
    return bool(
        torch.cuda.is_available()
        or getattr(torch, "is_mlu_available", lambda: False)()
        or (npu is not None and npu.is_available())
    )


def _is_cuda(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return isinstance(device, str) and device.split(":")[0] == "cuda"


def _on_cpu(value: Any) -> Any:
    return torch.device("cpu") if _is_cuda(value) else value


class CudaAsCpuMode(TorchFunctionMode):
    """A torch function mode that reads a CUDA ``device`` argument as the CPU."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Tuple[type, ...],
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _on_cpu(kwargs["device"])
        if getattr(func, "__name__", "") == "to":  # Tensor.to(device, ...) or .to(other)
            args = tuple(_on_cpu(a) for a in args)
        return func(*args, **kwargs)


def _unmoved(self: Any, *args: Any, **kwargs: Any) -> Any:
    return self


def _ddp_on_cpu(init: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(init)

    def __init__(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        if any(p.is_cuda for p in module.parameters()):
            return init(self, module, *args, **kwargs)
        bound = signature.bind(self, module, *args, **kwargs)
        bound.arguments.pop("device_ids", None)
        bound.arguments.pop("output_device", None)
        return init(*bound.args, **bound.kwargs)

    return __init__


def enable_cuda_as_cpu() -> bool:
    """Make the CPU stand in for CUDA in this process (see the module docstring).

    Returns:
        Whether it is in effect: ``False`` on a process with an accelerator.
    """
    if has_accelerator():
        return False
    os.environ[ENV] = "1"
    if _state:
        return True
    _state["module_cuda"] = torch.nn.Module.cuda
    _state["tensor_cuda"] = torch.Tensor.cuda
    torch.nn.Module.cuda = _unmoved  # type: ignore[method-assign]
    torch.Tensor.cuda = _unmoved  # type: ignore[method-assign]
    torch.cuda.current_device = lambda: 0
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    ddp = torch.nn.parallel.DistributedDataParallel
    ddp.__init__ = _ddp_on_cpu(ddp.__init__)  # type: ignore[method-assign]
    mode = CudaAsCpuMode()
    mode.__enter__()  # for the rest of the process
    _state["mode"] = mode
    return True
