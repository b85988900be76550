"""Run a function in N real processes joined by a gloo process group (tests only).

API:

``free_port() -> int``
    A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, close).

``run_workers(fn, world_size, *args, timeout=60.0, backend="gloo",
init_group=True, env=None) -> list``
    Starts ``world_size`` processes with the ``spawn`` start method. Each one
    sets ``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT`` (one free port shared by
    all), ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` plus the entries of
    ``env``; when ``init_group`` is true it joins a process group
    (``tcp://127.0.0.1:<port>``, ``backend``, process-group timeout =
    ``timeout``), then calls ``fn(rank, world_size, *args)``, destroys the
    group if one exists and sends the return value back. With
    ``init_group=False`` no group is created, so ``fn`` may create one itself
    (e.g. through ``mmpar.dist.init_dist``) from the environment above.

    Returns the list of return values indexed by rank.

    Raises:
        RuntimeError: a rank raised (the message names the rank and carries
            its traceback), died without answering (names the exit code), or
            returned something that cannot be pickled.
        TimeoutError: not every rank answered within ``timeout`` seconds.

    Every worker is gone when ``run_workers`` returns or raises: the ones
    still running after the first failure or at the timeout are terminated,
    then killed. The process-group timeout equals ``timeout``, so a rank
    stuck in a collective is reported either as that rank's error (with the
    collective's traceback) or as ``TimeoutError``, whichever comes first.

``run_launcher(cmd, timeout, **popen_kwargs) -> subprocess.CompletedProcess``
    ``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)``
    for launchers such as ``python -m torch.distributed.run``: on the timeout
    it stops the launcher and every process it started (see
    :func:`stop_process_tree`), then re-raises ``subprocess.TimeoutExpired``.
    ``free_port`` cannot hold its port until torchrun binds it, so another
    process may take it first: when the launcher's store fails to listen on a
    ``--master_port`` of ``cmd`` (EADDRINUSE, before any worker starts), the
    command runs again on a new free port, up to 3 times in all.

``stop_process_tree(proc, grace=10.0)``
    torchrun starts each worker in a session of its own, so killing the
    launcher's process group does not reach them. This sends SIGTERM to the
    launcher (torchrun then stops its workers), waits up to ``grace`` seconds,
    then SIGKILLs every process still descending from it.

``with_new_master_port(cmd, port) -> list or None``
    ``cmd`` with its ``--master_port`` replaced, or None when it names none.

``torchrun_workers(pid) -> dict``
    ``{RANK: pid}`` of the workers that the torchrun process ``pid`` runs now
    (its children that have ``RANK`` in their environment; Linux ``/proc``).

``fn`` and ``args`` must be picklable: ``fn`` is a module-level function of an
importable module (a test module is fine: the children get the parent's
``sys.path``). Workers are not daemonic, so ``fn`` may start DataLoader
workers of its own.

Example::

    def _sum_ranks(rank, world_size):
        t = torch.tensor([rank])
        torch.distributed.all_reduce(t)
        return int(t)

    assert run_workers(_sum_ranks, 2) == [1, 1]
"""

from __future__ import annotations

import datetime
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import socket
import subprocess
import time
import traceback
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

__all__ = [
    "LAUNCH_VARS",
    "clear_launch_env",
    "free_port",
    "run_launcher",
    "run_workers",
    "stop_process_tree",
    "torchrun_workers",
    "with_new_master_port",
]

_KILL_GRACE_S = 5.0

#: What launchers set (torchrun, SLURM, Open MPI) and ``init_dist`` exports.
LAUNCH_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_NODELIST",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
)


def clear_launch_env(monkeypatch: Any) -> Any:
    """Removes :data:`LAUNCH_VARS` until ``monkeypatch`` (a ``pytest.MonkeyPatch``) undoes.

    Its undo puts each one back as it was, and removes one a test set in between
    (``init_dist`` exports ``RANK`` and ``WORLD_SIZE`` in the test's own process).
    ``delenv`` alone records nothing for a variable that is absent.
    """
    for name in LAUNCH_VARS:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing was listening on just now.

    Returns:
        The port number.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker(
    conn: multiprocessing.connection.Connection,
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    args: Tuple[Any, ...],
    port: int,
    backend: str,
    timeout: float,
    init_group: bool,
    env: Dict[str, str],
) -> None:
    """Body of one worker process: set up, call ``fn``, send ``(ok, payload)``."""
    import torch.distributed as dist

    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
    )
    os.environ.update(env)
    try:
        if init_group:
            dist.init_process_group(
                backend,
                init_method=f"tcp://127.0.0.1:{port}",
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=timeout),
            )
        result = fn(rank, world_size, *args)
        # Pickle here, not inside send(), so that an unpicklable result is
        # reported as this rank's error rather than a dead pipe.
        message = (True, pickle.dumps(result))
    except BaseException:  # noqa: B902 - everything must reach the parent
        message = (False, traceback.format_exc())
    finally:
        if dist.is_available() and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the result matters more
                pass
    try:
        conn.send(message)
    except Exception:  # noqa: BLE001
        conn.send((False, f"rank {rank}: could not send its result:\n{traceback.format_exc()}"))
    conn.close()


def _stop(processes: List[multiprocessing.process.BaseProcess]) -> None:
    """Terminate, then kill, every process still alive, and reap them all."""
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + _KILL_GRACE_S
    for proc in processes:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in processes:
        if proc.is_alive():
            proc.kill()
            proc.join()
        proc.close()


