"""How the tools are launched: the legacy launcher's local rank, a hung peer, elastic restarts.

The distributed runs are real ``tools/train.py`` processes under
``torch.distributed.run`` on gloo, each bounded by a hard timeout and stopped
with everything it started when the test ends.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import types
import warnings
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import torch

from mmpar.dist.init import attempt_store_prefix
from mmpar.runner.cli import is_group_failure
from tests._dist_helpers import free_port, run_launcher, stop_process_tree, torchrun_workers
from tests.test_tools import torchrun_launcher, train_args

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"mmpar_tool_{name}", ROOT / "tools" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "tool, positional", [("train", ["c.py"]), ("test", ["c.py", "w.pth", "--eval"])]
)
@pytest.mark.parametrize("spelling", ["--local-rank=1", "--local_rank=1", "--local-rank 1"])
def test_tools_take_both_local_rank_spellings(tool: str, positional: list, spelling: str) -> None:
    args = _tool(tool).parse_args([*positional, *spelling.split(), "--launcher", "pytorch"])
    assert args.local_rank == 1 and args.launcher == "pytorch"


# --------------------------------------------------------------------------- #
# A peer that hangs: the run ends within dist_params.timeout
# --------------------------------------------------------------------------- #
PG_TIMEOUT = 20  # dist_params.timeout of the hang test
SLACK = 40  # what the timeout may be overrun by: the collective's give-up and the report
# Long enough that the run is still training when a rank is stopped.
LONG = [
    "runner.max_epochs=200",
    "data.train.num_samples=32",
    "data.samples_per_gpu=4",
    "log_config.interval=1",
    "dist_params.backend='gloo'",
]


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before {path} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.1)


@pytest.mark.parametrize(
    "message",
    [
        "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
        "20000ms for recv operation to complete",
        # What DDP's buffer broadcast raised on a loaded machine when the peer was stopped
        # (gloo closes the pair after its timeout): the run ended with a traceback.
        "Application timeout caused pair closure",
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
        "[127.0.0.1]:29500",
        "NCCL communicator was aborted on rank 1.",
    ],
)
def test_the_process_groups_failures_are_recognised(message: str) -> None:
    assert is_group_failure(RuntimeError(message))


def test_other_runtime_errors_are_not_group_failures() -> None:
    assert not is_group_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_group_failure(ValueError("Timed out waiting for the user"))


@pytest.mark.slow
def test_a_stopped_rank_ends_the_run_within_the_timeout(tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    options = LONG + [f"dist_params.timeout={PG_TIMEOUT}"]
    args = train_args(work_dir, "--launcher", "pytorch", "--no-validate", options=options)
    proc = subprocess.Popen(
        [sys.executable, *torchrun_launcher(2), *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    stopped = None
    lines: "queue.Queue[str]" = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)
    reader.start()
    seen: List[str] = []
    try:
        _wait_for(work_dir / "epoch_1.pth", proc, 120)
        stopped = torchrun_workers(proc.pid)[1]
        os.kill(stopped, signal.SIGSTOP)
        started = time.monotonic()
        reported = _line_starting("error: rank 0 of 2", lines, seen, started + PG_TIMEOUT + SLACK)
        if reported is None:
            while not lines.empty():
                seen.append(lines.get())
            pytest.fail(
                f"rank 0 did not report within {PG_TIMEOUT + SLACK} s of the stop; the run said:\n"
                + "".join(seen)[-6000:]
            )
        elapsed = reported - started
        # The survivor has said it; torchrun would give the stopped rank 30 s to obey its
        # SIGTERM before killing it: do it now instead.
        os.kill(stopped, signal.SIGKILL)
        proc.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if stopped is not None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(stopped, sig)
                except ProcessLookupError:
                    pass
        stop_process_tree(proc, grace=0.0)
    while not lines.empty():
        seen.append(lines.get())
    out = "".join(seen)
    assert proc.returncode != 0, out[-3000:]
    print(f"rank 0 reported {elapsed:.1f} s after the stop")
    assert elapsed >= PG_TIMEOUT - 1, f"ended after {elapsed:.1f} s: not by the timeout"
    # rank 0 says it in one line, without a traceback; torchrun then reports both ranks.
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out[-5000:]
    assert errors[0].startswith("error: rank 0 of 2: the process group failed"), errors
    cause = errors[0].partition(f"dist_params.timeout={PG_TIMEOUT} s): ")[2]
    assert cause, errors
    # gloo words the same timeout two ways: the recv that timed out, or (on a loaded
    # machine, DDP's buffer broadcast) the pair that its timeout closed.
    assert re.search(r"Timed out waiting|Application timeout caused pair closure", cause), cause
    assert "[rank0]: Traceback" not in out, out[-5000:]


def _line_starting(
    prefix: str, lines: "queue.Queue[str]", seen: List[str], deadline: float
) -> Optional[float]:
    """When a line starting with ``prefix`` came (``time.monotonic``), or None by ``deadline``;
    every line read goes to ``seen``."""
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        if line.startswith(prefix):
            return time.monotonic()
    return None


@pytest.mark.parametrize("rank", [0, 1])
def test_a_group_that_cannot_form_fails_within_the_timeout(tmp_path: Path, rank: int) -> None:
    # One rank of two, started by hand: its peer never comes.
    port = free_port()
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE="2",
    )
    args = train_args(tmp_path, "--launcher", "pytorch", options=LONG + ["dist_params.timeout=5"])
    started = time.monotonic()
    proc = run_launcher([sys.executable, *args], timeout=90, cwd=ROOT, env=env)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"rank {rank} of 2 waited 5 s at 127.0.0.1:{port}" in errors[0], errors[0]
    assert "did not form" in errors[0]
    # Rank 1's store client retries its connection once: twice the timeout, plus start-up.
    assert elapsed < 2 * 5 + 30, elapsed


# --------------------------------------------------------------------------- #
# torchrun --max-restarts with --auto-resume: a killed rank costs the work since
# the last checkpoint, and the run ends where an uninterrupted one ends
# --------------------------------------------------------------------------- #
EPOCHS = 8
KILL_AFTER = 4  # rank 1 is killed once epoch_<KILL_AFTER>.pth exists
RESTART = [
    f"runner.max_epochs={EPOCHS}",
    "data.train.num_samples=16",
    "data.samples_per_gpu=2",
    "log_config.interval=1",
    "checkpoint_config.interval=1",
    "dist_params.backend='gloo'",
    "dist_params.timeout=60",
]
RESTART_TIMEOUT = 240


def _elastic_cmd(work_dir: Path, rdzv: str, max_restarts: int) -> List[str]:
    port = free_port()
    if rdzv == "c10d":
        launcher = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}"]
    else:
        launcher = [f"--master_port={port}"]
    args = train_args(
        work_dir, "--launcher", "pytorch", "--no-validate", "--auto-resume", options=RESTART
    )
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--max-restarts={max_restarts}",
        *launcher,
        *args,
    ]


def _final_state(work_dir: Path) -> Dict[str, torch.Tensor]:
    checkpoint = torch.load(work_dir / "latest.pth", map_location="cpu", weights_only=True)
    assert checkpoint["meta"]["epoch"] == EPOCHS
    return checkpoint["state_dict"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, torch.Tensor]:
    work_dir = tmp_path_factory.mktemp("uninterrupted")
    cmd = _elastic_cmd(work_dir, "static", 0)
    proc = run_launcher(cmd, timeout=RESTART_TIMEOUT, cwd=ROOT, env=_env())
    assert proc.returncode == 0, proc.stderr[-5000:]
    return _final_state(work_dir)


def _env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def _kill_rank_and_compare(
    cmd: List[str], env: Dict[str, str], work_dir: Path, expected: Dict[str, torch.Tensor]
) -> None:
    """Run ``cmd``, SIGKILL rank 1 once epoch KILL_AFTER is saved, and check that the
    restarted group resumed and ended with the ``expected`` parameters, bit for bit."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for(work_dir / f"epoch_{KILL_AFTER}.pth", proc, RESTART_TIMEOUT)
        os.kill(torchrun_workers(proc.pid)[1], signal.SIGKILL)
        try:
            out, _ = proc.communicate(timeout=RESTART_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the restarted run did not end within {RESTART_TIMEOUT} s")
    finally:
        stop_process_tree(proc, grace=0.0)
    assert proc.returncode == 0, out[-6000:]
    # Both ranks of the restarted group resumed, from a checkpoint at or after the kill.
    resumed = re.findall(r"auto-resume: resuming from \S+ \(epoch (\d+) of", out)
    assert len(resumed) >= 1 and int(resumed[-1]) >= KILL_AFTER, out[-6000:]
    got = _final_state(work_dir)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(got[key], value), f"{key} differs from the uninterrupted run's"


@pytest.mark.slow
@pytest.mark.parametrize("rdzv", ["static", "c10d"])
def test_a_killed_rank_restarts_and_ends_bit_identical(
    tmp_path: Path, rdzv: str, uninterrupted: Dict[str, torch.Tensor]
) -> None:
    work_dir = tmp_path / "work"
    _kill_rank_and_compare(_elastic_cmd(work_dir, rdzv, 2), _env(), work_dir, uninterrupted)


@pytest.mark.slow
def test_dist_train_sh_with_max_restarts_and_c10d_resumes_a_killed_rank(
    tmp_path: Path, uninterrupted: Dict[str, torch.Tensor]
) -> None:
    work_dir = tmp_path / "work"
    # dist_train.sh adds --launcher pytorch, and --auto-resume for MAX_RESTARTS.
    args = train_args(work_dir, "--no-validate", options=RESTART)
    cmd = ["bash", str(ROOT / "tools" / "dist_train.sh"), args[1], "2", *args[2:]]
    env = dict(_env(), MAX_RESTARTS="2", RDZV="c10d", PORT=str(free_port()), PYTHON=sys.executable)
    _kill_rank_and_compare(cmd, env, work_dir, uninterrupted)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"MAX_RESTARTS": "two"}, "error: MAX_RESTARTS: expected an integer >= 0, got 'two'"),
        ({"RDZV": "etcd"}, "error: RDZV: expected static or c10d, got 'etcd'"),
    ],
)
@pytest.mark.parametrize("script", ["dist_train.sh", "slurm_train.sh"])
def test_launch_scripts_refuse_bad_restart_settings(
    script: str, env: Dict[str, str], message: str
) -> None:
    positional = ["c.py", "2"] if script == "dist_train.sh" else ["p", "job", "c.py", "work"]
    proc = subprocess.run(
        ["bash", str(ROOT / "tools" / script), *positional],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and proc.stderr.strip() == message, proc.stderr


# --------------------------------------------------------------------------- #
# The store prefix of an attempt
# --------------------------------------------------------------------------- #
_AGENT = {
    "TORCHELASTIC_USE_AGENT_STORE": "True",
    "TORCHELASTIC_RUN_ID": "job7",
    "TORCHELASTIC_RESTART_COUNT": "2",
    "TORCHELASTIC_MAX_RESTARTS": "3",
    "GROUP_WORLD_SIZE": "1",
}


def test_attempt_store_prefix_on_one_node_is_the_attempts() -> None:
    assert attempt_store_prefix(_AGENT) == "mmpar/job7/attempt2/"
    assert attempt_store_prefix({**_AGENT, "TORCHELASTIC_RESTART_COUNT": "0"}).endswith("attempt0/")


def test_attempt_store_prefix_without_the_agents_store_is_none() -> None:
    assert attempt_store_prefix({}) is None  # not under torchrun
    assert attempt_store_prefix({**_AGENT, "TORCHELASTIC_USE_AGENT_STORE": "False"}) is None


def test_attempt_store_prefix_on_several_nodes_is_none_and_warns_with_restarts() -> None:
    with pytest.warns(UserWarning, match="TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"):
        assert attempt_store_prefix({**_AGENT, "GROUP_WORLD_SIZE": "2"}) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = {**_AGENT, "GROUP_WORLD_SIZE": "2", "TORCHELASTIC_MAX_RESTARTS": "0"}
        assert attempt_store_prefix(env) is None
