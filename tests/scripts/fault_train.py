"""A training loop over a gloo process group in which one rank fails on purpose.

Every rank joins the group with ``mmpar.dist.init_dist("pytorch",
timeout=...)`` (environment of torchrun, or set by hand), then runs ``--steps``
DDP train steps of a tiny model, each followed by an ``all_reduce`` of its loss.
At step ``--fault-step`` rank ``--fault-rank`` fails as ``--fault`` says:

* ``raise``: raises ``RuntimeError("injected fault")`` (a Python error: the
  process exits 1 with a traceback);
* ``kill``: sends itself SIGKILL (no cleanup, sockets closed by the kernel);
* ``exit``: ``os._exit(3)`` (no cleanup, no traceback);
* ``stop``: sends itself SIGSTOP (alive but silent, as a hung rank: the
  others can only notice through the process-group timeout);
* ``none``: no fault.

A surviving rank prints ``rank R: finished S steps`` and exits 0, or, when a
collective fails, ``rank R: lost a peer at step S after D s: <error>`` on
stderr and exits 1. ``D`` is the time from the start of the step that failed,
i.e. how long detecting the dead peer took.

Usage::

    python -m torch.distributed.run --nproc_per_node=3 tests/scripts/fault_train.py \
        --fault kill --fault-rank 1 --fault-step 5 --timeout 20
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from mmpar.dist import init_dist  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument(
        "--fault", choices=("none", "raise", "kill", "exit", "stop"), default="none"
    )
    parser.add_argument("--fault-rank", type=int, default=1)
    parser.add_argument("--fault-step", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=30.0, help="process-group timeout (s)")
    parser.add_argument("--step-sleep", type=float, default=0.01, help="seconds of 'work' per step")
    return parser.parse_args()


def inject(fault: str) -> None:
    print(f"rank {dist.get_rank()}: injecting {fault}", flush=True)
    if fault == "raise":
        raise RuntimeError("injected fault")
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "exit":
        os._exit(3)
    if fault == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)


# Under torchrun the raising rank writes an error file, so the report names it as root cause.
@record
def main() -> int:
    args = parse_args()
    init_dist("pytorch", backend="gloo", timeout=args.timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    print(f"rank {rank}: ready", flush=True)
    for step in range(args.steps):
        started = time.monotonic()
        if args.fault != "none" and rank == args.fault_rank and step == args.fault_step:
            inject(args.fault)
        try:
            loss = model(torch.randn(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()  # DDP: gradients all-reduced here
            optimizer.step()
            total = loss.detach().clone()
            dist.all_reduce(total)
        except Exception as exc:  # noqa: BLE001 - any collective failure means a lost peer
            elapsed = time.monotonic() - started
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            # One write of one line: the ranks share the launcher's pipe.
            sys.stderr.write(
                f"rank {rank}: lost a peer at step {step} after {elapsed:.2f} s: "
                f"{type(exc).__name__}: {message}\n"
            )
            sys.stderr.flush()
            # The group is broken: exit without the destroy/atexit paths that could wait on peers.
            os._exit(1)
        time.sleep(args.step_sleep)
    print(f"rank {rank}: finished {args.steps} steps", flush=True)
    del model
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
