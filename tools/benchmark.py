#!/usr/bin/env python3
"""mmpar benchmarks: each section measures its candidates side by side in one run.

Usage::

    python tools/benchmark.py                 # every section
    python tools/benchmark.py collate padding # some sections
    python tools/benchmark.py --quick         # few repeats, small sizes (smoke run)
    python tools/benchmark.py hotpath --baseline a009b20
                                              # this tree against another revision
    python tools/benchmark.py --config configs/tiny_det/tiny_det_synthetic.py
                                              # images/s of the whole training loop,
                                              # 1 process against 2 gloo processes

Sections live in ``tools/bench/<name>.py`` and each defines ``run(quick) -> str``
returning a Markdown section (the figures in ``docs/benchmarks.md`` are its output).
The other modules there (no ``run``, or a name starting with ``_``) are helpers that a
section loads, e.g. ``ops_nms.py`` for ``ops.py``.

A config that cannot be read or holds bad values, or a ``--baseline`` that cannot
be used (no git, not a git checkout, no such revision), ends the run with one line
``error: ...`` on stderr and exit status 2 (--debug: the full traceback instead).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import List, Optional

import torch

try:
    import mmpar  # noqa: F401
except ImportError:  # a source checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mmpar.runner.cli import add_debug_arg, load_config, user_errors
from mmpar.runner.config_checks import check_train_config

BENCH_DIR = Path(__file__).resolve().parent / "bench"
ROOT = BENCH_DIR.parents[1]


def is_section(path: Path) -> bool:
    """Whether ``tools/bench/<name>.py`` is a section: a public name and a top-level ``run``."""
    return not path.stem.startswith("_") and "\ndef run(" in path.read_text(encoding="utf-8")


def sections() -> list:
    return sorted(p.stem for p in BENCH_DIR.glob("*.py") if is_section(p))


def load(name: str) -> ModuleType:
    path = BENCH_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"mmpar_bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_baseline(rev: str) -> None:
    """Check that ``git archive rev`` can run here: git, a checkout, the revision.

    Args:
        rev: The ``--baseline`` revision.

    Raises:
        ValueError: What is missing, in one sentence.
    """
    if shutil.which("git") is None:
        raise ValueError("--baseline needs git, and git is not on PATH")
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True
    )
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != ROOT:
        said = (top.stderr.strip().splitlines() or [""])[0]
        raise ValueError(
            f"--baseline needs a git checkout, and {ROOT} is not one"
            + (f" (git: {said})" if said else "")
            + "; run it from a clone of the repository, not a source tarball"
        )
    verify = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
    )
    if verify.returncode != 0:
        raise ValueError(f"--baseline {rev}: no such revision in {ROOT}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "sections", nargs="*", help=f"sections to run (default: all of {sections()})"
    )
    parser.add_argument("--quick", action="store_true", help="few repeats and small sizes")
    parser.add_argument("--config", help="a training config: runs the 'train' section on it")
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="a git revision to measure side by side with this tree (sections that support it)",
    )
    add_debug_arg(parser)
    args = parser.parse_args(argv)
    if args.config:
        cfg = load_config(args.config, debug=args.debug)
        with user_errors(args.debug, hint=f"fix it in {args.config}"):
            check_train_config(cfg, splits=("train",))
    chosen = args.sections or (["train"] if args.config else sections())
    unknown = [s for s in chosen if s not in sections()]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; available: {sections()}")
    if args.baseline:
        with user_errors(args.debug):
            check_baseline(args.baseline)
    print(
        f"<!-- torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}, "
        f"command: python tools/benchmark.py {' '.join(sys.argv[1:])} -->\n"
    )
    for name in chosen:
        run = load(name).run
        params = inspect.signature(run).parameters
        kwargs = {"config": args.config} if args.config and "config" in params else {}
        if args.baseline and "baseline" in params:
            kwargs["baseline"] = args.baseline
        print(run(quick=args.quick, **kwargs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
