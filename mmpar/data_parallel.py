"""MMDataParallel and the functional data_parallel: single-process, DataContainer-aware."""

from __future__ import annotations

from itertools import chain
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn.parallel import DataParallel, replicate

from mmpar.devices import Target, resolve_device, resolve_targets
from mmpar.gather import gather
from mmpar.module_wrappers import MODULE_WRAPPERS, ContainerScatter
from mmpar.parallel_apply import default_devices, parallel_apply, scatter_batch

__all__ = ["MMDataParallel", "data_parallel", "check_module_device"]

_CPU = torch.device("cpu")


def check_module_device(module: nn.Module, device: torch.device, argument: str = "module") -> None:
    """Check that every parameter and buffer of ``module`` sits on ``device``.

    Raises:
        ValueError: naming the first parameter or buffer found elsewhere and its device.
    """
    for name, t in chain(module.named_parameters(), module.named_buffers()):
        if t.device != device:
            raise ValueError(
                f"{argument}: parameters and buffers must be on {device} (device_ids[0]), but "
                f"{name!r} is on {t.device}; call module.to({str(device)!r}) before wrapping"
            )


def _names_cpu_only(device_ids: Optional[Sequence[Target]]) -> bool:
    """True when ``device_ids`` names only the CPU (``[-1]``, ``["cpu"]``).

    Only the kinds are checked here, not that the GPUs exist: without CUDA,
    ``MMDataParallel(model, device_ids=[0])`` runs on the CPU, as
    ``torch.nn.DataParallel`` does.

    A ``range`` counts as a list: mmcv-era training scripts (mmrotate's
    ``tools/train.py``) set ``cfg.gpu_ids = range(1)`` and pass it on.

    Raises:
        TypeError: ``device_ids`` is not a list, tuple or range.
        ValueError: it mixes CPU and CUDA targets, or holds an unknown device.
    """
    if device_ids is None:
        return False
    if not isinstance(device_ids, (list, tuple, range)):
        raise TypeError(
            f"device_ids: expected a list such as [0] or [-1], got {type(device_ids).__name__}"
        )
    kinds = set()
    for i, d in enumerate(device_ids):
        if isinstance(d, int) and not isinstance(d, bool):
            kinds.add("cpu" if d == -1 else "cuda")
        elif isinstance(d, (str, torch.device)):
            try:
                kinds.add(torch.device(d).type)
            except RuntimeError:
                raise ValueError(f"device_ids[{i}]: unknown device {d!r}") from None
        else:
            raise TypeError(
                f"device_ids[{i}]: expected an int, str or torch.device, got {type(d).__name__}"
            )
    if len(kinds) > 1:
        raise ValueError(f"device_ids: mixes CPU and CUDA targets, got {list(device_ids)!r}")
    return kinds == {"cpu"}


