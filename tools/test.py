#!/usr/bin/env python3
"""Test a checkpoint: detections over the config's test set, saved and/or scored.

Metrics: ``mAP`` (mAP@0.5, VOC-style; the default) and ``bbox`` (COCO AP@[.5:.95],
AP50, AP75, APs, APm, APl through pycocotools, on a COCO-format test set).

Examples::

    python tools/test.py CONFIG work_dirs/tiny_det_synthetic/latest.pth --eval
    python tools/test.py CONFIG CKPT --out results.pkl --eval mAP
    python tools/test.py COCO_CONFIG CKPT --eval bbox
    python tools/test.py CONFIG CKPT --eval --amp
    python -m torch.distributed.run --nproc_per_node=2 tools/test.py CONFIG CKPT \
        --launcher pytorch --eval

Results are collected from every process in dataset order, each image once. The
metrics are printed and written as JSON: next to ``--out`` (``<out>.metrics.json``)
or, without ``--out``, to ``<work dir>/eval_<timestamp>.json``, the work dir being
--work-dir when given, else the checkpoint's folder.

On a terminal, progress and an ETA are drawn on stderr (rank 0 only) while the
images are processed; piped or redirected output has none of it.

A user error (bad config, option, path or checkpoint) ends the run with one line
``error: ...`` on stderr and exit status 2 (--debug: the full traceback instead).
"""

from __future__ import annotations

import argparse
import json
import logging
import pickle
import sys
import time
from pathlib import Path

try:
    import mmpar  # noqa: F401
except ImportError:  # a source checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from mmpar.data import build_dataloader, build_dataset
from mmpar.dist import destroy_dist, get_dist_info
from mmpar.models import build_model
from mmpar.module_wrappers import unwrap_module
from mmpar.runner.amp import autocast
from mmpar.runner.checkpoint import load_checkpoint, model_weights
from mmpar.runner.cli import (
    add_cfg_options,
    add_debug_arg,
    add_launcher_args,
    check_choices,
    dist_timeout,
    group_failures,
    load_config,
    start_launcher,
    user_errors,
)
from mmpar.runner.config_checks import check_test_config
from mmpar.runner.inference import (
    METRICS,
    check_metrics,
    detail_lines,
    eval_samples_per_gpu,
    evaluate_results,
    result_lines,
    run_inference,
)
from mmpar.runner.launch import run_device, wrap_model
from mmpar.runner.optim_step import resolve_precision
from mmpar.runner.speed import apply_speed_options

OUT_FORMATS = (".pkl", ".json")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config", help="config file (.py or .json)")
    parser.add_argument("checkpoint", help="checkpoint file (e.g. work_dirs/NAME/latest.pth)")
    parser.add_argument(
        "--work-dir",
        help="where the metrics JSON goes without --out (default: the checkpoint's folder)",
    )
    parser.add_argument(
        "--out", help="write the per-image detections here (.pkl: pickle, .json: nested lists)"
    )
    parser.add_argument(
        "--eval",
        nargs="*",
        default=None,
        metavar="METRIC",
        help=f"evaluate; metrics among {list(METRICS)} (default: mAP; bbox: COCO AP through "
        "pycocotools, on a COCO-format test set)",
    )
    parser.add_argument(
        "--amp",
        action="store_true",
        help="autocast inference: the config's amp settings, else bfloat16 where the device "
        "supports it, else float16 (a config with amp or fp16 autocasts without it)",
    )
    add_cfg_options(parser)
    add_launcher_args(parser)
    add_debug_arg(parser)
    args = parser.parse_args(argv)
    if args.out is None and args.eval is None:
        parser.error("give at least one of --out FILE and --eval")
    if args.out is not None and Path(args.out).suffix not in OUT_FORMATS:
        parser.error(
            f"--out: expected a file ending in one of {list(OUT_FORMATS)}, got {args.out!r}"
        )
    return args


