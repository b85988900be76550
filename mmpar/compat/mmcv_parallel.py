"""What ``mmcv.parallel`` (mmcv 1.7) holds, submodule by submodule, in mmpar's objects.

:func:`mmpar.compat.patch_mmcv` builds one module per entry of :func:`contents`.
Submodules missing here (``_functions``, ``distributed_deprecated``) still load
from mmcv's own files, but their relative imports now find mmpar's objects.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Union

import torch

from mmpar.collate import collate
from mmpar.data_container import DataContainer
from mmpar.data_parallel import MMDataParallel
from mmpar.distributed import MMDistributedDataParallel
from mmpar.module_wrappers import is_module_wrapper
from mmpar.scatter_gather import scatter, scatter_kwargs

__all__ = ["PACKAGE", "PUBLIC", "ScatterInputs", "assert_tensor_type", "contents"]

PACKAGE = "mmcv.parallel"

#: ``mmcv.parallel.__all__`` in mmcv 1.7.
PUBLIC = (
    "collate",
    "DataContainer",
    "MMDataParallel",
    "MMDistributedDataParallel",
    "scatter",
    "scatter_kwargs",
    "is_module_wrapper",
    "MODULE_WRAPPERS",
)

#: What mmcv's scatter functions are annotated to take.
ScatterInputs = Union[torch.Tensor, DataContainer, tuple, list, dict]


def assert_tensor_type(method: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a DataContainer method that only makes sense for tensor data.

    Raises:
        AttributeError: The container's ``data`` is not a tensor (as in mmcv).
    """

    @functools.wraps(method)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self.data, torch.Tensor):
            raise AttributeError(
                f"{type(self).__name__} has no attribute {method.__name__} for type "
                f"{type(self.data).__name__}"
            )
        return method(self, *args, **kwargs)

    return checked


def contents(module_wrappers: Any) -> Dict[str, Dict[str, Any]]:
    """Submodule name -> the names it defines, with ``module_wrappers`` as the registry."""
    return {
        "data_container": {
            "DataContainer": DataContainer,
            "assert_tensor_type": assert_tensor_type,
        },
        "collate": {"collate": collate},
        "scatter_gather": {
            "scatter": scatter,
            "scatter_kwargs": scatter_kwargs,
            "ScatterInputs": ScatterInputs,
        },
        "data_parallel": {"MMDataParallel": MMDataParallel},
        "distributed": {"MMDistributedDataParallel": MMDistributedDataParallel},
        "registry": {"MODULE_WRAPPERS": module_wrappers},
        "utils": {"is_module_wrapper": is_module_wrapper},
    }
