"""Iterate a ``mmpar.data.build_dataloader`` loader whose worker dies or hangs on one item.

Prints ``batch <indices>`` for every batch that arrives, then either
``done <n samples>`` or lets the DataLoader's error propagate (exit code 1 and a
traceback on stderr). Run in its own process: torch's SIGCHLD handler for the
loader's workers raises in whatever the main thread is doing, which is no place
for a test runner.

Usage::

    python tests/scripts/fault_loader.py --fault kill|exit|hang|none --bad 37 [--timeout 60]
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
from torch.utils.data import Dataset  # noqa: E402

from mmpar.data import build_dataloader  # noqa: E402
from mmpar.data_container import DataContainer  # noqa: E402


class Faulty(Dataset):
    """Images of 3x(8..15)x(8..15); item ``bad`` makes its worker die or hang."""

    def __init__(self, bad: int, fault: str, length: int) -> None:
        self.bad, self.fault, self.length = bad, fault, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        if index == self.bad:
            # Die a moment later than the previous batch was sent: a worker that dies
            # while the main process is still fetching that batch's shared-memory fd
            # from it surfaces as torch's ConnectionResetError instead (see
            # docs/reliability.md).
            time.sleep(1.0)
            if self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.fault == "exit":
                os._exit(7)
            elif self.fault == "hang":
                time.sleep(600)
        size = 8 + index % 8
        return {
            "img": DataContainer(torch.full((3, size, size), float(index)), stack=True),
            "img_metas": DataContainer({"idx": index}, cpu_only=True),
        }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", choices=("none", "kill", "exit", "hang"), default="none")
    parser.add_argument("--bad", type=int, default=37)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=60.0, help="DataLoader timeout (s)")
    args = parser.parse_args()
    loader = build_dataloader(
        Faulty(args.bad, args.fault, args.length), 4, 2, shuffle=False, seed=0, timeout=args.timeout
    )
    seen = 0
    for batch in loader:
        indices = [m["idx"] for m in batch["img_metas"].data[0]]
        print("batch", " ".join(map(str, indices)), flush=True)
        seen += len(indices)
    print(f"done {seen}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
