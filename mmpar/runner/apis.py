"""train_model: a whole training run from a config.

Data, wrapper, optimizer, precision, resume, epochs, checkpoints and evaluation.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader

from mmpar.data import build_dataloader
from mmpar.dist import all_gather_object_list, barrier, get_dist_info
from mmpar.models.builder import build_optimizer
from mmpar.runner.accumulate import window_open
from mmpar.runner.amp import autocast
from mmpar.runner.checkpoint import (
    load_checkpoint,
    model_weights,
    remove_stale_temporaries,
    save_checkpoint,
    update_latest,
)
from mmpar.runner.compile import CompileMonitor, compile_model, resolve_compile
from mmpar.runner.config_checks import check_train_config
from mmpar.runner.inference import (
    check_metrics,
    detail_lines,
    eval_samples_per_gpu,
    evaluate_results,
    metric_names,
    multi_gpu_test,
    run_inference,
    scalar_metrics,
    single_gpu_test,
)
from mmpar.runner.launch import run_device, wrap_model
from mmpar.runner.log_hooks import RecordWriter, build_log_writers
from mmpar.runner.logger import JsonLogWriter
from mmpar.runner.lr_schedule import check_lr_config
from mmpar.runner.optim_step import OptimizerStepper, build_stepper, describe
from mmpar.runner.resume import resume_world_size
from mmpar.runner.rng import get_rng_state, set_rng_state
from mmpar.runner.speed import apply_speed_options
from mmpar.runner.train_loop import TrainState, train_one_epoch
from mmpar.version import __version__

__all__ = ["train_model", "single_gpu_test", "multi_gpu_test", "evaluate"]


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    value = cfg.get(key, default) if hasattr(cfg, "get") else default
    return default if value is None else value


def evaluate(
    model: nn.Module,
    data_loader: Any,
    dataset: Any,
    distributed: bool,
    metrics: Sequence[str] = ("mAP",),
) -> Dict[str, Any]:
    """Detections over ``dataset`` (every rank, in dataset order) and their ``metrics``
    (see :func:`mmpar.runner.inference.evaluate_results`)."""
    return evaluate_results(dataset, run_inference(model, data_loader, distributed), metrics)


def _log_eval(
    logger: logging.Logger,
    json_log: RecordWriter,
    metrics: Dict[str, Any],
    state: TrainState,
    tag: str,
) -> None:
    scalars = scalar_metrics(metrics)
    figures = ", ".join(f"{key}: {value:.4f}" for key, value in scalars.items())
    if "bbox_mAP_copypaste" in metrics:
        figures += f", bbox_mAP_copypaste: {metrics['bbox_mAP_copypaste']}"
    logger.info(f"Epoch({tag}) [{state.epoch}]\t{figures}")
    for line in detail_lines(metrics):
        logger.info(line)
    json_log.write(dict(mode="val", tag=tag, epoch=state.epoch, iter=state.iter, **scalars))


def _meta(cfg: Any, state: TrainState, seed: Optional[int]) -> Dict[str, Any]:
    try:
        text = cfg.pretty_text
    except (TypeError, ValueError):
        text = getattr(cfg, "text", "")
    return dict(
        epoch=state.epoch,
        iter=state.iter,
        seed=seed,
        config=text,
        config_dict=cfg.to_dict(),
        mmpar_version=__version__,
        torch_version=str(torch.__version__),
        time=time.strftime("%Y%m%d_%H%M%S"),
        world_size=get_dist_info()[1],
    )


def train_model(
    cfg: Any,
    model: nn.Module,
    dataset: Any,
    val_dataset: Optional[Any] = None,
    distributed: bool = False,
    validate: bool = True,
    timestamp: Optional[str] = None,
    logger: Optional[logging.Logger] = None,
) -> Dict[str, Any]:
    """Train ``model`` on ``dataset`` as ``cfg`` says, and evaluate it on ``val_dataset``.

    Config keys used: ``work_dir``, ``seed``, ``data.samples_per_gpu``,
    ``data.workers_per_gpu``, ``data.persistent_workers`` (mmdet 2.x's: the workers of
    both loaders live for the whole run; resuming then does not repeat the
    augmentation streams of the uninterrupted run, see
    :mod:`mmpar.data.worker_seeds`), ``optimizer``, ``optimizer_config`` (``grad_clip``,
    ``cumulative_iters``, mmcv's ``type``), ``amp``/``fp16`` (see
    :mod:`mmpar.runner.amp`), ``compile`` (see :mod:`mmpar.runner.compile`),
    ``cudnn_benchmark``, ``channels_last`` (see :mod:`mmpar.runner.speed`),
    ``lr_config``, ``runner.max_epochs``, ``checkpoint_config.interval``,
    ``log_config.interval``, ``log_config.hooks`` (see :mod:`mmpar.runner.log_hooks`),
    ``evaluation`` (``interval``: every N epochs, 0 for the end only; ``before_train``;
    ``metric``: ``"mAP"``, ``"bbox"`` or both, see :data:`mmpar.runner.inference.METRICS`),
    ``resume_from``, ``load_from``,
    ``find_unused_parameters``.

    A checkpoint ``epoch_N.pth`` (model, optimizer, epoch, iteration, rng states,
    config) is written atomically after every ``interval`` epochs and the last
    one, and ``latest.pth`` points at it (float16 runs add ``amp``: the loss
    scaler's state; a checkpoint inside a gradient accumulation window adds
    ``accumulated_grads``, the window's gradients so far). With ``resume_from`` everything is
    restored, so that the run continues exactly as an uninterrupted one with the
    same seed would.

    Args:
        cfg: The config (:class:`mmpar.config.Config`).
        model: The unwrapped model; wrapped here (see :func:`mmpar.runner.launch.wrap_model`).
        dataset: Training dataset.
        val_dataset: Test-mode dataset for evaluation (``get_ann_info`` per image).
        distributed: One process per device in a process group.
        validate: Evaluate (needs ``val_dataset``).
        timestamp: Name of the JSON log, ``<timestamp>.log.json``.
        logger: Where log lines go; default the ``"mmpar"`` logger.

    Returns:
        ``dict(before=metrics or None, after=metrics or None, state=TrainState)``,
        metrics being ``dict(mAP=..., per_class=[...])`` and/or the ``bbox_*`` figures.

    Raises:
        ValueError: ``validate`` without ``val_dataset``, a missing key or a value
            out of range (see :func:`mmpar.runner.config_checks.check_train_config`),
            an unknown ``evaluation.metric`` or ``bbox`` on a dataset without COCO
            annotations.
        ImportError: ``evaluation.metric`` ``bbox`` without pycocotools.
        TypeError: a config value of the wrong type.
    """
    if validate and val_dataset is None:
        raise ValueError("train_model: validate=True needs a val_dataset")
    check_train_config(cfg, splits=())  # the datasets come built
    logger = logger or logging.getLogger("mmpar")
    rank, _ = get_dist_info()
    work_dir = Path(cfg.work_dir)
    if rank == 0:
        for stale in remove_stale_temporaries(work_dir):
            logger.info(f"removed {stale.name}, left by a save that was killed midway")
    seed = cfg.get("seed")
    data_cfg = cfg.data
    # Pinned batches on a GPU (build_dataloader's default with CUDA), none for a CPU
    # run on a GPU machine (gloo).
    device = run_device(distributed)
    pin = None if device.type == "cuda" else False
    # mmdet 2.x's key: workers that live for the whole run, for both loaders.
    persistent = bool(data_cfg.get("persistent_workers", False)) and data_cfg.workers_per_gpu > 0

    def make_loader(data: Any, samples_per_gpu: int, shuffle: bool) -> DataLoader:
        """A loader of ``data`` with the settings that the train and val loaders share."""
        return build_dataloader(
            data,
            samples_per_gpu,
            data_cfg.workers_per_gpu,
            dist=distributed,
            shuffle=shuffle,
            seed=seed,
            persistent_workers=persistent,
            pin_memory=pin,
        )

    loader = make_loader(dataset, data_cfg.samples_per_gpu, shuffle=True)
    logger.info(
        f"train loader: {data_cfg.samples_per_gpu} images per batch, {loader.num_workers} "
        f"workers{' (persistent)' if loader.persistent_workers else ''}, "
        f"{'pinned' if loader.pin_memory else 'not pinned'}"
    )
    apply_speed_options(cfg, model, bool(cfg.get("deterministic")), logger)
    compile_settings, monitor = resolve_compile(cfg.get("compile")), None
    if compile_settings is not None:
        monitor = CompileMonitor(logger).install()
        logger.info(f"torch.compile: {', '.join(compile_model(model, compile_settings))}")
    model = wrap_model(model, distributed, bool(_get(cfg, "find_unused_parameters", False)))
    optimizer = build_optimizer(model, cfg.optimizer)
    stepper = build_stepper(cfg, model, optimizer, device)
    logger.info(describe(stepper))
    base_lr = float(cfg.optimizer["lr"])
    lr_config = check_lr_config(cfg.get("lr_config"))
    state = TrainState(max_epochs=int(cfg.runner["max_epochs"]), iters_per_epoch=len(loader))
    rng = None
    if cfg.get("resume_from"):
        checkpoint = load_checkpoint(cfg.resume_from, model, optimizer)
        state.epoch, state.iter = int(checkpoint["meta"]["epoch"]), int(checkpoint["meta"]["iter"])
        rng = _own_rng_state(checkpoint)
        moved = resume_world_size(
            checkpoint["meta"],
            get_dist_info()[1],
            state.iters_per_epoch,
            bool(checkpoint.get("accumulated_grads")),
        )
        if moved is not None:
            state.iter = moved[0]
            logger.info(moved[1])
        if stepper.load_state_dict(checkpoint.get("amp")):
            logger.info(f"loss scaler restored: scale {stepper.scaler.get_scale():g}")
        _resume_window(stepper, checkpoint.get("accumulated_grads"), state, logger)
        logger.info(f"resumed from {cfg.resume_from}: epoch {state.epoch}, iter {state.iter}")
    elif cfg.get("load_from"):
        _, kind = model_weights(load_checkpoint(cfg.load_from, model), cfg.load_from)
        logger.info(f"loaded weights from {cfg.load_from} ({kind})")
    # The JSON log, and TensorBoard's events where log_config.hooks asks for them.
    json_log = build_log_writers(
        cfg.get("log_config"),
        JsonLogWriter(work_dir / f"{timestamp or time.strftime('%Y%m%d_%H%M%S')}.log.json", rank),
        work_dir,
        rank,
        optimizer,
        state.iter,
        logger,
    )
    json_log.write(
        dict(
            mode="meta",
            seed=seed,
            config=getattr(cfg, "filename", None),
            max_epochs=state.max_epochs,
            iters_per_epoch=state.iters_per_epoch,
            resumed_epoch=state.epoch,
        )
    )

    eval_cfg = _get(cfg, "evaluation", {})
    eval_metrics = metric_names(_get(eval_cfg, "metric", "mAP"))
    val_loader = None
    if validate:
        check_metrics(eval_metrics, val_dataset)
        val_loader = make_loader(val_dataset, eval_samples_per_gpu(data_cfg), shuffle=False)
    metrics: Dict[str, Any] = dict(before=None, after=None, state=state)
    if validate and state.epoch == 0 and _get(eval_cfg, "before_train", True):
        with autocast(stepper.amp_dtype, device):
            metrics["before"] = evaluate(model, val_loader, val_dataset, distributed, eval_metrics)
        _log_eval(logger, json_log, metrics["before"], state, "before training")
    if rng is not None:
        set_rng_state(rng)

    ckpt_interval = int(_get(_get(cfg, "checkpoint_config", {}), "interval", 1))
    eval_interval = int(_get(eval_cfg, "interval", 0))
    log_interval = int(_get(_get(cfg, "log_config", {}), "interval", 10))
    logger.info(
        f"start training: epochs {state.epoch + 1}..{state.max_epochs}, "
        f"{state.iters_per_epoch} iterations each, work_dir {work_dir}"
    )
    while state.epoch < state.max_epochs:
        train_one_epoch(
            model,
            loader,
            optimizer,
            state,
            lr_config,
            base_lr,
            logger,
            json_log,
            log_interval,
            stepper=stepper,
        )
        last = state.epoch == state.max_epochs
        if last or (ckpt_interval > 0 and state.epoch % ckpt_interval == 0):
            _save(work_dir, model, optimizer, cfg, state, seed, logger, stepper)
        if validate and (last or (eval_interval > 0 and state.epoch % eval_interval == 0)):
            with autocast(stepper.amp_dtype, device):
                metrics["after"] = evaluate(
                    model, val_loader, val_dataset, distributed, eval_metrics
                )
            _log_eval(logger, json_log, metrics["after"], state, "val")
    if monitor is not None:
        logger.info(f"torch.compile over the run: {monitor.counts}")
        monitor.remove()
    json_log.close()
    return metrics


def _resume_window(
    stepper: OptimizerStepper,
    grads: Optional[Mapping[str, torch.Tensor]],
    state: TrainState,
    logger: logging.Logger,
) -> None:
    """Restore the gradients of an accumulation window that the checkpoint fell inside."""
    n = stepper.cumulative_iters
    pending = state.iter % n
    if window_open(state.iter, state.max_iters, n):
        if grads:
            stepper.load_pending_grads(grads)
            logger.info(f"resumed inside an accumulation window: gradients of {pending} batch(es)")
        else:
            logger.warning(
                f"resumed at iter {state.iter}, inside a window of cumulative_iters={n}, but the "
                "checkpoint holds no accumulated gradients: the next step misses "
                f"{pending} batch(es)"
            )
    elif grads:
        logger.warning(
            f"the checkpoint holds accumulated gradients, but with cumulative_iters={n} no window "
            f"is open at iter {state.iter}: they are dropped"
        )


def _extra_state(
    amp: Optional[Dict[str, Any]], grads: Optional[Dict[str, torch.Tensor]]
) -> Optional[Dict[str, Any]]:
    """The checkpoint's optional parts: the loss scaler, and an open window's gradients."""
    extra = dict(amp=amp, accumulated_grads=grads)
    return {k: v for k, v in extra.items() if v is not None} or None


def _own_rng_state(checkpoint: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """This rank's saved random states: its entry of ``rng_ranks`` when the run had
    as many processes as this one, else the ``rng`` of rank 0."""
    rank, world_size = get_dist_info()
    per_rank = checkpoint.get("rng_ranks")
    if per_rank is not None and len(per_rank) == world_size:
        return per_rank[rank]
    return checkpoint.get("rng")


def _save(
    work_dir: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    cfg: Any,
    state: TrainState,
    seed: Optional[int],
    logger: logging.Logger,
    stepper: OptimizerStepper,
) -> None:
    rank, world_size = get_dist_info()
    grads = stepper.pending_grads()  # a collective: every rank takes part
    rng_ranks = all_gather_object_list(
        get_rng_state()
    )  # every rank's streams, so each resumes its own
    if rank == 0:
        path = work_dir / f"epoch_{state.epoch}.pth"
        save_checkpoint(
            path,
            model,
            optimizer,
            _meta(cfg, state, seed),
            rng_ranks[0],
            rng_ranks if world_size > 1 else None,
            extra=_extra_state(stepper.state_dict(), grads),
        )
        update_latest(path)
        logger.info(f"saved checkpoint {path}")
    barrier()
