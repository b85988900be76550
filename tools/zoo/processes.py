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

from mmpar_zoo.codebase import Codebase, get_codebase
from mmpar_zoo.fixes import apply_fixes
from mmpar_zoo.one_config import model_dir, one_line, run_config


def prepare(codebase: Codebase, ops: str, fixes: bool = True) -> List[str]:
    """Mount the ops, then import the codebase's models here, once, for every forked child.

    Args:
        codebase: The codebase whose models are imported (its ``modules``).
        ops: Whose ops serve ``mmcv.ops`` (``mmpar.compat.patch_mmcv``'s ``ops``).
        fixes: Apply the mends of the codebase's own bugs (``mmpar_zoo.fixes``).

    Returns:
        The names of the fixes applied.
    """
    # Import-time notices (mmcv's 2.0 announcement, torch's missing CUDA runtime) say
    # nothing about the zoo; mmpar's line on whose ops are in use stays.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from mmpar.compat import patch_mmcv

        patch_mmcv(ops=ops)
        for name in codebase.modules:
            importlib.import_module(name)
        return apply_fixes(codebase.name) if fixes else []


def import_hint(err: BaseException) -> str:
    """What may mend a codebase's import error: a package to install, an option to give."""
    text = str(err)
    if isinstance(err, ModuleNotFoundError) and err.name:
        package = err.name.split(".")[0]
        return f" (install {package}, or give --pythonpath DIR where it is installed)"
    if "MMCV==" in text and "incompatible" in text:
        return " (give --pythonpath DIR where an mmcv it accepts is installed)"
    return ""


def _child(conn: Any, path: str, rel: str, root: str, options: Dict[str, Any]) -> None:
    """A child process's body: quiet, seeded, one config, the result sent back."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    warnings.simplefilter("ignore")
    import torch

    if options["threads"]:
        torch.set_num_threads(options["threads"])
    try:
        result = run_config(
            get_codebase(options["codebase"]),
            Path(path),
            rel,
            Path(root),
            options["seed"],
            options["config_rois"],
            options["build_only"],
        )
    except BaseException as exc:  # noqa: BLE001 - the parent must hear of anything
        result = dict(config=rel, dir=model_dir(rel), times={}, status="FAIL", stage="tool")
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
        args: The options (``codebase``, ``jobs``, ``timeout``, ``seed``, ``config_rois``,
            ``build_only``).
        report: Called with each result as its config finishes.

    Returns:
        One result per config (see ``run_config``); a config whose process ran past
        the timeout or died fails at stage ``timeout`` or ``crash``.
    """
    ctx = _context()
    options = dict(
        codebase=args.codebase,
        threads=1 if args.jobs > 1 else 0,
        seed=args.seed,
        config_rois=args.config_rois,
        build_only=args.build_only,
    )
    pending = list(configs)
    running: Dict[Any, Tuple[str, Any, float]] = {}  # connection -> (config, process, deadline)
    results: Dict[str, dict] = {}
    while pending or running:
        while pending and len(running) < args.jobs:
            rel = pending.pop(0)
            here, there = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_child,
                args=(there, str(root / rel), rel, str(root), options),
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
    return dict(config=rel, dir=model_dir(rel), times={}, status="FAIL", stage=stage, error=error)
