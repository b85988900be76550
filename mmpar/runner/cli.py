"""What the tools share: reading the config, the launcher, the work dir, and one way to fail.

A user error (a bad config, option, path or checkpoint) ends a tool with one line
on stderr, ``error: ...``, and exit status 2; ``--debug`` shows the traceback
instead. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping, NoReturn, Optional, Sequence, Tuple, Type

import torch.distributed as dist

from mmpar.config import Config, DictAction, apply_custom_imports
from mmpar.config.option_keys import ADD_PREFIX, check_option_keys, split_added
from mmpar.dist import LAUNCHERS, init_dist, is_distributed
from mmpar.dist.init import DEFAULT_TIMEOUT
from mmpar.runner.tool_keys import TOOL_KEYS, registered_type_accepts

__all__ = [
    "USER_ERRORS",
    "add_debug_arg",
    "add_launcher_args",
    "add_cfg_options",
    "check_choices",
    "dist_timeout",
    "error_text",
    "fail",
    "group_failures",
    "is_group_failure",
    "load_config",
    "start_launcher",
    "resolve_work_dir",
    "user_errors",
]

#: Exceptions that the code the tools call raises for bad input, not for bugs.
USER_ERRORS: Tuple[Type[BaseException], ...] = (OSError, ValueError, TypeError, KeyError)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` (on one line) to stderr and exit with ``code``.

    In a process group, this process leaves the group first, without waiting for
    the others (which may be failing the same way), so that no rank hangs on it.
    """
    print(f"error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    if is_distributed():
        try:
            dist.destroy_process_group()
        except Exception:  # leaving is best effort: the exit below matters
            pass
    raise SystemExit(code)


def error_text(exc: BaseException) -> str:
    """The message of ``exc`` (a KeyError's without the quotes ``str`` adds)."""
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        return str(exc.args[0])
    return str(exc) or type(exc).__name__


@contextlib.contextmanager
def user_errors(
    debug: bool,
    prefix: str = "",
    hint: str = "",
    errors: Tuple[Type[BaseException], ...] = USER_ERRORS,
) -> Iterator[None]:
    """Turn ``errors`` raised inside the block into :func:`fail`'s one line.

    Args:
        debug: Re-raise instead (``--debug``): the full traceback.
        prefix: What was being read, e.g. ``"data.train"``; it starts the message.
        hint: What to do about it; it ends the message.
        errors: The exception types that mean bad input here.
    """
    try:
        yield
    except errors as exc:
        if debug:
            raise
        message = f"{prefix}: {error_text(exc)}" if prefix else error_text(exc)
        fail(f"{message}; {hint}" if hint else message)


def add_debug_arg(parser: argparse.ArgumentParser) -> None:
    """``--debug``: show the full traceback of a user error instead of one line."""
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on a user error (bad config, option, path, checkpoint) show the full traceback "
        "instead of one 'error: ...' line",
    )


def add_launcher_args(parser: argparse.ArgumentParser) -> None:
    """``--launcher none|pytorch|slurm|mpi``, and ``--local_rank``/``--local-rank``
    (set by the legacy torch.distributed.launch)."""
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
    """``--cfg-options key=value ...`` (dotted keys, Python literals; see mmpar.config.dict_action).

    ``+key=value`` adds a key that the config lacks and the tools do not read.
    """
    parser.add_argument(
        "--cfg-options",
        nargs="+",
        action=DictAction,
        default={},
        metavar="KEY=VALUE",
        help="override config entries, e.g. runner.max_epochs=2 data.samples_per_gpu=4; "
        "a key that is neither in the config nor read by the tools is refused: "
        f"write {ADD_PREFIX}KEY=VALUE to add one anyway. Values are Python literals, never code",
    )


