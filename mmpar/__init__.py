"""mmpar: DataContainer-aware data parallelism for PyTorch.

A drop-in for ``mmcv.parallel`` (mmcv 1.x) that works on current PyTorch and on
the CPU: ``from mmpar import DataContainer, collate, scatter, scatter_kwargs``.
"""
from .collate import collate
from .config import Config, ConfigDict, DictAction
from .data_container import DataContainer
from .devices import resolve_device, resolve_targets
from .registry import Registry
from .scatter_gather import gather, scatter, scatter_kwargs, to_device
from .stacking import pad_stack
from .transfer import pin_memory
from .type_handlers import TypeHandler, register_type, unregister_type

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ConfigDict",
    "DataContainer",
    "DictAction",
    "Registry",
    "TypeHandler",
    "collate",
    "gather",
    "pad_stack",
    "pin_memory",
    "register_type",
    "resolve_device",
    "resolve_targets",
    "scatter",
    "scatter_kwargs",
    "to_device",
    "unregister_type",
]
