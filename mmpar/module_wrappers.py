"""MODULE_WRAPPERS: the registry of classes that wrap a model, and is_module_wrapper."""
from __future__ import annotations

from typing import Any, Tuple

from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel

from .data_parallel import MMDataParallel
from .distributed import MMDistributedDataParallel
from .registry import Registry

__all__ = ["MODULE_WRAPPERS", "is_module_wrapper", "unwrap_module"]

#: Classes whose instances wrap a model in ``.module``. Register your own wrapper
#: here (or in a child registry: ``Registry("x", parent=MODULE_WRAPPERS, scope="x")``)
#: so that :func:`is_module_wrapper` recognises it.
MODULE_WRAPPERS = Registry("module wrapper")
for _cls in (DataParallel, DistributedDataParallel, MMDataParallel, MMDistributedDataParallel):
    MODULE_WRAPPERS.register_module(module=_cls)


def _wrapper_classes() -> Tuple[type, ...]:
    return tuple(obj for obj in MODULE_WRAPPERS.all_modules() if isinstance(obj, type))


def is_module_wrapper(module: Any) -> bool:
    """Whether ``module`` is a model wrapper (its model is ``module.module``).

    True for instances of DataParallel, DistributedDataParallel and their
    subclasses (MMDataParallel, MMDistributedDataParallel...), and of any class
    registered in :data:`MODULE_WRAPPERS` or in a descendant registry of it.

    Args:
        module: Any object.

    Returns:
        True for a wrapper, False otherwise (also for non-modules).
    """
    return isinstance(module, _wrapper_classes())


def unwrap_module(module: Any) -> Any:
    """The model inside any nesting of wrappers (``module.module`` ...), or ``module`` itself."""
    while is_module_wrapper(module) and isinstance(getattr(module, "module", None), nn.Module):
        module = module.module
    return module
