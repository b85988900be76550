"""Train section: images/s of the whole training loop, one process against 2 gloo processes.

The loop is tools/train.py's: DataLoader (collate, group sampler), MMDataParallel or
MMDistributedDataParallel, ``train_step``, backward, optimizer step. Each candidate
runs in fresh subprocesses (the 2-process one through ``torch.distributed.run``),
warms up, then times a fixed number of iterations; medians of several repeats,
interleaved. The single process uses torch's default threads; the 2 processes one
thread each (torchrun's default), so both use the same cores.

Run directly (``python tools/bench/train.py [--config CONFIG] [--quick]``) or
through ``python tools/benchmark.py train``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = ROOT / "configs" / "tiny_det" / "tiny_det_synthetic.py"
#: 2 gloo processes on the same cores must keep this share of single-process throughput.
TARGET_DDP_RATIO = 0.7


def _worker(config: str, warmup: int, iters: int, launcher: str) -> None:
    """Time ``iters`` training iterations after ``warmup``; print one JSON line (rank 0)."""
    sys.path.insert(0, str(ROOT))
    import torch.distributed as dist

    from mmpar.config import Config
    from mmpar.data import build_dataloader, build_dataset, set_loader_epoch
    from mmpar.dist import destroy_dist, get_dist_info, init_dist
    from mmpar.models import build_model, build_optimizer
    from mmpar.runner.launch import wrap_model
    from mmpar.runner.rng import set_random_seed

    distributed = launcher != "none"
    if distributed:
        init_dist(launcher, backend="gloo")
    rank, world_size = get_dist_info()
    cfg = Config.fromfile(config)
    set_random_seed(0)
    model = wrap_model(build_model(cfg.model), distributed)
    optimizer = build_optimizer(model, cfg.optimizer)
    dataset = build_dataset(cfg.data.train)
    loader = build_dataloader(
        dataset, cfg.data.samples_per_gpu, cfg.data.workers_per_gpu, dist=distributed, seed=0
    )
    images, started, done, epoch = 0, 0.0, 0, 0
    while done < warmup + iters:
        set_loader_epoch(loader, epoch)
        for data in loader:
            if done == warmup:
                if distributed:
                    dist.barrier()
                started, images = time.perf_counter(), 0
            out = model.train_step(data, optimizer)
            optimizer.zero_grad()
            out["loss"].backward()
            optimizer.step()
            images += out["num_samples"] * world_size
            done += 1
            if done == warmup + iters:
                break
        epoch += 1
    if distributed:
        dist.barrier()
    elapsed = time.perf_counter() - started
    if rank == 0:
        print(json.dumps(dict(images=images, seconds=elapsed)), flush=True)
    del model, optimizer, out, data, loader  # DDP's reducer holds the group
    destroy_dist()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _measure(config: str, procs: int, warmup: int, iters: int) -> float:
    script = [
        str(Path(__file__).resolve()),
        "--worker",
        "--config",
        config,
        "--warmup",
        str(warmup),
        "--iters",
        str(iters),
    ]
    if procs == 1:
        cmd = [sys.executable, *script]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={procs}",
            f"--master_port={_free_port()}",
            *script,
            "--launcher",
            "pytorch",
        ]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark worker failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    result = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    return result["images"] / result["seconds"]


def run(quick: bool = False, config: Optional[str] = None) -> str:
    """Measure and return the Markdown section."""
    config = str(config or DEFAULT_CONFIG)
    repeats, warmup, iters = (1, 1, 3) if quick else (3, 5, 40)
    rates: Dict[int, List[float]] = {1: [], 2: []}
    for _ in range(repeats):
        for procs in (1, 2):
            rates[procs].append(_measure(config, procs, warmup, iters))
    single, double = statistics.median(rates[1]), statistics.median(rates[2])
    ratio = double / single
    met = "met" if ratio >= TARGET_DDP_RATIO else "not met"
    name = Path(config).relative_to(ROOT) if Path(config).resolve().is_relative_to(ROOT) else config
    return "\n".join(
        [
            "## Training loop",
            "",
            f"Whole training loop of `{name}` (data loading, collate, scatter, forward, backward, step), "
            f"{iters} timed iterations after {warmup} warm-up, median of {repeats}; images/s over all processes.",
            "",
            "| setup | images/s | vs 1 process |",
            "|---|---:|---:|",
            f"| 1 process (MMDataParallel, CPU) | {single:.1f} | 1.00x |",
            f"| 2 gloo processes (MMDistributedDataParallel, torchrun) | {double:.1f} | {ratio:.2f}x |",
            "",
            f"- target: 2 gloo processes on the same cores keep >= {TARGET_DDP_RATIO:.2f}x of one process's throughput: "
            f"{met} ({ratio:.2f}x)",
            "",
        ]
    )


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, default=5, help=argparse.SUPPRESS)
    parser.add_argument("--iters", type=int, default=40, help=argparse.SUPPRESS)
    parser.add_argument("--launcher", default="none", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.config, args.warmup, args.iters, args.launcher)
    else:
        print(run(quick=args.quick, config=args.config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
