"""``python -m mmpar.compat.install``: the command line, and the steps it prints.

See :mod:`mmpar.compat.install` for what it does. Exit status: 0 done (or nothing to
do; a module that then fails to import is a ``warning:`` line), 2 a one-line
``error:`` (before anything changed, or a failed build or pip call), 1 installed,
but ``patch_mmcv()`` fails in a fresh interpreter.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from mmpar.compat.install.errors import InstallError
from mmpar.compat.install.pip import environ_with

__all__ = ["main"]

PREFIX = "mmpar install:"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmpar.compat.install",
        description=(
            "Install mmcv 1.x without its compiled ops (mmpar supplies mmcv.ops) and the "
            "mmcv-1.x codebases named, keeping the installed torch."
        ),
    )
    parser.add_argument(
        "codebases",
        nargs="*",
        metavar="CODEBASE[==VERSION]",
        help="mmdet, mmseg, mmrotate, mmocr, mmedit, mmaction2, mmpose, mmcls, mmtrack, "
        "mmdet3d (default versions: their last mmcv-1.x releases; mmdet3d==0.17.1 and the "
        "other 0.17.x/0.18.x releases come with the mmcv, mmdet and mmseg of their gates)",
    )
    parser.add_argument(
        "--mmcv",
        metavar="VERSION",
        help="an mmcv release from 1.3.0 to 1.7.2 (default: the newest the codebases accept)",
    )
    parser.add_argument(
        "--target",
        metavar="DIR",
        help="install into DIR (pip --target) instead of this Python's site-packages, e.g. "
        "a second mmcv beside the main one; put DIR first on PYTHONPATH to use it",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would be installed and change nothing (reads no index)",
    )
    return parser


def say(line: str) -> None:
    print(f"{PREFIX} {line}", flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if importlib.util.find_spec("packaging") is None:
            raise InstallError(
                "this command reads requirements with the 'packaging' package: "
                f"run `{sys.executable} -m pip install packaging` first"
            )
        from mmpar.compat.install.steps import Installer

        installer = Installer(
            codebases=args.codebases,
            mmcv=args.mmcv,
            target=None if args.target is None else Path(args.target).resolve(),
            say=say,
        )
        if args.dry_run:
            installer.dry_run()
            return 0
        installed = installer.install()
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    if not installed:
        return 0
    return _check_imports(installer.modules(), installer.target)


#: Imports each module named in argv after patch_mmcv(); one tab-separated line each.
_IMPORT_CHECK = """
import importlib, sys
from mmpar.compat import patch_mmcv
patch_mmcv()
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        print("mmpar-import", name, f"{type(exc).__name__}: {exc}".splitlines()[0], sep="\\t")
    else:
        print("mmpar-import", name, "ok", sep="\\t")
"""


def _check_imports(modules: List[str], target: Optional[Path]) -> int:
    """Import each installed module in a fresh interpreter, after ``patch_mmcv()``.

    A module that does not import is a warning, not a failure: the install is done,
    and the cause is the module's (an op mmpar does not supply, a numpy it predates).
    """
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_CHECK, *modules],
        capture_output=True,
        text=True,
        env=environ_with(target),
    )
    lines = [line.split("\t") for line in proc.stdout.splitlines()]
    results = {line[1]: line[2] for line in lines if len(line) == 3 and line[0] == "mmpar-import"}
    if proc.returncode != 0 or len(results) != len(modules):
        last = [line for line in proc.stderr.splitlines() if line.strip()][-1:] or ["?"]
        print(f"error: installed, but patch_mmcv() then fails: {last[0].strip()}", file=sys.stderr)
        return 1
    for name, result in results.items():
        if result != "ok":
            print(f"warning: `import {name}` after patch_mmcv() fails: {result}", file=sys.stderr)
    fine = [name for name, result in results.items() if result == "ok"]
    secs = time.perf_counter() - start
    say(f"checked: {', '.join(fine) or 'none'} import after patch_mmcv() ({secs:.1f} s)")
    return 0
