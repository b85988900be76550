"""What tools/train.py and tools/test.py share: reading the config, the launcher, the work dir."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Mapping, NoReturn, Optional, Sequence

from mmpar.config import Config, DictAction
from mmpar.dist import LAUNCHERS, init_dist

__all__ = [
    "add_launcher_args",
    "add_cfg_options",
    "load_config",
    "start_launcher",
    "resolve_work_dir",
    "fail",
]


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` to stderr and exit with ``code``."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def add_launcher_args(parser: argparse.ArgumentParser) -> None:
    """``--launcher none|pytorch|slurm|mpi`` and ``--local_rank``/``--local-rank`` (old torch.distributed.launch)."""
    parser.add_argument(
        "--launcher",
        choices=("none",) + LAUNCHERS,
        default="none",
        help="how the processes were started (none: a single process)",
    )
    parser.add_argument(
        "--local_rank",
        "--local-rank",
        dest="local_rank",
        type=int,
        default=None,
        help="set by the legacy torch.distributed.launch; LOCAL_RANK is used otherwise",
    )


def add_cfg_options(parser: argparse.ArgumentParser) -> None:
    """``--cfg-options key=value ...`` (dotted keys, Python literals; see mmpar.config.dict_action)."""
    parser.add_argument(
        "--cfg-options",
        nargs="+",
        action=DictAction,
        default={},
        metavar="KEY=VALUE",
        help="override config entries, e.g. runner.max_epochs=2 data.samples_per_gpu=4",
    )


def load_config(path: str, options: Optional[Mapping[str, Any]] = None) -> Config:
    """Read the config file and apply ``--cfg-options``; any problem exits with a clear message.

    Python configs run as code: only use configs you trust. JSON configs are data only.
    """
    try:
        cfg = Config.fromfile(path)
    except (SyntaxError, FileNotFoundError) as exc:
        fail(f"cannot read config {path}: {exc}")
    except Exception as exc:  # the config's own code failed; the message names its file and line
        fail(f"cannot read config {path}: {type(exc).__name__}: {exc}")
    if options:
        try:
            cfg.merge_from_dict(options)
        except (TypeError, ValueError) as exc:
            fail(f"--cfg-options: {exc}")
    return cfg


def start_launcher(launcher: str, local_rank: Optional[int], cfg: Config) -> bool:
    """Join the process group for ``launcher`` (nothing for ``"none"``).

    ``--local_rank`` is exported as ``LOCAL_RANK`` when the environment has none.
    ``cfg.dist_params`` goes to :func:`mmpar.dist.init_dist`: ``backend``,
    and ``timeout`` (seconds) after which a collective waiting for a dead or
    hung peer fails instead of blocking.

    Returns:
        Whether the run is distributed.
    """
    if local_rank is not None and "LOCAL_RANK" not in os.environ:
        os.environ["LOCAL_RANK"] = str(local_rank)
    if launcher == "none":
        return False
    params = dict(cfg.get("dist_params") or {})
    try:
        init_dist(launcher, backend=params.pop("backend", None), **params)
    except ValueError as exc:
        fail(f"--launcher {launcher}: {exc}")
    return True


def resolve_work_dir(work_dir: Optional[str], cfg: Config, config_path: str) -> Path:
    """``--work-dir``, else ``cfg.work_dir``, else ``./work_dirs/<config name>``; stored in ``cfg.work_dir``."""
    chosen = work_dir or cfg.get("work_dir") or str(Path("work_dirs") / Path(config_path).stem)
    cfg["work_dir"] = str(chosen)
    return Path(chosen)


def check_choices(values: Sequence[str], allowed: Sequence[str], option: str) -> None:
    """Exit with a clear message when a value is not among ``allowed``."""
    bad = [v for v in values if v not in allowed]
    if bad:
        fail(f"{option}: unsupported {bad}; expected among {list(allowed)}")
