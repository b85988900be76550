"""``torch.distributed`` helpers: start a process group, query it, share results.

Everything except :func:`init_dist` also works without a process group, as a
world of one process (rank 0 of 1), so the same code runs in single-process
tests and tools.
"""
from __future__ import annotations

import datetime
import functools
import os
import re
from itertools import product
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import torch
import torch.distributed as dist

__all__ = [
    "LAUNCHERS",
    "all_gather_object_list",
    "barrier",
    "collect_results",
    "expand_slurm_nodelist",
    "get_dist_info",
    "init_dist",
    "is_main_process",
    "master_only",
    "slurm_first_host",
    "sync_random_seed",
]

#: Launchers understood by :func:`init_dist`.
LAUNCHERS: Tuple[str, ...] = ("pytorch", "slurm", "mpi")

_DEFAULT_TIMEOUT = datetime.timedelta(seconds=1800)
_DEFAULT_ADDR = "127.0.0.1"
_DEFAULT_PORT = 29500
_INT64_MAX = 2**63 - 1

F = TypeVar("F", bound=Callable[..., Any])


# --------------------------------------------------------------------------- #
# Starting a process group
# --------------------------------------------------------------------------- #
def init_dist(
    launcher: str,
    backend: Optional[str] = None,
    timeout: Union[float, datetime.timedelta] = _DEFAULT_TIMEOUT,
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

    With CUDA the current device becomes ``local_rank % device_count``.

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
            variables, a non-positive timeout, a bad port, or ``kwargs``
            holding ``init_method``/``rank``/``world_size``/``store``.
        TypeError: ``backend`` is not a string or ``timeout`` not a number or
            timedelta.
        RuntimeError: ``torch.distributed`` is unavailable, or a default
            process group already exists (call
            ``torch.distributed.destroy_process_group()`` first).
        DistStoreError: a peer did not show up within ``timeout`` (a
            ``RuntimeError`` subclass raised by torch).
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
    clashes = sorted(set(kwargs) & {"backend", "init_method", "rank", "store", "timeout", "world_size"})
    if clashes:
        raise ValueError(f"kwargs: {clashes} are set by init_dist itself and cannot be passed")
    port = kwargs.pop("port", None)
    if launcher == "pytorch":
        if port is not None:
            raise ValueError("port: only for the 'slurm' and 'mpi' launchers; torchrun sets MASTER_PORT")
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
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(
        backend, init_method="env://", rank=rank, world_size=world_size, timeout=timeout, **kwargs
    )


def _as_timedelta(timeout: Union[float, datetime.timedelta]) -> datetime.timedelta:
    """Check ``timeout`` and return it as a positive timedelta."""
    if isinstance(timeout, datetime.timedelta):
        value = timeout
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        value = datetime.timedelta(seconds=float(timeout))
    else:
        raise TypeError(f"timeout: expected seconds (int/float) or a timedelta, got {type(timeout).__name__}")
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
        raise ValueError(f"environment variable {name}: expected an integer, got {env[name]!r}") from None
    if value < minimum:
        raise ValueError(f"environment variable {name}: expected an integer >= {minimum}, got {value}")
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
        if isinstance(port, bool) or not isinstance(port, (int, str)):
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


# --------------------------------------------------------------------------- #
# Slurm node lists
# --------------------------------------------------------------------------- #
_HOST_CHARS = re.compile(r"[A-Za-z0-9._-]*")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def expand_slurm_nodelist(nodelist: str) -> List[str]:
    """Expand a slurm host list such as ``"node[01-03,07],gpu2"``.

    Ranges keep the zero padding of their first bound (``[08-10]`` gives
    ``08, 09, 10``); several bracket groups in one name give every
    combination (``r[1-2]n[1-2]`` gives ``r1n1, r1n2, r2n1, r2n2``).

    Args:
        nodelist: The value of ``SLURM_NODELIST`` / ``SLURM_JOB_NODELIST``.

    Returns:
        The host names, in the order slurm lists them.

    Raises:
        TypeError: ``nodelist`` is not a string.
        ValueError: empty list, unbalanced brackets, an empty or descending
            range, or characters that cannot be in a host name.
    """
    hosts: List[str] = []
    for pieces in _parse_nodelist(nodelist):
        options = [list(_piece_values(piece)) for piece in pieces]
        hosts.extend("".join(combo) for combo in product(*options))
    return hosts


def slurm_first_host(nodelist: str) -> str:
    """Return the first host of a slurm host list without expanding the rest.

    Args:
        nodelist: See :func:`expand_slurm_nodelist`.

    Returns:
        The first host name, e.g. ``"node01"`` for ``"node[01-03],gpu2"``.

    Raises:
        TypeError, ValueError: as :func:`expand_slurm_nodelist`.
    """
    first = _parse_nodelist(nodelist)[0]
    return "".join(next(_piece_values(piece)) for piece in first)


#: One piece of a host name: literal text, or bracketed ``(low, high, width)`` ranges.
_Piece = Union[str, List[Tuple[int, int, int]]]


def _parse_nodelist(nodelist: str) -> List[List[_Piece]]:
    """Check the whole list and split every host name into pieces."""
    if not isinstance(nodelist, str):
        raise TypeError(f"nodelist: expected a str, got {type(nodelist).__name__}")
    return [_parse_host(part, nodelist) for part in _split_top_level(nodelist)]


def _piece_values(piece: _Piece) -> Iterator[str]:
    """Yield the texts one piece stands for, in order."""
    if isinstance(piece, str):
        yield piece
        return
    for low, high, width in piece:
        for number in range(low, high + 1):
            yield str(number).zfill(width)


def _split_top_level(nodelist: str) -> List[str]:
    """Split at the commas that are outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(nodelist):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(nodelist[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise ValueError(f"nodelist: unbalanced or nested brackets in {nodelist!r}")
    if depth != 0:
        raise ValueError(f"nodelist: unbalanced brackets in {nodelist!r}")
    parts.append(nodelist[start:])
    if any(not part.strip() for part in parts):
        raise ValueError(f"nodelist: expected comma-separated host names, got {nodelist!r}")
    return [part.strip() for part in parts]


def _parse_host(host: str, nodelist: str) -> List[_Piece]:
    """Turn ``"r[1-2]n3"`` into ``["r", [(1, 2, 1)], "n3"]``."""
    pieces: List[_Piece] = []
    for i, chunk in enumerate(re.split(r"[\[\]]", host)):
        if i % 2 == 0:
            if not _HOST_CHARS.fullmatch(chunk):
                raise ValueError(f"nodelist: invalid host name {host!r} in {nodelist!r}")
            pieces.append(chunk)
        else:
            pieces.append(_parse_ranges(chunk, nodelist))
    return pieces


def _parse_ranges(spec: str, nodelist: str) -> List[Tuple[int, int, int]]:
    """Turn ``"01-03,7"`` into ``[(1, 3, 2), (7, 7, 1)]``."""
    ranges: List[Tuple[int, int, int]] = []
    for item in spec.split(","):
        match = _RANGE.fullmatch(item.strip())
        if match is None:
            raise ValueError(f"nodelist: invalid range {item!r} in {nodelist!r}")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if high < low:
            raise ValueError(f"nodelist: descending range {item!r} in {nodelist!r}")
        ranges.append((low, high, len(match.group(1))))
    return ranges


# --------------------------------------------------------------------------- #
# Querying the group
# --------------------------------------------------------------------------- #
def get_dist_info() -> Tuple[int, int]:
    """Return ``(rank, world_size)``; ``(0, 1)`` without a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_process() -> bool:
    """Return whether this process is rank 0 (always true without a group)."""
    return get_dist_info()[0] == 0


def master_only(func: F) -> F:
    """Decorate ``func`` to run on rank 0 only; other ranks get ``None``.

    No barrier is involved: the other ranks return at once.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if is_main_process():
            return func(*args, **kwargs)
        return None

    return wrapper  # type: ignore[return-value]


def barrier() -> None:
    """Wait for every rank; a no-op without a process group."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


# --------------------------------------------------------------------------- #
# Sharing values
# --------------------------------------------------------------------------- #
def _collective_device() -> torch.device:
    """Device that tensors of a collective must live on for the current backend."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sync_random_seed(seed: Optional[int] = None) -> int:
    """Return one seed that every rank agrees on.

    With a process group, rank 0's ``seed`` (or, when it is ``None``, a value
    drawn from ``np.random.randint(2**31)``) is broadcast and every rank
    returns it; the other ranks' ``seed`` arguments are ignored. Without a
    group, ``seed`` itself or a fresh random value is returned. Every rank
    must call it (it is a collective).

    Args:
        seed: An int in ``[-2**63, 2**63)`` or ``None``.

    Returns:
        The agreed seed.

    Raises:
        TypeError: ``seed`` is not an int or ``None``.
        ValueError: ``seed`` does not fit into 64 bits.
    """
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed: expected an int or None, got {type(seed).__name__}")
        seed = int(seed)
        if not -_INT64_MAX - 1 <= seed <= _INT64_MAX:
            raise ValueError(f"seed: expected a 64-bit integer, got {seed}")
    else:
        seed = int(np.random.randint(2**31))
    if not (dist.is_available() and dist.is_initialized()):
        return seed
    value = torch.tensor(seed if dist.get_rank() == 0 else 0, dtype=torch.int64, device=_collective_device())
    dist.broadcast(value, src=0)
    return int(value.item())


def all_gather_object_list(obj: Any) -> List[Any]:
    """Gather one picklable object from every rank, on every rank.

    Args:
        obj: Any picklable object.

    Returns:
        ``[obj of rank 0, obj of rank 1, ...]``; ``[obj]`` without a group.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    gathered: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def collect_results(
    results: Sequence[Any], size: int, indices: Optional[Sequence[int]] = None
) -> List[Any]:
    """Bring every rank's per-sample results together in dataset order.

    A collective: every rank must call it, and every rank gets the full list
    (results travel through ``all_gather_object``, so they must be picklable).

    Without ``indices``, rank ``r`` must hold the results of dataset indices
    ``r, r + W, r + 2W, ...`` (``W`` = world size), the layout of
    ``DistributedSampler(shuffle=False)``; the results are interleaved and the
    samples the sampler repeated to even out the ranks are cut off at ``size``.
    With ``indices`` (the dataset index of each of this rank's results, in any
    order, from any sampler), each result is put at its index; repeated
    indices keep the first result (lowest rank, then earliest position).

    Args:
        results: This rank's results, one per processed sample.
        size: Dataset length, i.e. the length of the returned list.
        indices: Optional dataset index of each entry of ``results``; all
            ranks pass indices or none does.

    Returns:
        ``size`` results, entry ``i`` for dataset index ``i``.

    Raises:
        TypeError: ``results``/``indices`` are not sequences, ``size`` or an
            index is not an int.
        ValueError: ``size < 0``; ``len(indices) != len(results)``; an index
            outside ``range(size)``; ranks disagree on passing indices; fewer
            results than ``size`` over all ranks; without indices, per-rank
            lengths that cannot come from an interleaved split; with indices,
            a dataset index no rank covered.
    """
    results, own_indices = _check_collect_args(results, size, indices)
    parts = all_gather_object_list((results, own_indices))
    with_indices = [part[1] is not None for part in parts]
    if any(with_indices) and not all(with_indices):
        ranks = [r for r, flag in enumerate(with_indices) if not flag]
        raise ValueError(f"indices: ranks {ranks} passed none while other ranks passed indices")
    total = sum(len(part[0]) for part in parts)
    if total < size:
        raise ValueError(
            f"results: {total} results over {len(parts)} ranks, fewer than size={size}"
        )
    if all(with_indices):
        return _place_by_index(parts, size)
    return _interleave([part[0] for part in parts], size)


