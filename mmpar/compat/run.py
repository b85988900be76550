"""Run a script with mmcv.parallel pointing at mmpar: ``python -m mmpar.compat.run SCRIPT ...``.

It behaves like ``python SCRIPT ARGS...`` after :func:`mmpar.compat.patch_mmcv`:
``sys.argv`` is ``[SCRIPT, ARGS...]``, the script's folder comes first on
``sys.path``, it runs as ``__main__`` and its exit status passes through. Under
torchrun::

    torchrun --nproc_per_node=2 -m mmpar.compat.run tools/train.py CONFIG --launcher pytorch

and under the legacy launcher, which mmdet 2.x's ``tools/dist_train.sh`` uses::

    python -m torch.distributed.launch --nproc_per_node=2 -m mmpar.compat.run \\
        tools/train.py CONFIG --launcher pytorch

Processes that SCRIPT starts with ``spawn`` or ``forkserver`` (mmrotate's
mAP evaluation pool, spawned DataLoader workers) are patched too: where
multiprocessing would re-run SCRIPT's top level in them, they run this module,
which patches and then runs SCRIPT's top level (see :func:`patch_spawned_children`).

``--cuda-on-cpu`` (before SCRIPT) lets a GPU-only script run on a process without a
GPU: its ``.cuda()`` calls and CUDA ``device`` arguments mean the CPU (see
:mod:`mmpar.compat.cuda_as_cpu`); on a machine with a GPU it changes nothing.

``--ops=auto|mmcv|mmpar`` (before SCRIPT) chooses whose ``mmcv.ops`` serve the
script, as ``patch_mmcv(ops=...)`` does: by default mmcv-full's own where its
compiled ops load, else mmpar's. The choice reaches child processes through
``$MMPAR_MMCV_OPS``.

A ``--local-rank=N`` or ``--local_rank=N`` (or ``--local-rank N``) before SCRIPT
is the launcher's: it is exported as ``LOCAL_RANK`` and SCRIPT gets the
arguments torchrun would give it, without it. See :func:`split_local_rank` for
why that is what scripts written for either launcher need.
"""

from __future__ import annotations

import multiprocessing.spawn
import os
import runpy
import sys
from typing import Any, Dict, List, NoReturn, Optional, Tuple

from mmpar.compat.cuda_as_cpu import ENV as CUDA_ON_CPU_ENV
from mmpar.compat.cuda_as_cpu import enable_cuda_as_cpu
from mmpar.compat.mmcv_ops import MODES, resolve_mode
from mmpar.compat.patch import patch_mmcv

__all__ = [
    "SCRIPT_VAR",
    "main",
    "patch_spawned_children",
    "split_cuda_on_cpu",
    "split_local_rank",
    "split_ops",
]

#: SCRIPT's absolute path, for the spawned children that run it again.
SCRIPT_VAR = "MMPAR_COMPAT_SCRIPT"
#: This module's import name (its ``__name__`` is ``__main__`` under ``python -m``).
_MODULE = __spec__.name if __spec__ is not None else __name__

_USAGE = (
    "usage: python -m mmpar.compat.run [--ops={auto,mmcv,mmpar}] [--cuda-on-cpu] [--local-rank=N]"
    " SCRIPT [ARGS...]"
)
_LOCAL_RANK_FLAGS = ("--local-rank", "--local_rank")


