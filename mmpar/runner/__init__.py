"""Training and testing: checkpoints, logs, lr schedules, the epoch loop, the APIs of tools/."""

from mmpar.runner.apis import evaluate, train_model
from mmpar.runner.checkpoint import (
    atomic_write,
    find_latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    update_latest,
)
from mmpar.runner.inference import evaluate_map, multi_gpu_test, single_gpu_test
from mmpar.runner.launch import scale_lr, wrap_model
from mmpar.runner.logger import JsonLogWriter, format_train_line, get_logger
from mmpar.runner.lr_schedule import check_lr_config, scheduled_lr
from mmpar.runner.rng import get_rng_state, set_random_seed, set_rng_state
from mmpar.runner.train_loop import TrainState, train_one_epoch

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
    "update_latest",
    "wrap_model",
]
