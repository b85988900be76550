#!/usr/bin/env python3
"""Train a model from a config, on one CPU, one GPU, or many processes (torchrun, SLURM).

Examples::

    python tools/train.py configs/tiny_det/tiny_det_synthetic.py
    python tools/train.py CONFIG --work-dir work_dirs/run1 --cfg-options runner.max_epochs=2
    python tools/train.py CONFIG --work-dir work_dirs/run1 --auto-resume
    python tools/train.py CONFIG --amp --compile
    python tools/train.py CONFIG --cfg-options +my_key=1  # '+' adds a key nothing reads yet
    python -m torch.distributed.run --nproc_per_node=2 tools/train.py CONFIG --launcher pytorch

A user error (bad config, option, path or checkpoint) ends the run with one line
``error: ...`` on stderr and exit status 2 (--debug: the full traceback instead).
--auto-resume says what it resumed from, that there was nothing to resume, or
that the run is already complete (then it exits 0 without training). A fresh run
into a work dir that holds checkpoints warns that it overwrites them.

Config files are Python and run as code: only use configs you trust.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Optional

try:
    import mmpar  # noqa: F401
except ImportError:  # a source checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from mmpar.data import build_dataset
from mmpar.dist import destroy_dist, get_dist_info, sync_random_seed
from mmpar.models import build_model
from mmpar.runner.accumulate import cumulative_iters
from mmpar.runner.apis import train_model
from mmpar.runner.checkpoint import load_checkpoint, model_weights
from mmpar.runner.cli import (
    add_cfg_options,
    add_debug_arg,
    add_launcher_args,
    dist_timeout,
    group_failures,
    load_config,
    resolve_work_dir,
    start_launcher,
    user_errors,
)
from mmpar.runner.compile import resolve_compile
from mmpar.runner.config_checks import check_train_config
from mmpar.runner.inference import check_metrics, headline, metric_names
from mmpar.runner.launch import run_device, scale_lr
from mmpar.runner.logger import get_logger
from mmpar.runner.optim_step import resolve_precision
from mmpar.runner.resume import ResumeMismatch, ResumePlan, existing_checkpoints, plan_resume
from mmpar.runner.rng import DETERMINISTIC_CUBLAS, set_random_seed
from mmpar.runner.speed import check_flag


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config", help="config file (.py or .json)")
    parser.add_argument(
        "--work-dir", help="where logs and checkpoints go (default: work_dirs/<config name>)"
    )
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument(
        "--resume-from", help="checkpoint to resume from (model, optimizer, epoch, rng states)"
    )
    resume.add_argument(
        "--auto-resume",
        action="store_true",
        help="resume from the newest checkpoint of the work dir, if any",
    )
    parser.add_argument("--no-validate", action="store_true", help="skip the evaluations")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="random seed (default: the config's, else the checkpoint's, else random)",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="seed everything and use deterministic algorithms only",
    )
    parser.add_argument(
        "--auto-scale-lr",
        action="store_true",
        help="scale the lr by the batch size of a step (samples_per_gpu x processes x "
        "optimizer_config.cumulative_iters) against auto_scale_lr.base_batch_size",
    )
    parser.add_argument(
        "--amp",
        action="store_true",
        help="mixed precision: the config's amp settings, else bfloat16 where the device "
        "supports it, else float16 with a dynamic loss scale",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model in place (the config's compile settings, if any)",
    )
    add_cfg_options(parser)
    add_launcher_args(parser)
    add_debug_arg(parser)
    return parser.parse_args(argv)


def _resolve_resume(args: argparse.Namespace, cfg, work_dir: Path) -> ResumePlan:
    """Set ``cfg.resume_from``. The checkpoint to resume (or ``load_from``) is read
    up front, so that a missing or corrupt one is a clear error before any work."""
    resume_from = args.resume_from or cfg.get("resume_from")
    option = "--resume-from" if args.resume_from else "resume_from"
    with user_errors(args.debug, option, "give an existing checkpoint written by tools/train.py"):
        plan = plan_resume(resume_from, args.auto_resume, work_dir, cfg.runner["max_epochs"])
    cfg["resume_from"] = plan.checkpoint
    if plan.weights:
        cfg["load_from"] = plan.weights
    elif cfg.get("load_from") and not plan.checkpoint:
        with user_errors(args.debug, "load_from", "give an existing checkpoint or state_dict"):
            model_weights(load_checkpoint(cfg.load_from), cfg.load_from)
    return plan


def _resolve_seed(args: argparse.Namespace, cfg, resume_meta: Optional[dict]) -> int:
    """``--seed``, else the config's, else the resumed checkpoint's, else a random one."""
    seed = args.seed if args.seed is not None else cfg.get("seed")
    if seed is None and resume_meta:
        seed = resume_meta.get("seed")
    return sync_random_seed(seed)  # a random one when still None; the same on every rank


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options, args.debug)
    if args.amp:
        cfg["amp"] = cfg.get("amp") or True
    if args.compile:
        cfg["compile"] = cfg.get("compile") or True
    with user_errors(args.debug, hint=f"fix it in {args.config} or with --cfg-options"):
        check_train_config(cfg, ("train",) if args.no_validate else ("train", "val"))
    work_dir = resolve_work_dir(args.work_dir, cfg, args.config)
    plan = _resolve_resume(args, cfg, work_dir)
    if args.deterministic or cfg.get("deterministic"):
        # Read by cuBLAS when CUDA starts: before the launcher picks this process's GPU.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", DETERMINISTIC_CUBLAS)
    distributed = start_launcher(args.launcher, args.local_rank, cfg)
    with group_failures(args.debug, dist_timeout(cfg)):
        return _train(args, cfg, plan, work_dir, distributed)


def _train(
    args: argparse.Namespace, cfg, plan: ResumePlan, work_dir: Path, distributed: bool
) -> int:
    """Everything after the launcher: the logger, the seed, the model, the data, training."""
    rank, world_size = get_dist_info()
    overwritten = [] if plan.checkpoint else existing_checkpoints(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    timestamp = time.strftime("%Y%m%d_%H%M%S")
    logger = get_logger("mmpar", work_dir / f"{timestamp}.log", rank=rank)
    if plan.message:
        logger.info(plan.message)
    if plan.complete:
        destroy_dist()
        return 0
    if overwritten:
        logger.warning(
            f"work dir {work_dir} already holds checkpoints ({', '.join(overwritten)}): this fresh "
            "run overwrites them; use --auto-resume to continue that run, or another --work-dir"
        )
    if args.auto_scale_lr:
        with user_errors(args.debug, errors=(TypeError, ValueError)):
            # An optimizer step sees cumulative_iters batches of every process.
            accumulate = cumulative_iters(cfg.get("optimizer_config"))
            scale_lr(
                cfg.optimizer,
                cfg.get("auto_scale_lr"),
                cfg.data.samples_per_gpu * world_size * accumulate,
                logger,
            )
    logger.info(
        f"python {platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, "
        f"CUDA {'available' if torch.cuda.is_available() else 'not available'}, "
        f"{world_size} process(es), launcher {args.launcher}"
    )
    device = run_device(distributed)
    if device.type == "cpu" and torch.cuda.is_available():
        backend = torch.distributed.get_backend()
        logger.info(
            f"training on the CPU although CUDA is available: the {backend} "
            "backend runs on the CPU (nccl would use the GPUs)"
        )
    else:
        logger.info(f"training on {device}")
    with user_errors(args.debug, errors=(TypeError, ValueError, RuntimeError)):
        resolve_precision(cfg, device)
        resolve_compile(cfg.get("compile"))
        for key in ("cudnn_benchmark", "channels_last"):
            check_flag(cfg, key)
    seed = _resolve_seed(args, cfg, plan.meta)
    deterministic = bool(args.deterministic or cfg.get("deterministic"))
    cfg["seed"], cfg["deterministic"] = seed, deterministic
    # Each rank draws its own augmentations in the main process (DataLoader workers
    # are seeded from (seed, rank, epoch, worker) anyway); DDP gives every rank
    # rank 0's initial weights.
    set_random_seed(seed + rank, deterministic)
    logger.info(f"seed {seed} (+ rank in each process), deterministic {deterministic}")
    hint = f"fix it in {args.config} or with --cfg-options"
    with user_errors(args.debug, "model", hint):
        model = build_model(cfg.model)
    with user_errors(args.debug, "data.train", hint):
        dataset = build_dataset(cfg.data.train)
    with user_errors(args.debug, "data.val", hint + " (or pass --no-validate)"):
        val_dataset = None if args.no_validate else build_dataset(cfg.data.val, test_mode=True)
    if val_dataset is not None:  # before training, not at the first evaluation
        with user_errors(
            args.debug, "evaluation.metric", errors=(ImportError, TypeError, ValueError)
        ):
            check_metrics(
                metric_names((cfg.get("evaluation") or {}).get("metric") or "mAP"), val_dataset
            )
    logger.info(f"config {args.config}:\n{cfg.pretty_text}")
    if rank == 0:
        cfg.dump(work_dir / f"{Path(args.config).stem}.py")
    logger.info(
        f"model {type(model).__name__}: {sum(p.numel() for p in model.parameters())} parameters; "
        f"train {dataset!r}; val {val_dataset!r}"
    )
    started = time.perf_counter()
    with user_errors(args.debug, "resume_from", errors=(ResumeMismatch,)):
        metrics = train_model(
            cfg,
            model,
            dataset,
            val_dataset,
            distributed=distributed,
            validate=not args.no_validate,
            timestamp=timestamp,
            logger=logger,
        )
    summary = f"done in {time.perf_counter() - started:.1f} s"
    if metrics["before"] is not None or metrics["after"] is not None:
        name = headline(metrics["after"] or metrics["before"])[0]
        before = "n/a" if metrics["before"] is None else f"{headline(metrics['before'])[1]:.4f}"
        after = "n/a" if metrics["after"] is None else f"{headline(metrics['after'])[1]:.4f}"
        summary += f"; {name} before training: {before}, after: {after}"
    logger.info(summary)
    destroy_dist()
    return 0


if __name__ == "__main__":
    sys.exit(main())
