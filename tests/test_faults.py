"""Faults: a rank that dies, raises or hangs mid-training, and a DataLoader worker that dies.

The distributed tests run ``tests/scripts/fault_train.py`` (DDP train steps plus
an all_reduce per step on gloo, joined through ``mmpar.dist.init_dist``)
as real processes, under ``torch.distributed.run`` or started by hand with the
torchrun environment variables. Every process runs in its own session, is
bounded by a hard timeout and is killed (the whole group) when the test ends.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from tests._dist_helpers import free_port, stop_process_tree

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "tests" / "scripts" / "fault_train.py")
LOADER_SCRIPT = str(ROOT / "tests" / "scripts" / "fault_loader.py")
HARD_TIMEOUT = 120  # seconds a whole launch may take before the test fails
PG_TIMEOUT = 5.0  # init_dist timeout: a hung peer is reported after this
#: How gloo words a dead socket: a closed or reset connection, a failed read or write.
_DEAD_SOCKET = re.compile(r"Connection (closed|reset) by peer|Read error|Write error|Broken pipe")
_LOST = re.compile(r"rank (\d+): lost a peer at step (\d+) after ([0-9.]+) s: (.*)")


def _env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **(extra or {}))


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process's whole session and every process it started (torchrun's
    workers live in sessions of their own; a SIGSTOPped rank included), and reap it."""
    stop_process_tree(proc, grace=0.0)  # first: it finds the workers through their parent
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _communicate(proc: subprocess.Popen, timeout: float) -> Tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        pytest.fail(f"process {proc.args} did not exit within {timeout} s")
    return proc.returncode, out


def _start(cmd: List[str], env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    """Start ``cmd`` in the repository, in a session of its own, stderr merged into stdout."""
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=_env() if env is None else env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _run(cmd: List[str], timeout: float) -> Tuple[int, str]:
    """Run ``cmd`` (see :func:`_start`) to its end: exit code and output; its group is killed."""
    proc = _start(cmd)
    try:
        return _communicate(proc, timeout)
    finally:
        _kill_group(proc)


def torchrun(nproc: int, *args: str) -> Tuple[int, str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        f"--master_port={free_port()}",
        SCRIPT,
        "--timeout",
        str(PG_TIMEOUT),
        *args,
    ]
    return _run(cmd, HARD_TIMEOUT)


def launch_by_hand(world_size: int, *args: str) -> List[subprocess.Popen]:
    """Start one process per rank with torchrun's environment variables, no launcher."""
    port = str(free_port())
    procs = []
    for rank in range(world_size):
        env = _env(
            dict(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(world_size),
            )
        )
        procs.append(_start([sys.executable, SCRIPT, "--timeout", str(PG_TIMEOUT), *args], env))
    return procs


def lost_peer_reports(output: str) -> Dict[int, Tuple[int, float, str]]:
    """``{rank: (step, seconds to detect, error)}`` from the survivors' lines."""
    return {int(m[1]): (int(m[2]), float(m[3]), m[4]) for m in _LOST.finditer(output)}


def failure_block(report: str, rank: int) -> str:
    """The part of torchrun's failure report about ``rank``."""
    match = re.search(
        rf"rank\s*: {rank} \(local_rank: {rank}\)(.*?)(?=\n\s*\[\d+\]:|\n\s*rank\s*:|={(5,)}|\Z)",
        report,
        re.S,
    )
    assert match, f"torchrun's report does not name rank {rank}:\n{report[-3000:]}"
    return match.group(1)


# --------------------------------------------------------------------------- #
# Under torchrun
# --------------------------------------------------------------------------- #
@pytest.mark.slow
def test_no_fault_all_ranks_finish() -> None:
    code, out = torchrun(2, "--steps", "10")
    assert code == 0, out[-3000:]
    assert out.count("finished 10 steps") == 2


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "raise"])
def test_torchrun_reports_the_failed_rank_and_the_survivors_exit(fault: str) -> None:
    code, out = torchrun(3, "--fault", fault, "--fault-rank", "1", "--fault-step", "5")
    assert code != 0
    reports = lost_peer_reports(out)
    for rank in (0, 2):
        # A survivor stops itself on the dead socket, or torchrun, having seen the dead
        # rank first, stops it with SIGTERM: either way it is gone and reported.
        if rank in reports:
            step, seconds, error = reports[rank]
            assert step == 5 and _DEAD_SOCKET.search(error), error
            assert seconds < PG_TIMEOUT  # a dead socket is noticed at once, not after the timeout
        else:
            assert "SIGTERM" in failure_block(out, rank), out[-3000:]
    block = failure_block(out, 1)  # the report always lists the failed rank
    if fault == "kill":
        assert "exitcode  : -9" in block and "SIGKILL" in block, block
    else:
        # From the error file that @record writes; when torchrun has already SIGTERMed the
        # rank in its teardown, the rank's own "[rank1]:" traceback is what names it.
        assert "injected fault" in block or "[rank1]: RuntimeError: injected fault" in out, out[
            -3000:
        ]


