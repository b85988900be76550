"""is_module_wrapper and unwrap_module: recognise a model wrapper by its class.

The wrapper classes are those of :data:`mmpar.registry.MODULE_WRAPPERS` (a leaf
registry that the wrappers register themselves into) and, once mmcv 1.x has
loaded it, of mmcv's own wrapper registry tree. :class:`ContainerScatter` is the
container-aware ``scatter`` that mmpar's wrappers share.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from torch import nn

from mmpar.device_norm import normalize_scattered
from mmpar.devices import Target
from mmpar.registry import MODULE_WRAPPERS
from mmpar.scatter_gather import scatter_kwargs

__all__ = [
    "ContainerScatter",
    "MMCV_REGISTRY_MODULE",
    "MODULE_WRAPPERS",
    "is_module_wrapper",
    "unwrap_module",
    "wrapper_classes",
]

#: Where mmcv 1.x keeps its wrapper registry; looked up in ``sys.modules`` only.
MMCV_REGISTRY_MODULE = "mmcv.parallel.registry"


def _registries() -> List[Any]:
    """mmpar's registry, and mmcv 1.x's when ``mmcv.parallel`` is loaded."""
    roots: List[Any] = [MODULE_WRAPPERS]
    module = sys.modules.get(MMCV_REGISTRY_MODULE)
    foreign = getattr(module, "MODULE_WRAPPERS", None)
    if foreign is not None and foreign is not MODULE_WRAPPERS:
        roots.append(foreign)
    return roots


def _walk(registry: Any, seen: Set[int]) -> Iterator[Any]:
    # Duck-typed on ``module_dict`` and ``children``, which mmcv's Registry shares.
    if id(registry) in seen:
        return
    seen.add(id(registry))
    yield from registry.module_dict.values()
    for child in registry.children.values():
        yield from _walk(child, seen)


def wrapper_classes() -> Tuple[type, ...]:
    """Every class registered as a wrapper, in mmpar's registry tree and, once
    ``mmcv.parallel`` is imported, in mmcv 1.x's (mmpar never imports mmcv)."""
    seen: Set[int] = set()
    found = (obj for root in _registries() for obj in _walk(root, seen))
    return tuple(dict.fromkeys(obj for obj in found if isinstance(obj, type)))


def is_module_wrapper(module: Any) -> bool:
    """Whether ``module`` is a model wrapper (its model is ``module.module``).

    True for instances of DataParallel, DistributedDataParallel and their
    subclasses (MMDataParallel, MMDistributedDataParallel...), and of any class
    registered in :data:`MODULE_WRAPPERS`, in a descendant registry of it, or in
    mmcv 1.x's ``mmcv.parallel.MODULE_WRAPPERS`` tree when mmcv is loaded.

    Args:
        module: Any object.

    Returns:
        True for a wrapper, False otherwise (also for non-modules).
    """
    return isinstance(module, wrapper_classes())


def unwrap_module(module: Any) -> Any:
    """The model inside any nesting of wrappers (``module.module`` ...), or ``module`` itself."""
    while is_module_wrapper(module) and isinstance(getattr(module, "module", None), nn.Module):
        module = module.module
    return module


class ContainerScatter:
    """Mixin of mmpar's wrappers: a container-aware ``scatter`` in place of torch's.

    Put it before the torch wrapper class among the bases; the wrapper sets ``dim``.
    """

    dim: int

    def scatter(
        self,
        inputs: Tuple[Any, ...],
        kwargs: Optional[Dict[str, Any]],
        device_ids: Sequence[Target],
    ) -> Tuple[Tuple[Tuple[Any, ...], ...], Tuple[Dict[str, Any], ...]]:
        """Container-aware split of ``inputs``/``kwargs`` over ``device_ids``; images that
        the pipeline left for the device (``Normalize(on_device=True)``) are normalized
        there (see :mod:`mmpar.device_norm`)."""
        return normalize_scattered(scatter_kwargs(inputs, kwargs, list(device_ids), dim=self.dim))
