"""The command line of ``tools/zoo.py``: its options, and a user error's one line."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Optional, Sequence

from mmpar_zoo.codebase import CODEBASES
from mmpar_zoo.config import DETECTIONS, RCNN_ROIS, RPN_PROPOSALS


def parse_args(
    argv: Optional[Sequence[str]] = None, description: Optional[str] = None
) -> argparse.Namespace:
    """The tool's options.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).
        description: The help's text (the tool's docstring).

    Returns:
        The parsed options.
    """
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--codebase",
        choices=tuple(CODEBASES),
        default="mmdet",
        help="whose model zoo (default mmdet); mmpose, mmcls and mmtrack only build",
    )
    parser.add_argument(
        "--configs-root",
        help="folder of model directories (default: the installed codebase's .mim/configs)",
    )
    parser.add_argument(
        "--dirs",
        help="comma-separated model directories to run, or folders of them (textdet selects "
        "textdet/dbnet, textdet/panet, ...; default: all)",
    )
    parser.add_argument(
        "--configs",
        help="comma-separated config paths relative to the configs' root: exactly these run "
        "(with --dirs, --filter, --one-per-dir: those of them these select)",
    )
    parser.add_argument(
        "--one-per-dir",
        action="store_true",
        help="only the first config (sorted by name) of each model directory",
    )
    parser.add_argument("--filter", help="only configs whose relative path contains this")
    parser.add_argument(
        "--jobs", type=_positive_int, default=1, help="configs run at once (default 1)"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=300.0,
        help="seconds one config may take before it is stopped and fails (default 300)",
    )
    parser.add_argument("--json", metavar="OUT", help="write every config's result to OUT")
    parser.add_argument(
        "--ops",
        choices=("auto", "mmcv", "mmpar"),
        default="auto",
        help="whose ops serve mmcv.ops (mmpar.compat.patch_mmcv): auto (mmcv's own where "
        "they load, else mmpar's), mmcv, mmpar",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed of every config")
    parser.add_argument(
        "--config-rois",
        action="store_true",
        help=f"keep the configs' numbers of sampled RoIs, proposals and detections (default: "
        f"at most {RCNN_ROIS} RoIs per training image and {DETECTIONS} detections per test "
        f"image for R-CNN heads, {RPN_PROPOSALS} proposals per image)",
    )
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="only build each model (no training step, no test batch)",
    )
    parser.add_argument(
        "--pythonpath",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder put first on the import path of the tool and its children (repeatable): "
        "packages installed there serve the codebase, e.g. the mmcv <= 1.7.0 that mmaction2 "
        "and mmpose ask for (python -m mmpar.compat.install --mmcv 1.7.0 --target DIR ...)",
    )
    parser.add_argument(
        "--no-fixes",
        action="store_true",
        help="do not mend the codebases' own bugs that stop a run without a GPU "
        "(tools/zoo/fixes.py says which, and why)",
    )
    parser.add_argument(
        "--by-dir",
        action="store_true",
        help="also print the results by model directory, as a markdown table",
    )
    parser.add_argument(
        "--from-json",
        metavar="FILE",
        help="run nothing: print the summary (and --by-dir table) of an earlier --json file",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on a user error (bad option, the codebase's models not importing) show the full "
        "traceback instead of one 'error: ...' line",
    )
    return parser.parse_args(argv)


def fail(message: str) -> NoReturn:
    """Print ``error: message`` (on one line) to stderr and exit with status 2.

    As ``mmpar.runner.cli.fail`` does; here without importing mmpar (and torch), so
    that a bad option is refused at once.

    Args:
        message: What is wrong, and where possible how to mend it.

    Raises:
        SystemExit: Always, with status 2.
    """
    print(f"error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    raise SystemExit(2)


# argparse names a type's function in its message for text that is no number
# ("invalid _positive_int value: 'x'"): the names are part of the tool's output.


def _positive_int(text: str) -> int:
    """An option's integer, at least 1 (argparse's ``type``)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    """An option's number, more than 0 (argparse's ``type``)."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value