def load_config(
    path: str, options: Optional[Mapping[str, Any]] = None, debug: bool = False
) -> Config:
    """Read the config file and apply ``--cfg-options``; any problem exits with a clear message.

    The modules of ``custom_imports`` are imported (after the options are applied).
    An option key must be in the config, among the keys the tools read
    (:data:`mmpar.runner.tool_keys.TOOL_KEYS`) or a parameter of the class its dict
    builds; ``+key=value`` adds any key. Python configs run as code: only use configs
    you trust. JSON configs are data only.

    Args:
        path: The config file.
        options: ``--cfg-options``, dotted key -> value.
        debug: Re-raise errors (full traceback) instead of exiting with one line.
    """
    try:
        cfg = Config.fromfile(path, import_custom_modules=False)
    except Exception as exc:  # SyntaxError, FileNotFoundError, or the config's own code failed
        if debug:
            raise
        known = isinstance(exc, (SyntaxError, FileNotFoundError))
        fail(f"cannot read config {path}: {exc if known else f'{type(exc).__name__}: {exc}'}")
    original = cfg.to_dict()
    if options:
        with user_errors(debug, "--cfg-options", errors=(TypeError, ValueError)):
            plain, added = split_added(options)
            cfg.merge_from_dict(plain)
    # After the options (they may name more modules), before their keys are checked
    # (a parameter of a class that a custom module registers is a known key).
    with user_errors(debug, errors=(ImportError, TypeError, ValueError)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            apply_custom_imports(cfg.get("custom_imports"))
    for warning in caught:  # one line each, like the errors
        print(f"warning: {warning.message}", file=sys.stderr, flush=True)
    if options:
        with user_errors(debug, "--cfg-options", errors=(TypeError, ValueError)):
            check_option_keys(
                original, cfg.to_dict(), plain, TOOL_KEYS, added, registered_type_accepts
            )
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
    with user_errors(False, f"--launcher {launcher}", errors=(ValueError,)):
        try:
            init_dist(launcher, backend=params.pop("backend", None), **params)
        except dist.DistError as exc:  # not the user's doing: a peer never came
            fail(error_text(exc), code=1)
    return True


#: How torch words a failure of the process group itself (a dead, hung or unreachable
#: peer) in a plain RuntimeError: gloo's and nccl's messages mostly name their source;
#: gloo's "Application timeout caused pair closure" (a collective that timed out on a
#: connection gloo had already closed) does not.
_GROUP_FAILURE = re.compile(
    r"gloo|NCCL|c10d|ProcessGroup|Timed out waiting|Connection (closed|reset|refused)"
    r"|Broken pipe|pair closure"
)


def is_group_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says that the process group failed (a peer died, hung or went away)."""
    if isinstance(exc, dist.DistError):
        return True
    return isinstance(exc, RuntimeError) and bool(_GROUP_FAILURE.search(str(exc)))


@contextlib.contextmanager
def group_failures(debug: bool, timeout: Any) -> Iterator[None]:
    """End the process with one ``error:`` line and status 1 when the process group fails.

    A peer that died is noticed at once (its sockets close); one that hangs after
    ``timeout`` seconds (``dist_params.timeout``), when a collective gives up.
    Either way the rank's work is lost since the last checkpoint and torchrun
    (``--max-restarts``) or the user restarts it with ``--auto-resume``.

    Args:
        debug: Re-raise instead (``--debug``): the full traceback.
        timeout: The process-group timeout, for the message.
    """
    try:
        yield
    except Exception as exc:
        if debug or not is_distributed() or not is_group_failure(exc):
            raise
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        first = re.sub(r"^\[[^\]]*\]\s*", "", first.strip())  # gloo's "[file.cc:129] " prefix
        print(
            f"error: rank {dist.get_rank()} of {dist.get_world_size()}: the process group failed "
            f"(a peer died, or hung past dist_params.timeout={timeout} s): {first}",
            file=sys.stderr,
            flush=True,
        )
        # Not destroy_process_group(), nor the interpreter's teardown: both may wait on the
        # lost peer or abort against DDP's live reducer. The logs are flushed first.
        logging.shutdown()
        sys.stdout.flush()
        os._exit(1)


def dist_timeout(cfg: Config) -> float:
    """Seconds a collective waits for a peer: ``dist_params.timeout``, else init_dist's default."""
    timeout = (cfg.get("dist_params") or {}).get("timeout")
    return DEFAULT_TIMEOUT.total_seconds() if timeout is None else timeout


def resolve_work_dir(work_dir: Optional[str], cfg: Config, config_path: str) -> Path:
    """``--work-dir``, else ``cfg.work_dir``, else ``./work_dirs/<config name>``.

    The choice is stored in ``cfg.work_dir``.
    """
    chosen = work_dir or cfg.get("work_dir") or str(Path("work_dirs") / Path(config_path).stem)
    cfg["work_dir"] = str(chosen)
    return Path(chosen)


def check_choices(values: Sequence[str], allowed: Sequence[str], option: str) -> None:
    """Exit with a clear message when a value is not among ``allowed``."""
    bad = [v for v in values if v not in allowed]
    if bad:
        fail(f"{option}: unsupported {bad}; expected among {list(allowed)}")
