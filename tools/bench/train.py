"""Train section: the whole training loop, one process against 2 gloo processes, and in one
process float32 against bfloat16 autocast and torch.compile (median time per iteration).

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


#: Precision/compilation candidates, each measured in one process: (name, row label).
VARIANTS = (
    ("float32", "float32 (eager)"),
    ("bf16", "bfloat16 autocast (`--amp`)"),
    ("compile", "float32, compiled (`--compile`, inductor)"),
)


def _worker(config: str, warmup: int, iters: int, launcher: str, variant: str) -> None:
    """Time ``iters`` training iterations after ``warmup``; print one JSON line (rank 0)."""
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist

    from mmpar.config import Config
    from mmpar.data import build_dataloader, build_dataset, set_loader_epoch
    from mmpar.dist import destroy_dist, get_dist_info, init_dist
    from mmpar.models import build_model, build_optimizer
    from mmpar.runner.compile import compile_model, resolve_compile
    from mmpar.runner.launch import wrap_model
    from mmpar.runner.optim_step import OptimizerStepper
    from mmpar.runner.rng import set_random_seed

    distributed = launcher != "none"
    if distributed:
        init_dist(launcher, backend="gloo")
    rank, world_size = get_dist_info()
    cfg = Config.fromfile(config)
    set_random_seed(0)
    model = build_model(cfg.model)
    if variant == "compile":
        compile_model(model, resolve_compile(True))
    model = wrap_model(model, distributed)
    optimizer = build_optimizer(model, cfg.optimizer)
    dtype = torch.bfloat16 if variant == "bf16" else None
    stepper = OptimizerStepper(model, optimizer, amp_dtype=dtype)
    dataset = build_dataset(cfg.data.train)
    loader = build_dataloader(
        dataset, cfg.data.samples_per_gpu, cfg.data.workers_per_gpu, dist=distributed, seed=0
    )
    images, started, done, epoch, times = 0, 0.0, 0, 0, []
    while done < warmup + iters:
        set_loader_epoch(loader, epoch)
        for data in loader:
            if done == warmup:
                if distributed:
                    dist.barrier()
                started, images = time.perf_counter(), 0
            tic = time.perf_counter()
            out = stepper.train_iter(data, 0, 1)
            times.append(time.perf_counter() - tic)
            images += out["num_samples"] * world_size
            done += 1
            if done == warmup + iters:
                break
        epoch += 1
    if distributed:
        dist.barrier()
    elapsed = time.perf_counter() - started
    if rank == 0:
        iter_time = statistics.median(times[warmup:])  # forward, backward and step
        print(json.dumps(dict(images=images, seconds=elapsed, iter_time=iter_time)), flush=True)
    del model, optimizer, out, data, loader  # DDP's reducer holds the group
    destroy_dist()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _measure(
    config: str, procs: int, warmup: int, iters: int, variant: str = "float32"
) -> Dict[str, float]:
    script = [
        str(Path(__file__).resolve()),
        "--worker",
        "--config",
        config,
        "--warmup",
        str(warmup),
        "--iters",
        str(iters),
        "--variant",
        variant,
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
    return dict(rate=result["images"] / result["seconds"], iter_time=result["iter_time"])


def run(quick: bool = False, config: Optional[str] = None) -> str:
    """Measure and return the Markdown section."""
    config = str(config or DEFAULT_CONFIG)
    repeats, warmup, iters = (1, 1, 3) if quick else (3, 5, 40)
    rates: Dict[int, List[float]] = {1: [], 2: []}
    for _ in range(repeats):
        for procs in (1, 2):
            rates[procs].append(_measure(config, procs, warmup, iters)["rate"])
    single, double = statistics.median(rates[1]), statistics.median(rates[2])
    ratio = double / single
    met = "met" if ratio >= TARGET_DDP_RATIO else "not met"
    name = Path(config).relative_to(ROOT) if Path(config).resolve().is_relative_to(ROOT) else config
    return "\n".join(
        [
            "## Training loop",
            "",
            f"Whole training loop of `{name}` (data loading, collate, scatter, forward, "
            f"backward, step), {iters} timed iterations after {warmup} warm-up, median of "
            f"{repeats}; images/s over all processes.",
            "",
            "| setup | images/s | vs 1 process |",
            "|---|---:|---:|",
            f"| 1 process (MMDataParallel, CPU) | {single:.1f} | 1.00x |",
            "| 2 gloo processes (MMDistributedDataParallel, torchrun) | "
            f"{double:.1f} | {ratio:.2f}x |",
            "",
            f"- target: 2 gloo processes on the same cores keep >= {TARGET_DDP_RATIO:.2f}x of "
            f"one process's throughput: {met} ({ratio:.2f}x)",
            "",
            _precision_table(config, name, quick),
        ]
    )


def _precision_table(config: str, name: object, quick: bool) -> str:
    """float32, bf16 autocast and compiled, one process each: median time per iteration."""
    repeats, warmup, iters = (1, 3, 3) if quick else (3, 20, 40)
    times: Dict[str, List[float]] = {v: [] for v, _ in VARIANTS}
    for _ in range(repeats):
        for variant, _label in VARIANTS:
            times[variant].append(_measure(config, 1, warmup, iters, variant)["iter_time"])
    base = statistics.median(times["float32"])
    rows = [
        f"| {label} | {statistics.median(times[v]) * 1e3:.1f} | "
        f"{statistics.median(times[v]) / base:.2f}x |"
        for v, label in VARIANTS
    ]
    return "\n".join(
        [
            "### Precision and compilation",
            "",
            f"One process on the CPU, `{name}`: median time of `train_step` + backward + step "
            f"over {iters} iterations after {warmup} warm-up (compilation happens during the "
            f"warm-up), median of {repeats} runs.",
            "",
            "| setup | ms / iteration | vs float32 |",
            "|---|---:|---:|",
            *rows,
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
    parser.add_argument("--variant", default="float32", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.config, args.warmup, args.iters, args.launcher, args.variant)
    else:
        print(run(quick=args.quick, config=args.config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
