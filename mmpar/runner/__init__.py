"""Training and testing: checkpoints, logging, lr schedules, the epoch loop and the APIs of tools/."""
from .apis import evaluate, train_model
from .checkpoint import (atomic_write, find_latest_checkpoint, load_checkpoint, save_checkpoint,
                         unwrap_model, update_latest)
from .inference import evaluate_map, multi_gpu_test, single_gpu_test
from .launch import scale_lr, wrap_model
from .logger import JsonLogWriter, format_train_line, get_logger
from .lr_schedule import check_lr_config, scheduled_lr
from .rng import get_rng_state, set_random_seed, set_rng_state
from .train_loop import TrainState, train_one_epoch

__all__ = [
    "JsonLogWriter",
    "TrainState",
    "atomic_write",
    "check_lr_config",
    "evaluate",
    "evaluate_map",
    "find_latest_checkpoint",
    "format_train_line",
    "get_logger",
    "get_rng_state",
    "load_checkpoint",
    "multi_gpu_test",
    "save_checkpoint",
    "scale_lr",
    "scheduled_lr",
    "set_random_seed",
    "set_rng_state",
    "single_gpu_test",
    "train_model",
    "train_one_epoch",
    "unwrap_model",
    "update_latest",
    "wrap_model",
]