@MODULE_WRAPPERS.register_module()
class MMDataParallel(ContainerScatter, DataParallel):
    """A :class:`torch.nn.DataParallel` whose inputs may hold DataContainers.

    The inputs go through mmpar's container-aware
    :func:`~mmpar.scatter_gather.scatter_kwargs`, so the module always receives
    plain tensors and lists: a stacked container's chunk ``i`` goes to device ``i``,
    ``cpu_only`` metadata stays a Python list. Outputs come back through mmpar's
    :func:`~mmpar.gather.gather`, so per-image result lists are
    concatenated whole and in device order.

    Without CUDA (or with ``device_ids=[-1]`` / ``["cpu"]``) everything runs in
    this process on the CPU, still unwrapping containers (scatter to ``[-1]``).
    Repeated CPU targets (``["cpu", "cpu"]``) split ``forward``'s batch over them, as
    :func:`~mmpar.scatter_gather.scatter` does: the module runs once per chunk, in
    parallel threads, and the outputs are gathered in order.

    ``train_step`` and ``val_step`` use one device: for several GPUs, train with
    :class:`~mmpar.distributed.MMDistributedDataParallel`, one process per GPU.

    Args:
        module: The model; on CUDA its parameters and buffers must be on
            ``device_ids[0]`` (a single device: it is moved there, as in torch).
        device_ids: CUDA devices; None means all visible GPUs (CPU without CUDA).
        output_device: Where multi-GPU ``forward`` gathers outputs; default
            ``device_ids[0]``.
        dim: Batch dimension to scatter and gather along.

    Raises:
        ValueError: ``device_ids`` mixes CPU and CUDA targets or names a missing GPU.
    """

    def __init__(
        self,
        module: nn.Module,
        device_ids: Optional[Sequence[Target]] = None,
        output_device: Optional[Target] = None,
        dim: int = 0,
    ) -> None:
        if _names_cpu_only(device_ids) or not torch.cuda.is_available():
            # What DataParallel.__init__ itself sets up when there is no GPU
            # (it also ignores device_ids=[0] then, as mmcv-era code relies on).
            nn.Module.__init__(self)
            self.module = module
            self.device_ids: List[int] = []
            repeats = len(device_ids) if _names_cpu_only(device_ids) else 1
            #: One CPU target per chunk that ``forward`` splits the batch into.
            self.cpu_targets: List[torch.device] = [_CPU] * repeats
        else:
            ids = (
                None
                if device_ids is None
                else [resolve_device(d, "device_ids").index for d in device_ids]
            )
            out = None if output_device is None else resolve_device(output_device, "output_device")
            super().__init__(module, ids, None if out is None or out.type == "cpu" else out, dim)
            if out is not None and out.type == "cpu":
                self.output_device = -1
        # DataParallel leaves these unset without a GPU; scatter/gather need them.
        self.dim = dim
        if not self.device_ids:
            self.output_device = _CPU
            self.src_device_obj = _CPU

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """Scatter (unwrapping containers), run the module (replicas on several GPUs), gather."""
        if not self.device_ids:
            return self._cpu_forward(inputs, kwargs)
        # torch's own check raises a RuntimeError that names no parameter; this one names it.
        check_module_device(self.module, self.src_device_obj)
        return super().forward(*inputs, **kwargs)

    def train_step(self, *inputs: Any, **kwargs: Any) -> Any:
        """``module.train_step`` on the unwrapped inputs, on one device.

        Raises:
            ValueError: several ``device_ids`` (use MMDistributedDataParallel), or
                parameters/buffers not on ``device_ids[0]``.
        """
        args, kw = self._single_device_inputs("train_step", inputs, kwargs)
        return self.module.train_step(*args, **kw)

    def val_step(self, *inputs: Any, **kwargs: Any) -> Any:
        """``module.val_step`` on the unwrapped inputs, on one device (see :meth:`train_step`)."""
        args, kw = self._single_device_inputs("val_step", inputs, kwargs)
        return self.module.val_step(*args, **kw)

    def gather(self, outputs: Sequence[Any], output_device: Target) -> Any:
        """Merge per-device outputs onto ``output_device`` (lists concatenated in order)."""
        return gather(outputs, output_device, dim=self.dim)

    def _cpu_forward(self, inputs: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        args, kw = self.scatter(inputs, kwargs, self.cpu_targets)
        if len(args) <= 1:
            return self.module(*(args[0] if args else ()), **(kw[0] if kw else {}))
        used = self.cpu_targets[: len(args)]
        outputs = parallel_apply(self.module, list(args), devices=used, module_kwargs=list(kw))
        return self.gather(outputs, _CPU)

    def _single_device_inputs(
        self, method: str, inputs: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        targets = self.device_ids or self.cpu_targets
        if len(targets) > 1:
            shown = self.device_ids or ["cpu"] * len(targets)
            raise ValueError(
                f"MMDataParallel.{method}: runs on one device, got device_ids={shown}; "
                "for multi-GPU training use MMDistributedDataParallel with one process per GPU, "
                "launched with torchrun (python -m torch.distributed.run --nproc_per_node=N ...)"
            )
        if not self.device_ids:
            return self._on_one_device(inputs, kwargs, _CPU)
        check_module_device(self.module, self.src_device_obj)
        return self._on_one_device(inputs, kwargs, self.src_device_obj)

    def _on_one_device(
        self, inputs: Tuple[Any, ...], kwargs: Dict[str, Any], device: torch.device
    ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        target = -1 if device.type == "cpu" else device.index
        args, kw = self.scatter(inputs, kwargs, [target])
        return (tuple(args[0]) if args else ()), (dict(kw[0]) if kw else {})


def data_parallel(
    module: nn.Module,
    inputs: Any,
    device_ids: Optional[Sequence[Target]] = None,
    output_device: Optional[Target] = None,
    dim: int = 0,
    module_kwargs: Optional[Mapping[str, Any]] = None,
) -> Any:
    """Evaluate ``module(*inputs, **module_kwargs)`` split over several devices.

    Container-aware scatter, then (on CUDA) ``torch.nn.parallel.replicate``, then
    :func:`~mmpar.parallel_apply.parallel_apply`, then mmpar's gather. CPU targets
    may repeat (``["cpu", "cpu"]``): the same module then runs once per chunk,
    in parallel threads, without any GPU.

    Args:
        module: The model; on CUDA its parameters and buffers must be on
            ``device_ids[0]``.
        inputs: A tuple of positional arguments, or the single argument.
        device_ids: Targets; default every visible GPU, or ``["cpu"]``.
        output_device: Where outputs are gathered; default ``device_ids[0]``.
        dim: Batch dimension.
        module_kwargs: Keyword arguments, scattered along with ``inputs``.

    Returns:
        The gathered output; e.g. a tensor of shape ``(N, ...)`` for a batch of N.

    Raises:
        ValueError: ``device_ids`` mixes CPU and CUDA targets; the module is not on
            ``device_ids[0]``.
        TypeError: ``module_kwargs`` is not a dict.
    """
    devices = default_devices() if device_ids is None else resolve_targets(device_ids, "device_ids")
    if len({d.type for d in devices}) > 1:
        raise ValueError(
            f"data_parallel: device_ids mixes CPU and CUDA targets, got {list(device_ids or [])!r}"
        )
    out = devices[0] if output_device is None else resolve_device(output_device, "output_device")
    check_module_device(module, devices[0])
    args, kwargs = scatter_batch(inputs, module_kwargs, devices, dim, "data_parallel")
    used = devices[: len(args)]
    if len(used) == 1:
        return gather([module(*args[0], **kwargs[0])], out, dim=dim)
    if used[0].type == "cuda":
        modules: Any = replicate(module, [d.index for d in used], not torch.is_grad_enabled())
    else:
        modules = module
    outputs = parallel_apply(modules, args, devices=used, module_kwargs=kwargs)
    return gather(outputs, out, dim=dim)
