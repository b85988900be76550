"""mmpar: DataContainer-aware data parallelism for PyTorch.

A drop-in for ``mmcv.parallel`` (mmcv 1.x) that works on current PyTorch and on
the CPU: ``from mmpar import DataContainer, collate, scatter, scatter_kwargs``.
"""

# compat joins mmcv's wrapper registry whenever mmcv loads it (mmpar never imports mmcv).
from mmpar import compat
from mmpar.collate import collate
from mmpar.config import Config, ConfigDict, DictAction
from mmpar.data import (
    CocoDetection,
    DistributedGroupSampler,
    DistributedSampler,
    GroupSampler,
    InfiniteBatchSampler,
    InfiniteGroupBatchSampler,
    SyntheticShapes,
    build_dataloader,
    build_dataset,
    loader_padding_ratio,
    padding_ratio,
    set_loader_epoch,
)
from mmpar.data_container import DataContainer, as_container
from mmpar.data_parallel import MMDataParallel, data_parallel
from mmpar.device_norm import normalize_batch
from mmpar.devices import resolve_device, resolve_targets
from mmpar.dist import (
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
from mmpar.distributed import MMDistributedDataParallel, params_without_grad
from mmpar.gather import gather
from mmpar.module_wrappers import is_module_wrapper, unwrap_module
from mmpar.parallel_apply import parallel_apply
from mmpar.pixel_norm import PixelNorm
from mmpar.registry import DATASETS, MODELS, MODULE_WRAPPERS, OPTIMIZERS, TRANSFORMS, Registry
from mmpar.scatter_gather import scatter, scatter_kwargs, to_device
from mmpar.stacking import pad_stack
from mmpar.transfer import pin_memory
from mmpar.type_handlers import TypeHandler, register_type, unregister_type
from mmpar.version import __version__ as __version__

__all__ = [
    "DATASETS",
    "MODELS",
    "MODULE_WRAPPERS",
    "OPTIMIZERS",
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
    "PixelNorm",
    "Registry",
    "SyntheticShapes",
    "TypeHandler",
    "all_gather_object_list",
    "as_container",
    "barrier",
    "build_dataloader",
    "build_dataset",
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