# --------------------------------------------------------------------------- #
# Started by hand (init_dist from the environment): the survivors stop themselves
# --------------------------------------------------------------------------- #
@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "exit", "raise", "stop"])
def test_survivors_exit_nonzero_within_the_timeout(fault: str) -> None:
    procs = launch_by_hand(3, "--fault", fault, "--fault-rank", "2", "--fault-step", "4")
    try:
        survivors = {}
        for rank in (0, 1):
            survivors[rank] = _communicate(procs[rank], PG_TIMEOUT + 60)
        faulty_code = None if fault == "stop" else _communicate(procs[2], 60)[0]
    finally:
        for proc in procs:
            _kill_group(proc)
    for rank, (code, out) in survivors.items():
        assert code == 1, out[-2000:]
        ((lost_rank, (step, seconds, error)),) = lost_peer_reports(out).items()
        assert lost_rank == rank and step == 4
        if fault == "stop":  # alive but silent: only the process-group timeout can tell
            assert "Timed out" in error and PG_TIMEOUT - 0.5 <= seconds < PG_TIMEOUT + 10
        else:
            assert _DEAD_SOCKET.search(error) and seconds < PG_TIMEOUT, error
    if fault != "stop":
        assert faulty_code == {"kill": -signal.SIGKILL, "exit": 3, "raise": 1}[fault]


# --------------------------------------------------------------------------- #
# DataLoader workers (through mmpar.data.build_dataloader), in a subprocess each
# --------------------------------------------------------------------------- #
def run_loader(*args: str, timeout: float = 90) -> Tuple[int, str, List[int]]:
    """Run tests/scripts/fault_loader.py: its exit code, output and the samples that arrived."""
    code, out = _run([sys.executable, LOADER_SCRIPT, *args], timeout)
    seen = [
        int(i) for line in out.splitlines() if line.startswith("batch ") for i in line.split()[1:]
    ]
    return code, out, seen


def test_dataloader_without_fault_delivers_every_sample_once() -> None:
    code, out, seen = run_loader("--fault", "none", "--length", "30")
    assert code == 0 and "done 30" in out
    assert seen == list(range(30))


@pytest.mark.parametrize("fault", ["kill", "exit"])
def test_dataloader_worker_death_is_a_clear_error(fault: str) -> None:
    code, out, seen = run_loader("--fault", fault, "--bad", "37")
    assert code == 1
    assert re.search(
        r"RuntimeError: DataLoader worker \(pid.*?\) (exited unexpectedly|is killed by signal)", out
    ), out[-2000:]
    assert 37 not in seen and seen == list(range(len(seen)))  # what arrived is in order, none twice


def test_hung_dataloader_worker_hits_the_loader_timeout() -> None:
    code, out, _ = run_loader("--fault", "hang", "--bad", "5", "--length", "16", "--timeout", "3")
    assert code == 1
    assert "RuntimeError: DataLoader timed out after 3" in out, out[-2000:]