def run_workers(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 60.0,
    backend: str = "gloo",
    init_group: bool = True,
    env: Optional[Mapping[str, str]] = None,
) -> List[Any]:
    """Call ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes.

    See the module docstring for the full contract.

    Args:
        fn: Picklable module-level function.
        world_size: Number of processes, >= 1.
        *args: Picklable extra arguments passed to every rank.
        timeout: Seconds the whole run may take; also the process-group timeout.
        backend: ``torch.distributed`` backend of the group.
        init_group: Whether to create the process group before calling ``fn``.
        env: Extra environment variables set in every worker.

    Returns:
        ``[result of rank 0, result of rank 1, ...]``.

    Raises:
        ValueError: ``world_size < 1`` or ``timeout <= 0``.
        RuntimeError: a rank failed (see module docstring).
        TimeoutError: the run exceeded ``timeout``.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size: expected an int >= 1, got {world_size!r}")
    if not timeout > 0:
        raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    extra_env = {str(k): str(v) for k, v in (env or {}).items()}
    readers: Dict[Any, int] = {}
    processes: List[multiprocessing.process.BaseProcess] = []
    results: Dict[int, Any] = {}
    try:
        for rank in range(world_size):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_worker,
                args=(
                    writer,
                    fn,
                    rank,
                    world_size,
                    args,
                    port,
                    backend,
                    timeout,
                    init_group,
                    extra_env,
                ),
                name=f"run_workers-rank{rank}",
            )
            proc.start()
            writer.close()
            readers[reader] = rank
            processes.append(proc)
        _collect(readers, processes, results, time.monotonic() + timeout, timeout)
        return [results[rank] for rank in range(world_size)]
    finally:
        _stop(processes)
        for reader in readers:
            reader.close()


def _collect(
    readers: Dict[Any, int],
    processes: List[multiprocessing.process.BaseProcess],
    results: Dict[int, Any],
    deadline: float,
    timeout: float,
) -> None:
    """Read one message per rank into ``results``; raise on the first failure."""
    pending = dict(readers)
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            missing = sorted(pending.values())
            raise TimeoutError(
                f"run_workers: ranks {missing} did not finish within {timeout} s; all workers "
                "killed"
            )
        for reader in multiprocessing.connection.wait(list(pending), timeout=remaining):
            rank = pending.pop(reader)
            try:
                ok, payload = reader.recv()
            except EOFError:
                processes[rank].join(_KILL_GRACE_S)
                raise RuntimeError(
                    f"run_workers: rank {rank} exited without a result "
                    f"(exit code {processes[rank].exitcode})"
                ) from None
            if not ok:
                raise RuntimeError(f"run_workers: rank {rank} raised:\n{payload}")
            results[rank] = pickle.loads(payload)


def _descendants(pid: int) -> List[int]:
    """Every live process below ``pid``, from ``/proc`` (Linux)."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def torchrun_workers(pid: int) -> Dict[int, int]:
    """``{RANK: pid}`` of the workers the torchrun process ``pid`` runs now (see the module doc)."""
    workers = {}
    for child in _descendants(pid):
        try:
            with open(f"/proc/{child}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != pid:
                    continue
            with open(f"/proc/{child}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except (OSError, IndexError, ValueError):
            continue
        if b"RANK" in env:
            workers[int(env[b"RANK"])] = child
    return workers


def stop_process_tree(proc: "subprocess.Popen", grace: float = 10.0) -> None:
    """Stop ``proc`` and everything it started, then reap ``proc`` (see the module docstring)."""
    tree = _descendants(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    for pid in [proc.pid] + tree + _descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


#: What torchrun's store says when its ``--master_port`` was taken before it bound it.
_PORT_TAKEN = "failed to listen on any local network address"
_LAUNCH_ATTEMPTS = 3


def with_new_master_port(cmd: List[str], port: int) -> Optional[List[str]]:
    """``cmd`` with its torchrun ``--master_port`` (or ``--master-port``) set to ``port``.

    Returns:
        The new command, or None when ``cmd`` names no master port.
    """
    out = list(cmd)
    for i, arg in enumerate(out):
        name, eq, _ = arg.partition("=")
        if name not in ("--master_port", "--master-port"):
            continue
        if eq:
            out[i] = f"{name}={port}"
        elif i + 1 < len(out):
            out[i + 1] = str(port)
        else:
            return None
        return out
    return None


def run_launcher(
    cmd: List[str], timeout: float, **popen_kwargs: Any
) -> "subprocess.CompletedProcess":
    """``subprocess.run`` for launchers; on the timeout nothing it started is left running.

    A ``--master_port`` that another process took before torchrun bound it is replaced
    with a new free port, and the command runs again (module docstring).
    """
    for _ in range(_LAUNCH_ATTEMPTS - 1):
        result = _run_once(cmd, timeout, **popen_kwargs)
        taken = result.returncode != 0 and _PORT_TAKEN in result.stderr + result.stdout
        retry = with_new_master_port(cmd, free_port()) if taken else None
        if retry is None:
            return result
        cmd = retry
    return _run_once(cmd, timeout, **popen_kwargs)


def _run_once(cmd: List[str], timeout: float, **popen_kwargs: Any) -> "subprocess.CompletedProcess":
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_kwargs
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_process_tree(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
