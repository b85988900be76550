"""mmpar: DataContainer-aware data parallelism for PyTorch.

A drop-in for ``mmcv.parallel`` (mmcv 1.x) that works on current PyTorch and on
the CPU: ``from mmpar import DataContainer, collate, scatter, scatter_kwargs``.
"""
from .collate import collate
from .config import Config, ConfigDict, DictAction
from .data_container import DataContainer
from .data_parallel import MMDataParallel, data_parallel
from .devices import resolve_device, resolve_targets
from .distributed import MMDistributedDataParallel, params_without_grad
from .dist_utils import (
    all_gather_object_list,
    barrier,
    collect_results,
    destroy_dist,
    get_dist_info,
    init_dist,
    is_main_process,
    master_only,
    sync_random_seed,
)
from .device_norm import normalize_batch
from .module_wrappers import MODULE_WRAPPERS, is_module_wrapper, unwrap_module
from .parallel_apply import parallel_apply
from .registry import Registry
from .scatter_gather import gather, scatter, scatter_kwargs, to_device
from .stacking import pad_stack
from .transfer import pin_memory
from .type_handlers import TypeHandler, register_type, unregister_type

# The data package last: its modules import the core above.
from .data import (
    DATASETS,
    TRANSFORMS,
    CocoDetection,
    DistributedGroupSampler,
    DistributedSampler,
    GroupSampler,
    InfiniteBatchSampler,
    InfiniteGroupBatchSampler,
    SyntheticShapes,
    build_dataloader,
    loader_padding_ratio,
    padding_ratio,
    set_loader_epoch,
)
from .data_container import as_container

# Last: joins mmcv's wrapper registry whenever mmcv loads it (mmpar never imports mmcv).
from . import compat  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "DATASETS",
    "MODULE_WRAPPERS",
    "TRANSFORMS",
    "CocoDetection",
    "Config",
    "ConfigDict",
    "DataContainer",
    "DictAction",
    "DistributedGroupSampler",
    "DistributedSampler",
    "GroupSampler",
    "InfiniteBatchSampler",
    "InfiniteGroupBatchSampler",
    "MMDataParallel",
    "MMDistributedDataParallel",
    "Registry",
    "SyntheticShapes",
    "TypeHandler",
    "all_gather_object_list",
    "as_container",
    "barrier",
    "build_dataloader",
    "collate",
    "collect_results",
    "compat",
    "data_parallel",
    "destroy_dist",
    "gather",
    "normalize_batch",
    "get_dist_info",
    "init_dist",
    "is_main_process",
    "is_module_wrapper",
    "loader_padding_ratio",
    "master_only",
    "pad_stack",
    "padding_ratio",
    "parallel_apply",
    "params_without_grad",
    "pin_memory",
    "register_type",
    "resolve_device",
    "resolve_targets",
    "scatter",
    "scatter_kwargs",
    "set_loader_epoch",
    "sync_random_seed",
    "to_device",
    "unregister_type",
    "unwrap_module",
]
