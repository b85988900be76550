"""Run tools/train.py and SIGKILL this very process at the N-th checkpoint save.

Usage: train_killed_at_save.py during|after N TRAIN_ARGS...

``during``: the N-th ``epoch_*.pth`` save writes half of its bytes into the
temporary file, flushes them, and the process kills itself, so the kill lands
inside the save, deterministically. ``after``: the process kills itself right
after the N-th checkpoint file is complete, before ``latest.pth`` moves to it.
"""

from __future__ import annotations

import io
import os
import runpy
import signal
import sys
from pathlib import Path

import mmpar.runner.checkpoint as checkpoint

ROOT = Path(__file__).resolve().parents[2]
mode, nth, train_args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
original = checkpoint.atomic_write
saves = 0


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def atomic_write(path, write):
    global saves
    if not Path(path).name.startswith("epoch_"):
        return original(path, write)
    saves += 1
    if saves == nth and mode == "during":

        def half_then_die(f):
            buffer = io.BytesIO()
            write(buffer)
            data = buffer.getvalue()
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
            _die()

        return original(path, half_then_die)
    original(path, write)
    if saves == nth and mode == "after":
        _die()


checkpoint.atomic_write = atomic_write
sys.argv = [str(ROOT / "tools" / "train.py"), *train_args]
runpy.run_path(sys.argv[0], run_name="__main__")