def save_results(results: list, path: Path) -> None:
    """Per image, per class ``(k, 5)`` arrays: pickled as they are, or as JSON lists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(
            json.dumps([[np.asarray(d).tolist() for d in per_image] for per_image in results])
        )
    else:
        with open(path, "wb") as f:
            pickle.dump(results, f)


def _json_safe(value):
    """``value`` as strict JSON allows: NaN (the AP of a class without ground truth)
    becomes null."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def main(argv=None) -> int:
    args = parse_args(argv)
    metrics_wanted = list(dict.fromkeys(args.eval or ["mAP"])) if args.eval is not None else []
    check_choices(metrics_wanted, METRICS, "--eval")
    with user_errors(args.debug, "--eval bbox", errors=(ImportError,)):
        check_metrics(metrics_wanted)
    cfg = load_config(args.config, args.cfg_options, args.debug)
    if args.amp:
        cfg["amp"] = cfg.get("amp") or True
    hint = f"fix it in {args.config} or with --cfg-options"
    with user_errors(args.debug, hint=hint):
        check_test_config(cfg)
    work_dir = Path(args.work_dir) if args.work_dir else Path(args.checkpoint).parent
    cfg["work_dir"] = str(work_dir)
    # Read once, before any process group: a missing or corrupt file is one clear line.
    with user_errors(args.debug, hint="give a checkpoint (or state_dict) of the model"):
        checkpoint = load_checkpoint(args.checkpoint)
    distributed = start_launcher(args.launcher, args.local_rank, cfg)
    with group_failures(args.debug, dist_timeout(cfg)):
        rank, world_size = get_dist_info()

        with user_errors(args.debug, "data.test", hint):
            dataset = build_dataset(cfg.data.test, test_mode=True)
        with user_errors(args.debug, "--eval bbox", errors=(ValueError,)):
            check_metrics(metrics_wanted, dataset)
        data_cfg = cfg.data
        pin = None if run_device(distributed).type == "cuda" else False  # None: pinned with CUDA
        loader = build_dataloader(
            dataset,
            eval_samples_per_gpu(data_cfg),
            data_cfg.workers_per_gpu,
            dist=distributed,
            shuffle=False,
            seed=0,
            pin_memory=pin,
        )
        with user_errors(args.debug, "model", hint):
            model = build_model(cfg.model)
        give = f"give a checkpoint (or state_dict) of the model of {args.config}"
        with user_errors(args.debug, hint=give, errors=(ValueError,)):
            weights, kind = model_weights(checkpoint, args.checkpoint)
        with user_errors(
            args.debug, f"checkpoint {args.checkpoint!r}", give, errors=(ValueError, RuntimeError)
        ):
            unwrap_module(model).load_state_dict(weights)
        if rank == 0:
            print(f"weights: {args.checkpoint} ({kind})", flush=True)
        del checkpoint, weights
        device = run_device(distributed)
        with user_errors(args.debug, hint=hint, errors=(TypeError, ValueError, RuntimeError)):
            dtype = resolve_precision(cfg, device)
            apply_speed_options(cfg, model, False, logging.getLogger("mmpar"))
        model = wrap_model(model, distributed)
        if dtype is not None and rank == 0:
            print(f"autocast inference in {str(dtype).replace('torch.', '')}", flush=True)
        with autocast(dtype, device):
            results = run_inference(model, loader, distributed)

        if rank == 0:
            print(
                f"tested {args.checkpoint} on {dataset!r} with {world_size} process(es): "
                f"{len(results)} results",
                flush=True,
            )
            if args.out:
                save_results(results, Path(args.out))
                print(f"detections written to {args.out}", flush=True)
            if metrics_wanted:
                metrics = evaluate_results(dataset, results, metrics_wanted)
                print("\n".join(detail_lines(metrics) + result_lines(metrics)), flush=True)
                if args.out:
                    target = Path(args.out).with_suffix(".metrics.json")
                else:
                    target = work_dir / f"eval_{time.strftime('%Y%m%d_%H%M%S')}.json"
                target.parent.mkdir(parents=True, exist_ok=True)
                record = dict(
                    config=args.config,
                    checkpoint=args.checkpoint,
                    num_images=len(results),
                    **metrics,
                )
                target.write_text(json.dumps(_json_safe(record), indent=2, allow_nan=False) + "\n")
                print(f"metrics written to {target}", flush=True)
        del model  # free DDP (its reducer holds the group) before the group goes
        destroy_dist()
        return 0


if __name__ == "__main__":
    sys.exit(main())
