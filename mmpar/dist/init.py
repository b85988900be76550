"""Join the default process group from a launcher's environment (torchrun, SLURM, MPI).

One GPU per process is checked before nccl is touched; SLURM node lists are
parsed in :mod:`mmpar.dist.slurm`.
"""

from __future__ import annotations

import datetime
import os
import re
import warnings
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from mmpar.dist.slurm import slurm_first_host
from mmpar.utils.checks import is_int, is_number

__all__ = ["LAUNCHERS", "attempt_store_prefix", "check_gpu_per_process", "init_dist"]

#: Launchers understood by :func:`init_dist`.
LAUNCHERS: Tuple[str, ...] = ("pytorch", "slurm", "mpi")

#: The process-group timeout when none is given.
DEFAULT_TIMEOUT = datetime.timedelta(seconds=1800)
_DEFAULT_ADDR = "127.0.0.1"
_DEFAULT_PORT = 29500


# --------------------------------------------------------------------------- #
# Starting a process group
# --------------------------------------------------------------------------- #
def init_dist(
    launcher: str,
    backend: Optional[str] = None,
    timeout: Union[float, datetime.timedelta] = DEFAULT_TIMEOUT,
    **kwargs: Any,
) -> None:
    """Join the default process group from a launcher's environment.

    ``"pytorch"`` (torchrun) reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR`` and ``MASTER_PORT``. ``"slurm"`` reads ``SLURM_PROCID``,
    ``SLURM_NTASKS``, ``SLURM_NODELIST`` and ``SLURM_LOCALID`` (when absent:
    ``SLURM_PROCID % cuda_device_count``, 0 without CUDA); the master is the
    first host of the node list. ``"mpi"`` reads OpenMPI's
    ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE`` and
    ``OMPI_COMM_WORLD_LOCAL_RANK``, and ``MASTER_ADDR`` (default
    ``127.0.0.1``). For slurm and mpi the port is the ``port`` keyword if
    given, else ``MASTER_PORT``, else 29500; both then export ``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` so
    that the code that follows sees a torchrun-like environment.

    With an nccl backend the current device becomes ``local_rank % device_count``,
    after :func:`check_gpu_per_process` has made sure that no two processes of
    the node would share one GPU (nccl refuses that, deep inside its first
    collective). Other backends (gloo) leave CUDA alone: the run is on the CPU.

    Args:
        launcher: One of :data:`LAUNCHERS`.
        backend: ``torch.distributed`` backend; default ``"nccl"`` when CUDA
            is available, else ``"gloo"``.
        timeout: Seconds (or a timedelta) a collective, including the initial
            rendezvous, may wait for peers; a missing peer raises after it
            instead of hanging.
        **kwargs: ``port`` (slurm, mpi); anything else goes to
            ``torch.distributed.init_process_group``.

    Raises:
        ValueError: unknown launcher, missing or malformed environment
            variables, a non-positive timeout, a bad port, more nccl processes
            on this node than visible GPUs, or ``kwargs``
            holding ``init_method``/``rank``/``world_size``/``store``.
        TypeError: ``backend`` is not a string or ``timeout`` not a number or
            timedelta.
        RuntimeError: ``torch.distributed`` is unavailable, or a default
            process group already exists (call
            ``torch.distributed.destroy_process_group()`` first).
        DistError: the group did not form within ``timeout`` (a
            ``RuntimeError``; ``DistStoreError``, ``DistNetworkError`` or
            ``DistBackendError`` as torch raised it); the message names this
            rank, the address it waited at and, where torch says, the rank it
            waited for.
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher: expected one of {list(LAUNCHERS)}, got {launcher!r}")
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"backend: expected a str or None, got {type(backend).__name__}")
    timeout = _as_timedelta(timeout)
    if not dist.is_available():
        raise RuntimeError("init_dist: torch.distributed is not available in this build of torch")
    if dist.is_initialized():
        raise RuntimeError(
            "init_dist: a default process group already exists "
            f"(rank {dist.get_rank()} of {dist.get_world_size()}); destroy it first"
        )
    clashes = sorted(
        set(kwargs) & {"backend", "init_method", "rank", "store", "timeout", "world_size"}
    )
    if clashes:
        raise ValueError(f"kwargs: {clashes} are set by init_dist itself and cannot be passed")
    port = kwargs.pop("port", None)
    if launcher == "pytorch":
        if port is not None:
            raise ValueError(
                "port: only for the 'slurm' and 'mpi' launchers; torchrun sets MASTER_PORT"
            )
        rank, world_size, local_rank = _torchrun_env(os.environ)
    else:
        read = _slurm_env if launcher == "slurm" else _mpi_env
        rank, world_size, local_rank, addr = read(os.environ)
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_RANK=str(local_rank),
            MASTER_ADDR=addr,
            MASTER_PORT=str(_master_port(port, os.environ)),
        )
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if "nccl" in backend and torch.cuda.is_available():
        count = torch.cuda.device_count()
        check_gpu_per_process(launcher, local_rank, _local_world_size(launcher, os.environ), count)
        torch.cuda.set_device(local_rank % count)
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    prefix = attempt_store_prefix(os.environ) if launcher == "pytorch" else None
    try:
        if prefix is None:
            dist.init_process_group(
                backend,
                init_method="env://",
                rank=rank,
                world_size=world_size,
                timeout=timeout,
                **kwargs,
            )
        else:
            # The agent's store outlives the attempts: this attempt's keys go under a prefix
            # of their own, so that no rank reads an address of the previous attempt.
            store = dist.TCPStore(addr, port, world_size, is_master=False, timeout=timeout)
            dist.init_process_group(
                backend,
                store=dist.PrefixStore(prefix, store),
                rank=rank,
                world_size=world_size,
                timeout=timeout,
                **kwargs,
            )
    except dist.DistError as exc:
        raise type(exc)(
            _not_formed(exc, rank, world_size, timeout, f"{addr}:{port}", prefix)
        ) from exc


def attempt_store_prefix(env: Mapping[str, str]) -> Optional[str]:
    """The store prefix of this attempt of a torchrun job, or ``None`` when none is needed.

    torchrun's agent hosts the store that the workers meet in
    (``TORCHELASTIC_USE_AGENT_STORE=True``: always with the static rendezvous, by
    default with c10d) and keeps it across restarts. A restarted worker then can
    find the keys of the previous attempt, the address of a peer that is dead,
    before the restarted peer overwrites them: it fails to connect, or waits on
    a port nobody answers (pytorch#135712, #167288; torch 2.4 to 2.13 at least).
    Keys under a prefix of their own attempt cannot be stale.

    The prefix must be the same on every rank of an attempt. With one agent (one
    node, ``GROUP_WORLD_SIZE=1``) ``TORCHELASTIC_RESTART_COUNT`` is: that agent
    starts every worker of the attempt. Agents on several nodes count restarts
    each for itself (a node whose worker failed counts one, the others none), so
    there it is not: then no prefix, and a warning when restarts are allowed.
    Multi-node jobs avoid the shared store instead with
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` and the c10d rendezvous (every round
    then gets a fresh store on rank 0; ``tools/dist_train.sh`` sets it).

    Args:
        env: The environment, e.g. ``os.environ``.

    Returns:
        ``"mmpar/<TORCHELASTIC_RUN_ID>/attempt<TORCHELASTIC_RESTART_COUNT>/"``, or
        ``None`` outside torchrun, without the agent's store, or on several nodes.
    """
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    if env.get("GROUP_WORLD_SIZE", "1") != "1":
        if env.get("TORCHELASTIC_MAX_RESTARTS", "0") not in ("", "0"):
            warnings.warn(
                "init_dist: a multi-node torchrun job that shares the agent's store may read "
                "the previous attempt's addresses after a restart (pytorch#135712); set "
                "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 and use --rdzv-backend=c10d "
                "(tools/dist_train.sh with RDZV=c10d does)",
                stacklevel=3,
            )
        return None
    run_id = env.get("TORCHELASTIC_RUN_ID") or "none"
    return f"mmpar/{run_id}/attempt{env.get('TORCHELASTIC_RESTART_COUNT') or '0'}/"


#: The peer rank in torch's "wait timeout ..., keys: .../<rank>" message of a missing peer.
_WAITED_KEY = re.compile(r"keys:.*?/(\d+)'?\]?\s*$")


def _not_formed(
    exc: BaseException,
    rank: int,
    world_size: int,
    timeout: datetime.timedelta,
    address: str,
    prefix: Optional[str],
) -> str:
    """One line: which rank waited, where, for whom, and torch's own reason."""
    reason = " ".join(str(exc).split("\n")[0].split())
    waited = _WAITED_KEY.search(reason)
    whom = f"rank {waited.group(1)}" if waited else "the other ranks"
    where = f"{address} (store prefix {prefix})" if prefix else address
    return (
        f"init_dist: rank {rank} of {world_size} waited {timeout.total_seconds():g} s at {where} "
        f"for {whom} and the process group did not form: {reason}"
    )


def check_gpu_per_process(
    launcher: str, local_rank: int, local_world_size: Optional[int], device_count: int
) -> None:
    """Check that every process of this node gets a GPU of its own (for nccl).

    Process ``local_rank`` of a node uses ``cuda:<local_rank % device_count>``.
    With more processes than visible GPUs two ranks would share one, which nccl
    refuses ("Duplicate GPU detected") only inside the first collective. One
    exception: under SLURM a task that sees exactly one GPU has been given its
    own (``--gpus-per-task=1``, ``--gpu-bind=single:1``), whatever its local id.

    Args:
        launcher: One of :data:`LAUNCHERS`.
        local_rank: This process's index on its node.
        local_world_size: Processes on this node (torchrun's ``LOCAL_WORLD_SIZE``,
            OpenMPI's ``OMPI_COMM_WORLD_LOCAL_SIZE``, SLURM's tasks on the node),
            ``None`` when unknown.
        device_count: GPUs visible to this process.

    Raises:
        ValueError: Two processes would share a GPU; the message gives the counts
            and the fixes (fewer processes, or the gloo backend on the CPU).
    """
    if device_count < 1:
        return
    if launcher == "slurm" and device_count == 1:
        return  # one visible GPU per task: SLURM bound each task to its own
    processes = max(local_world_size or 0, local_rank + 1)
    if processes <= device_count:
        return
    raise ValueError(
        f"init_dist: {processes} processes on this node but {device_count} visible GPU(s): with "
        f"the nccl backend every process needs a GPU of its own, and local rank {local_rank} would "
        f"share cuda:{local_rank % device_count}. Start at most {device_count} process(es) "
        f"per node (torchrun --nproc_per_node={device_count}, or tools/dist_train.sh CONFIG "
        f"{device_count}), "
        "or use the gloo backend, which runs on the CPU "
        "(init_dist(..., backend='gloo'); in the tools --cfg-options dist_params.backend=gloo)"
    )


def _local_world_size(launcher: str, env: Mapping[str, str]) -> Optional[int]:
    """Processes on this node as the launcher reports it, or ``None``."""
    names = {
        "pytorch": ("LOCAL_WORLD_SIZE",),
        "mpi": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        "slurm": ("SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
    }[launcher]
    for name in names:
        value = env.get(name, "")
        head = value.split("(")[0].split(",")[0]  # SLURM writes "2(x3),1" for uneven nodes
        if head.isdigit():
            return int(head)
    return None


def _as_timedelta(timeout: Union[float, datetime.timedelta]) -> datetime.timedelta:
    """Check ``timeout`` and return it as a positive timedelta."""
    if isinstance(timeout, datetime.timedelta):
        value = timeout
    elif is_number(timeout):
        value = datetime.timedelta(seconds=float(timeout))
    else:
        raise TypeError(
            f"timeout: expected seconds (int/float) or a timedelta, got {type(timeout).__name__}"
        )
    if value.total_seconds() <= 0:
        raise ValueError(f"timeout: expected a positive duration, got {timeout!r}")
    return value


def _require(env: Mapping[str, str], names: Sequence[str], launcher: str) -> Dict[str, str]:
    """Return ``names`` from ``env``; raise naming every missing one."""
    missing = [name for name in names if not env.get(name)]
    if missing:
        raise ValueError(
            f"init_dist({launcher!r}): environment variables {missing} are not set "
            f"(expected all of {list(names)})"
        )
    return {name: env[name] for name in names}


def _env_int(env: Mapping[str, str], name: str, minimum: int = 0) -> int:
    """Parse ``env[name]`` as an int >= ``minimum``."""
    try:
        value = int(env[name])
    except ValueError:
        raise ValueError(
            f"environment variable {name}: expected an integer, got {env[name]!r}"
        ) from None
    if value < minimum:
        raise ValueError(
            f"environment variable {name}: expected an integer >= {minimum}, got {value}"
        )
    return value


def _check_rank(rank: int, world_size: int, rank_name: str, size_name: str) -> None:
    """Raise when ``rank`` is not in ``range(world_size)``."""
    if rank >= world_size:
        raise ValueError(f"{rank_name}={rank} is not below {size_name}={world_size}")


def _torchrun_env(env: Mapping[str, str]) -> Tuple[int, int, int]:
    """Read ``(rank, world_size, local_rank)`` of a torchrun launch."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    _require(env, names, "pytorch")
    rank, world_size = _env_int(env, "RANK"), _env_int(env, "WORLD_SIZE", 1)
    _check_rank(rank, world_size, "RANK", "WORLD_SIZE")
    _check_port(_env_int(env, "MASTER_PORT"), "environment variable MASTER_PORT")
    return rank, world_size, _env_int(env, "LOCAL_RANK")


def _slurm_env(env: Mapping[str, str]) -> Tuple[int, int, int, str]:
    """Read ``(rank, world_size, local_rank, master_addr)`` of a slurm step."""
    _require(env, ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODELIST"), "slurm")
    rank, world_size = _env_int(env, "SLURM_PROCID"), _env_int(env, "SLURM_NTASKS", 1)
    _check_rank(rank, world_size, "SLURM_PROCID", "SLURM_NTASKS")
    if env.get("SLURM_LOCALID"):
        local_rank = _env_int(env, "SLURM_LOCALID")
    else:
        local_rank = rank % torch.cuda.device_count() if torch.cuda.is_available() else 0
    return rank, world_size, local_rank, slurm_first_host(env["SLURM_NODELIST"])


def _mpi_env(env: Mapping[str, str]) -> Tuple[int, int, int, str]:
    """Read ``(rank, world_size, local_rank, master_addr)`` of an OpenMPI launch."""
    names = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")
    _require(env, names, "mpi")
    rank, world_size = _env_int(env, names[0]), _env_int(env, names[1], 1)
    _check_rank(rank, world_size, names[0], names[1])
    return rank, world_size, _env_int(env, names[2]), env.get("MASTER_ADDR") or _DEFAULT_ADDR


def _master_port(port: Any, env: Mapping[str, str]) -> int:
    """The ``port`` keyword, else ``MASTER_PORT``, else the default."""
    if port is not None:
        if not (is_int(port) or isinstance(port, str)):
            raise TypeError(f"port: expected an int, got {type(port).__name__}")
        try:
            value = int(port)
        except ValueError:
            raise ValueError(f"port: expected an integer, got {port!r}") from None
        return _check_port(value, "port")
    if env.get("MASTER_PORT"):
        return _check_port(_env_int(env, "MASTER_PORT"), "environment variable MASTER_PORT")
    return _DEFAULT_PORT


def _check_port(port: int, name: str) -> int:
    """Return ``port`` if it is a valid TCP port number."""
    if not 0 < port < 65536:
        raise ValueError(f"{name}: expected a TCP port in 1..65535, got {port}")
    return port