def split_local_rank(argv: List[str]) -> Tuple[Optional[int], List[str]]:
    """Take the launcher's local-rank argument off the front of ``argv``.

    ``torch.distributed.launch`` puts ``--local-rank=N`` (torch >= 2.0) or
    ``--local_rank=N`` (torch 1.x) before the script's own arguments; here that
    is before SCRIPT. It is removed rather than handed on, so that SCRIPT sees
    exactly what torchrun gives it (torchrun passes no local rank, only the
    ``LOCAL_RANK`` variable), for these reasons:

    - Scripts forked from mmdet 2.x accept only ``--local_rank`` (torch 2.x's
      ``--local-rank`` is what stops them, mmdet #10180), and use it only as a
      fallback: ``if 'LOCAL_RANK' not in os.environ: os.environ['LOCAL_RANK']
      = str(args.local_rank)``; mmcv's ``init_dist`` then reads ``RANK`` and
      ``LOCAL_RANK`` from the environment. Without the argument their default
      (0) is never used, because ``LOCAL_RANK`` is set.
    - Scripts written for torchrun accept neither spelling; passing one on,
      in any spelling, would stop them with ``unrecognized arguments``.
    - Scripts that accept ``--local-rank`` only are served the same way.

    A script that reads ``args.local_rank`` for its device, ignoring
    ``LOCAL_RANK``, gets 0 here as it does under torchrun; it needs the usual
    one-line fix (``int(os.environ['LOCAL_RANK'])``). Arguments after SCRIPT are
    the script's and are never touched.

    Args:
        argv: The arguments of ``python -m mmpar.compat.run``.

    Returns:
        ``(local_rank, rest)``: the local rank (``None`` when absent) and the
        arguments from SCRIPT on.

    Raises:
        ValueError: the local rank is missing or not an integer >= 0.
    """
    rest = list(argv)
    if not rest:
        return None, rest
    head = rest[0]
    flag, sep, value = head.partition("=")
    if flag not in _LOCAL_RANK_FLAGS:
        return None, rest
    if sep:
        del rest[0]
    else:
        if len(rest) < 2:
            raise ValueError(f"{flag}: expected an integer after it, got nothing")
        value = rest[1]
        del rest[:2]
    if not value.isdigit():
        raise ValueError(f"{flag}: expected an integer >= 0, got {value!r}")
    return int(value), rest


def split_ops(argv: List[str]) -> Tuple[Optional[str], List[str]]:
    """Take ``--ops=MODE`` or ``--ops MODE`` off the front of ``argv``.

    Args:
        argv: The arguments of ``python -m mmpar.compat.run``.

    Returns:
        ``(mode, rest)``: the mode as given (``None`` when absent) and the rest.

    Raises:
        ValueError: ``--ops`` without a value.
    """
    rest = list(argv)
    if not rest or rest[0].partition("=")[0] != "--ops":
        return None, rest
    flag, sep, value = rest.pop(0).partition("=")
    if not sep:
        if not rest:
            raise ValueError(f"--ops: expected one of {', '.join(MODES)}, got nothing")
        value = rest.pop(0)
    return value, rest


def split_cuda_on_cpu(argv: List[str]) -> Tuple[bool, List[str]]:
    """Take ``--cuda-on-cpu`` off the front of ``argv``.

    Args:
        argv: The arguments of ``python -m mmpar.compat.run``.

    Returns:
        ``(given, rest)``: whether the flag was there, and the rest.
    """
    rest = list(argv)
    if rest and rest[0] == "--cuda-on-cpu":
        return True, rest[1:]
    return False, rest


def _split_options(argv: List[str]) -> Tuple[Optional[str], bool, Optional[int], List[str]]:
    """``--ops``, ``--cuda-on-cpu`` and the launcher's local rank, in any order, then SCRIPT."""
    ops, cuda_on_cpu, local_rank, rest = None, False, None, list(argv)
    while rest:
        mode, rest = split_ops(rest)
        flag, rest = split_cuda_on_cpu(rest)
        rank, rest = split_local_rank(rest)
        if mode is None and not flag and rank is None:
            break
        ops = mode if mode is not None else ops
        cuda_on_cpu = cuda_on_cpu or flag
        local_rank = rank if rank is not None else local_rank
    return ops, cuda_on_cpu, local_rank, rest