def _check_collect_args(
    results: Sequence[Any], size: int, indices: Optional[Sequence[int]]
) -> Tuple[List[Any], Optional[List[int]]]:
    """Validate :func:`collect_results` arguments; return them as lists."""
    if isinstance(results, (str, bytes)) or not isinstance(results, Sequence):
        raise TypeError(f"results: expected a list of per-sample results, got {type(results).__name__}")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
        raise TypeError(f"size: expected an int, got {type(size).__name__}")
    if size < 0:
        raise ValueError(f"size: expected a dataset length >= 0, got {size}")
    if indices is None:
        return list(results), None
    if isinstance(indices, torch.Tensor):
        indices = indices.tolist()
    if isinstance(indices, (str, bytes)) or not isinstance(indices, (Sequence, np.ndarray)):
        raise TypeError(f"indices: expected a sequence of ints, got {type(indices).__name__}")
    if len(indices) != len(results):
        raise ValueError(
            f"indices: expected one index per result ({len(results)}), got {len(indices)}"
        )
    checked: List[int] = []
    for index in indices:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"indices: expected ints, found {type(index).__name__} {index!r}")
        if not 0 <= index < size:
            raise ValueError(f"indices: index {int(index)} is outside range(size={size})")
        checked.append(int(index))
    return list(results), checked


