"""MMDistributedDataParallel: DDP whose inputs may hold DataContainers, with train/val steps."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from mmpar.device_norm import normalize_scattered
from mmpar.devices import Target
from mmpar.module_wrappers import MODULE_WRAPPERS, ContainerScatter, unwrap_module
from mmpar.scatter_gather import scatter_kwargs

__all__ = ["MMDistributedDataParallel", "params_without_grad"]

_MISSING = object()


@MODULE_WRAPPERS.register_module()
class MMDistributedDataParallel(ContainerScatter, DistributedDataParallel):
    """A :class:`torch.nn.parallel.DistributedDataParallel` for DataContainer batches.

    Takes exactly DDP's constructor arguments (``device_ids``, ``output_device``,
    ``broadcast_buffers``, ``find_unused_parameters``, ...). One process drives
    one device: ``device_ids=[local_rank]`` on CUDA, no ``device_ids`` on the CPU
    (gloo).

    Every call first unwraps its inputs with mmpar's container-aware
    :func:`~mmpar.scatter_gather.scatter_kwargs` onto this process's device
    (``device_ids[0]``, or the CPU), so the model sees plain tensors and lists,
    then runs through DDP's public ``forward``. Gradient averaging, ``no_sync()``,
    ``find_unused_parameters`` and buffer broadcasting are therefore DDP's own.

    How ``train_step``/``val_step`` run inside DDP's forward machinery: for the
    duration of one call the wrapped module gets an instance attribute
    ``forward``, a one-shot function that first removes itself (restoring the
    class ``forward``, or an instance ``forward`` set before) and then calls
    ``module.train_step(...)``. DDP calls the module exactly once, so the step
    runs once, and a ``self(**data)`` inside ``train_step`` reaches the real
    ``forward``. The attribute is also removed in a ``finally`` if DDP never
    called the module. No private torch attribute is used.

    Forward hooks: hooks on submodules fire once per real forward, as usual.
    Hooks registered on the wrapped (root) module fire for the step call too,
    with the step's arguments and its returned dict, besides the inner
    ``self(...)`` call; check ``isinstance(output, dict)`` in such a hook, or
    register it on a submodule.

    Debugging unused parameters: after ``loss.backward()`` (and before the next
    forward), :meth:`params_without_grad` names the parameters that got no
    gradient, i.e. those to blame for DDP's "Expected to have finished reduction
    in the prior iteration" error when ``find_unused_parameters=False``.
    """

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """Unwrap containers onto this process's device and run DDP's forward."""
        args, kw = self._unwrap(inputs, kwargs)
        return DistributedDataParallel.forward(self, *args, **kw)

    def train_step(self, *inputs: Any, **kwargs: Any) -> Any:
        """Run ``module.train_step`` on the unwrapped inputs as DDP's forward.

        A following ``backward()`` of its loss averages gradients across
        processes exactly as for a plain DDP forward.

        Returns:
            Whatever ``module.train_step`` returns (typically
            ``dict(loss=..., log_vars=..., num_samples=...)``).

        Raises:
            TypeError: the wrapped module has no ``train_step`` method.
        """
        return self._run_step("train_step", inputs, kwargs)

    def val_step(self, *inputs: Any, **kwargs: Any) -> Any:
        """``module.val_step`` on the unwrapped inputs as DDP's forward (see :meth:`train_step`)."""
        return self._run_step("val_step", inputs, kwargs)

    def to_kwargs(
        self, inputs: Tuple[Any, ...], kwargs: Optional[Dict[str, Any]], device_id: Target
    ) -> Tuple[Tuple[Tuple[Any, ...], ...], Tuple[Dict[str, Any], ...]]:
        """Container-aware move of ``inputs``/``kwargs`` onto one device.

        mmpar's own step: :meth:`forward`, :meth:`train_step` and
        :meth:`val_step` call it before DDP's forward (torch 2.x's DDP no longer
        calls a ``to_kwargs`` method; it then finds the tensors already in place).
        """
        return normalize_scattered(scatter_kwargs(inputs, kwargs, [device_id], dim=self.dim))

    def params_without_grad(self) -> List[str]:
        """Names (as in the wrapped module) of trainable parameters whose ``grad`` is None."""
        return params_without_grad(self.module)

    def _input_target(self) -> Target:
        """This process's device: ``device_ids[0]``, else a 1-device CUDA module's, else the CPU."""
        if self.device_ids:
            return self.device_ids[0]
        device = getattr(self, "device", None)  # DDP sets it: the first parameter's device
        single = not getattr(self, "is_multi_device_module", True)
        if isinstance(device, torch.device) and device.type == "cuda" and single:
            return device
        return -1

    def _unwrap(
        self, inputs: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        args, kw = self.to_kwargs(inputs, kwargs, self._input_target())
        return (tuple(args[0]) if args else ()), (dict(kw[0]) if kw else {})

    def _run_step(self, method: str, inputs: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        step = getattr(self.module, method, None)
        if not callable(step):
            raise TypeError(
                f"MMDistributedDataParallel.{method}: the wrapped module "
                f"{type(self.module).__name__} has no {method}() method"
            )
        args, kw = self._unwrap(inputs, kwargs)
        with _forward_redirected(self.module, step):
            return DistributedDataParallel.forward(self, *args, **kw)


@contextmanager
def _forward_redirected(module: nn.Module, step: Callable[..., Any]) -> Iterator[None]:
    """Make the next call of ``module`` (only) run ``step`` instead of ``forward``."""
    saved = module.__dict__.get("forward", _MISSING)

    def restore() -> None:
        if saved is _MISSING:
            module.__dict__.pop("forward", None)
        else:
            module.__dict__["forward"] = saved

    def one_shot(*args: Any, **kwargs: Any) -> Any:
        restore()
        return step(*args, **kwargs)

    # Written into __dict__ directly: an instance attribute shadows the class
    # forward for both `module(...)` and `module.forward(...)`.
    module.__dict__["forward"] = one_shot
    try:
        yield
    finally:
        if module.__dict__.get("forward") is one_shot:
            restore()


def params_without_grad(module: nn.Module) -> List[str]:
    """Name the trainable parameters that received no gradient.

    Call it after ``loss.backward()``, having cleared gradients with
    ``zero_grad(set_to_none=True)`` (the default) before the forward. Works for
    plain modules and wrappers (DataParallel, DDP, MMDataParallel,
    MMDistributedDataParallel, registered wrappers): names are those of the
    innermost wrapped module.

    Under DDP with ``find_unused_parameters=True`` a parameter used on any rank
    gets a (reduced) gradient on every rank, so this names the parameters unused
    on all ranks. With ``find_unused_parameters=False`` it names the parameters
    that make DDP fail at the next forward; run one step, call this before the
    next forward, and either use those parameters in the loss or pass
    ``find_unused_parameters=True``.

    Args:
        module: A module or module wrapper.

    Returns:
        Parameter names in ``named_parameters()`` order, e.g. ``["head.weight"]``.

    Raises:
        TypeError: ``module`` is not an ``nn.Module``.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"params_without_grad: module must be an nn.Module, got {type(module).__name__}"
        )
    return [
        name
        for name, p in unwrap_module(module).named_parameters()
        if p.requires_grad and p.grad is None
    ]