def main(argv: Optional[List[str]] = None) -> None:
    """Patch mmcv, then run ``argv[0]`` as the main script with ``argv[1:]`` as its arguments.

    A leading ``--local-rank``/``--local_rank`` is the launcher's: see
    :func:`split_local_rank`.

    Raises:
        SystemExit: 2 without a script, with a missing one, with a malformed
            local rank or one that contradicts ``LOCAL_RANK``; otherwise the
            script's own.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        # the legacy launcher puts --local-rank before the options given after the module
        ops, cuda_on_cpu, local_rank, argv = _split_options(argv)
        ops = resolve_mode(ops, field="--ops")
    except ValueError as err:
        _fail(str(err))
    if local_rank is not None:
        known = os.environ.get("LOCAL_RANK")
        if known not in (None, "", str(local_rank)):
            _fail(f"--local-rank={local_rank} contradicts LOCAL_RANK={known} in the environment")
        os.environ["LOCAL_RANK"] = str(local_rank)
    if not argv or argv[0] in ("-h", "--help"):
        print(
            _USAGE + "\n\n" + (__doc__ or "").strip(), file=sys.stderr if not argv else sys.stdout
        )
        raise SystemExit(2 if not argv else 0)
    script = argv[0]
    if not os.path.isfile(script):
        _fail(f"script {script!r} is not a file")
    try:
        patch_mmcv(ops=ops)
    except ImportError as err:
        _fail(str(err), usage=False)
    if cuda_on_cpu:
        enable_cuda_as_cpu()
    sys.argv = [script, *argv[1:]]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` puts it
    patch_spawned_children(script)
    runpy.run_path(script, run_name="__main__")


def patch_spawned_children(script: str) -> None:
    """Make the ``spawn``/``forkserver`` children of ``script`` patch mmcv before its top level.

    multiprocessing prepares such a child by running the parent's main script
    again, as ``__mp_main__``, so that objects pickled from ``__main__`` can be
    found: here that is SCRIPT, whose top level (``from mmcv.parallel import
    ...``, mmdet and mmrotate imports of ``mmcv.ops``) would then run unpatched,
    and fail where mmcv's compiled ops do not load. Instead the child runs this
    module as ``__mp_main__``; it calls :func:`~mmpar.compat.patch_mmcv` (with
    the parent's ``$MMPAR_MMCV_OPS``) and runs SCRIPT's top level, whose names
    become the child's ``__main__``. SCRIPT's path travels in ``$MMPAR_COMPAT_SCRIPT``.
    Processes whose main script is another one are prepared as before.

    Args:
        script: The path of the script that runs as ``__main__``.
    """
    path = os.path.normpath(os.path.abspath(script))
    os.environ[SCRIPT_VAR] = path
    original = multiprocessing.spawn.get_preparation_data
    if getattr(original, "__mmpar_script__", None) is not None:
        original = original.__wrapped__  # type: ignore[attr-defined]

    def get_preparation_data(name: str) -> Dict[str, Any]:
        data = original(name)
        if data.get("init_main_from_path") == path:
            del data["init_main_from_path"]
            data["init_main_from_name"] = _MODULE
        return data

    get_preparation_data.__wrapped__ = original  # type: ignore[attr-defined]
    get_preparation_data.__mmpar_script__ = path  # type: ignore[attr-defined]
    multiprocessing.spawn.get_preparation_data = get_preparation_data


def _run_script_in_spawned_child() -> None:
    """The child's side of :func:`patch_spawned_children`: patch, then SCRIPT as ``__mp_main__``."""
    script = os.environ.get(SCRIPT_VAR)
    if not script:
        raise RuntimeError(
            f"{_MODULE} runs as __mp_main__ only in children of a script it ran, but "
            f"${SCRIPT_VAR} is not set"
        )
    patch_mmcv()
    if os.environ.get(CUDA_ON_CPU_ENV) == "1":
        enable_cuda_as_cpu()
    globals().update(runpy.run_path(script, run_name="__mp_main__"))


def _fail(message: str, usage: bool = True) -> NoReturn:
    """Print the usage (when ``usage``) and ``error: message`` to stderr; exit with status 2."""
    print(f"{_USAGE}\nerror: {message}" if usage else f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


if __name__ == "__main__":
    main()
elif __name__ == "__mp_main__":
    _run_script_in_spawned_child()
