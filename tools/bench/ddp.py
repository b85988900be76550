"""DDP section: MMDistributedDataParallel.train_step against plain DDP doing the same work.

Two gloo processes on 127.0.0.1 (this file, started twice with ``--worker``),
a two-layer MLP (3*32*32 -> 512 -> 10), 16 samples per process and step:

* ``plain DDP``: ``DistributedDataParallel`` whose ``forward`` computes the loss
  on a batch that is already unwrapped (plain tensors and lists);
* ``mmpar``: ``MMDistributedDataParallel.train_step`` on the collated
  DataContainer batch (stacked images, per-sample label tensors, ``cpu_only``
  metas), which unwraps it and runs the model's ``train_step`` -> ``self(**data)``.

A step is zero_grad, forward, backward (gradient all-reduce) and SGD step. The
variants alternate step by step (order flipped every round) after a warm-up;
the figures are the median step times on rank 0 and the overhead is their ratio.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

TARGET_OVERHEAD = 0.05
WORLD = 2
SAMPLES = 16
SHAPE = (3, 32, 32)
HIDDEN = 512
CLASSES = 10
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker(rank: int, port: int, steps: int, repeats: int) -> Dict[str, List[float]]:
    """One rank: join the group, time both variants; returns seconds per step per repeat."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    times = _measure(rank, steps, repeats)
    # Both DDPs (their reducers hold the group) are gone once _measure returns; collect
    # any cycles too, since destroying the group first can abort the process at exit.
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return times


def _measure(rank: int, steps: int, repeats: int) -> Dict[str, List[float]]:
    """Build both variants and time them, interleaved."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from mmpar.collate import collate
    from mmpar.data_container import DataContainer
    from mmpar.distributed import MMDistributedDataParallel
    from mmpar.scatter_gather import to_device

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.fc1 = nn.Linear(SHAPE[0] * SHAPE[1] * SHAPE[2], HIDDEN)
            self.fc2 = nn.Linear(HIDDEN, CLASSES)

        def forward(
            self, img: torch.Tensor, gt_labels: List[torch.Tensor], img_metas: List[dict]
        ) -> torch.Tensor:
            logits = self.fc2(torch.relu(self.fc1(img.flatten(1))))
            return F.cross_entropy(logits, torch.cat(gt_labels))

        def train_step(self, data: Dict[str, Any], optimizer: Any = None) -> Dict[str, Any]:
            loss = self(**data)
            return dict(
                loss=loss, log_vars=dict(loss=loss.detach()), num_samples=len(data["img_metas"])
            )

    g = torch.Generator().manual_seed(rank)
    samples = [
        dict(
            img=DataContainer(torch.randn(SHAPE, generator=g), stack=True),
            gt_labels=DataContainer(torch.randint(0, CLASSES, (1,), generator=g)),
            img_metas=DataContainer(dict(idx=i, ori_shape=SHAPE), cpu_only=True),
        )
        for i in range(SAMPLES)
    ]
    batch = collate(samples, samples_per_gpu=SAMPLES)
    plain_batch = to_device(batch, "cpu")
    mm = MMDistributedDataParallel(MLP())
    plain = DistributedDataParallel(MLP())
    opt_mm = torch.optim.SGD(mm.parameters(), lr=0.01)
    opt_plain = torch.optim.SGD(plain.parameters(), lr=0.01)

    def step_mm() -> None:
        opt_mm.zero_grad()
        mm.train_step(batch, opt_mm)["loss"].backward()
        opt_mm.step()

    def step_plain() -> None:
        opt_plain.zero_grad()
        plain(**plain_batch).backward()
        opt_plain.step()

    variants = {"mmpar": step_mm, "plain": step_plain}
    times: Dict[str, List[float]] = {name: [] for name in variants}
    for fn in variants.values():
        for _ in range(max(2, steps // 4)):
            fn()
    dist.barrier()
    # Single steps alternate (order flipped every round), so both variants see the
    # same machine; each step's backward all-reduce keeps the ranks in lockstep.
    for r in range(repeats * steps):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            start = time.perf_counter()
            variants[name]()
            times[name].append(time.perf_counter() - start)
    return times


def _launch(steps: int, repeats: int, timeout: float) -> Dict[str, List[float]]:
    port = _free_port()
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                str(rank),
                "--port",
                str(port),
                "--steps",
                str(steps),
                "--repeats",
                str(repeats),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for rank in range(WORLD)
    ]
    try:
        outputs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, (p, (out, err)) in enumerate(zip(procs, outputs)):
        if p.returncode != 0:
            raise RuntimeError(f"ddp bench: rank {rank} exited with {p.returncode}:\n{err[-4000:]}")
    return json.loads(outputs[0][0].strip().splitlines()[-1])


def run(quick: bool = False) -> str:
    """Measure both variants side by side; return the Markdown section."""
    steps, repeats = (4, 3) if quick else (10, 100)
    times = _launch(steps, repeats, timeout=180 if quick else 900)
    plain = statistics.median(times["plain"])
    mm = statistics.median(times["mmpar"])
    ratio = mm / plain
    overhead = ratio - 1
    met = "met" if overhead <= TARGET_OVERHEAD else "not met"
    dims = "x".join(map(str, SHAPE))
    lines = [
        "## DDP: MMDistributedDataParallel.train_step vs plain DDP",
        "",
        f"{WORLD} gloo processes on 127.0.0.1 (1 thread each), two-layer MLP ({dims} -> {HIDDEN} "
        f"-> {CLASSES}), "
        f"{SAMPLES} samples per process and step (zero_grad, forward, backward, SGD step). "
        f"Medians of {repeats * steps} single steps per variant, the variants alternating step by "
        "step after a warm-up, rank 0.",
        "",
        "| variant | input | median step (ms) | vs plain DDP |",
        "|---|---|---:|---:|",
        f"| plain DDP | unwrapped batch | {plain * 1e3:.3f} | 1.000 |",
        f"| MMDistributedDataParallel.train_step | DataContainer batch | {mm * 1e3:.3f} | "
        f"{ratio:.3f} |",
        "",
        f"- Target: train_step overhead over plain DDP <= {TARGET_OVERHEAD:.0%}: **{met}** "
        f"(measured {overhead:+.1%}).",
    ]
    return "\n".join(lines) + "\n"


def _main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=40, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=15, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is None:
        print(run(quick=args.quick))
        return
    times = _worker(args.worker, args.port, args.steps, args.repeats)
    print(json.dumps(times), flush=True)


if __name__ == "__main__":
    _main()