def _interleave(per_rank: List[List[Any]], size: int) -> List[Any]:
    """Merge ``DistributedSampler(shuffle=False)``-style parts into dataset order."""
    lengths = [len(part) for part in per_rank]
    # Rank r holds r, r+W, ...: lengths never grow with the rank and differ by at most one.
    if any(a < b for a, b in zip(lengths, lengths[1:])) or max(lengths) - min(lengths) > 1:
        raise ValueError(
            f"results: per-rank lengths {lengths} do not match an interleaved split "
            "(rank r holding indices r, r+W, ...); pass indices="
        )
    ordered = [part[i] for i in range(max(lengths)) for part in per_rank if i < len(part)]
    return ordered[:size]


_MISSING = object()


def _place_by_index(parts: List[Tuple[List[Any], Optional[List[int]]]], size: int) -> List[Any]:
    """Put each result at its dataset index; raise if one is not covered."""
    out: List[Any] = [_MISSING] * size
    for results, indices in parts:
        for index, result in zip(indices or [], results):
            if out[index] is _MISSING:
                out[index] = result
    missing = [i for i, value in enumerate(out) if value is _MISSING]
    if missing:
        shown = missing[:10]
        more = f" and {len(missing) - len(shown)} more" if len(missing) > len(shown) else ""
        raise ValueError(
            f"indices: {len(missing)} of {size} dataset indices have no result: {shown}{more}"
        )
    return out
