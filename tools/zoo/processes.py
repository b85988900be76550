"""Many configs, each in a child process of its own, a few at a time, with timeouts.

Each config runs in its own child process (forked from this one where the
platform can), so that no global state (registries, torch threads) leaks from one
config into the next; one that runs past ``--timeout`` is stopped and fails, and
one that dies without a word fails as a crash.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from mmpar_zoo.one_config import one_line, run_config


def prepare_mmdet(ops: str) -> None:
    """Mount the ops, then import mmdet's models here, once, for every forked child.

    Args:
        ops: Whose ops serve ``mmcv.ops`` (``mmpar.compat.patch_mmcv``'s ``ops``).
    """
    # Import-time notices (mmcv's 2.0 announcement, torch's missing CUDA runtime) say
    # nothing about the zoo; mmpar's line on whose ops are in use stays.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from mmpar.compat import patch_mmcv

        patch_mmcv(ops=ops)
        for name in ("mmdet.models", "mmdet.core", "mmdet.utils"):
            importlib.import_module(name)


def _child(
    conn: Any, path: str, rel: str, root: str, seed: int, threads: int, config_rois: bool
) -> None:
    """A child process's body: quiet, seeded, one config, the result sent back."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    warnings.simplefilter("ignore")
    import torch

    if threads:
        torch.set_num_threads(threads)
    try:
        result = run_config(Path(path), rel, Path(root), seed, config_rois)
    except BaseException as exc:  # noqa: BLE001 - the parent must hear of anything
        result = dict(config=rel, dir=rel.split("/")[0], times={}, status="FAIL", stage="tool")
        result["error"] = f"{type(exc).__name__}: {one_line(exc)}"
    conn.send(result)
    conn.close()


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def run_all(
    configs: List[str], root: Path, args: argparse.Namespace, report: Callable[[dict], None]
) -> List[dict]:
    """Run ``configs`` in up to ``args.jobs`` child processes; results in ``configs``' order.

    Args:
        configs: Config paths relative to ``root``.
        root: The folder of model directories.
        args: The options (``jobs``, ``timeout``, ``seed``, ``config_rois``).
        report: Called with each result as its config finishes.

    Returns:
        One result per config (see ``run_config``); a config whose process ran past
        the timeout or died fails at stage ``timeout`` or ``crash``.
    """
    ctx = _context()
    threads = 1 if args.jobs > 1 else 0
    pending = list(configs)
    running: Dict[Any, Tuple[str, Any, float]] = {}  # connection -> (config, process, deadline)
    results: Dict[str, dict] = {}
    while pending or running:
        while pending and len(running) < args.jobs:
            rel = pending.pop(0)
            here, there = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_child,
                args=(there, str(root / rel), rel, str(root), args.seed, threads, args.config_rois),
                daemon=True,
            )
            proc.start()
            there.close()
            running[here] = (rel, proc, time.monotonic() + args.timeout)
        now = time.monotonic()
        wait = max(0.0, min(deadline for _, _, deadline in running.values()) - now)
        ready = multiprocessing.connection.wait(list(running), timeout=wait)
        for conn in list(running):
            rel, proc, deadline = running[conn]
            result = None
            if conn in ready:
                try:
                    result = conn.recv()
                except EOFError:  # died without a word: a crash
                    proc.join()
                    result = _failed(rel, "crash", f"the process ended with status {proc.exitcode}")
            elif time.monotonic() >= deadline:
                proc.kill()
                result = _failed(rel, "timeout", f"ran past --timeout {args.timeout:g} s")
            if result is not None:
                proc.join()
                conn.close()
                del running[conn]
                results[rel] = result
                report(result)
    return [results[rel] for rel in configs]


def _failed(rel: str, stage: str, error: str) -> dict:
    return dict(
        config=rel, dir=rel.split("/")[0], times={}, status="FAIL", stage=stage, error=error
    )
