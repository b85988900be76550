"""Progress and ETA on stderr when it is a terminal (a pseudo-terminal here), nothing otherwise."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Tuple

import pytest
import torch

from mmpar.config import Config
from mmpar.models import build_model
from mmpar.runner.progress import Progress
from tests._dist_helpers import free_port, stop_process_tree

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "tiny_det" / "tiny_det_synthetic.py")
TIMEOUT = 180
TINY = [
    "data.train.num_samples=8",
    "data.val.num_samples=8",
    "data.test.num_samples=8",
    "data.samples_per_gpu=8",
    "data.test_samples_per_gpu=1",
    "runner.max_epochs=1",
]
LINE = re.compile(
    r"\[ ?(\d+)/(\d+)\] \d+\.\d img/s, (ETA \d+:\d\d:\d\d|ETA \?|done in \d+:\d\d:\d\d)"
)

pytestmark = pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs pseudo-terminals")


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_progress_line_rate_and_eta() -> None:
    progress = Progress(500, stream=Terminal())
    progress.done = 120
    assert progress.line(5.0) == "[120/500] 24.0 img/s, ETA 0:00:16"
    progress.done = 500
    assert progress.line(20.4) == "[500/500] 24.5 img/s, done in 0:00:20"
    progress.done = 0
    assert progress.line(0.0) == "[  0/500] 0.0 img/s, ETA ?"


def test_progress_redraws_in_place_and_ends_the_line() -> None:
    stream = Terminal()
    progress = Progress(10, stream=stream, min_interval=3600)
    for _ in range(5):
        progress.update(2)
    progress.update(4)  # capped at the total
    progress.close()
    text = stream.getvalue()
    # The first and the last update are drawn; the throttled ones in between are not.
    draws = text.split("\r")[1:]
    assert [d.split("]")[0] for d in draws] == ["[ 2/10", "[10/10"]
    assert LINE.fullmatch(draws[0].rstrip()) and "ETA" in draws[0]
    assert draws[1].endswith("\n") and "done in" in draws[1] and progress.done == 10


def test_progress_is_silent_off_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(4, stream=stream)
    progress.update(4)
    progress.close()
    assert not progress.enabled and stream.getvalue() == ""


def run_on_pty(args: List[str], tmp_path: Path) -> Tuple[int, str, str]:
    """Run ``args`` with stderr on a pseudo-terminal: (exit status, stdout, terminal output)."""
    master, slave = os.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    stdout: List[bytes] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    reader.start()
    chunks: List[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
        else:
            stop_process_tree(proc)
            raise TimeoutError(f"{args} ran past {TIMEOUT} s")
        proc.wait(timeout=60)
        reader.join(timeout=60)
    finally:
        os.close(master)
    return proc.returncode, b"".join(stdout).decode(), b"".join(chunks).decode()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Untrained weights of the example's model: all tools/test.py needs to run."""
    path = tmp_path_factory.mktemp("ckpt") / "tiny.pth"
    model = build_model(Config.fromfile(CONFIG).model)
    torch.save(dict(state_dict=model.state_dict(), meta=dict(epoch=0, iter=0)), path)
    return path


def tool_args(checkpoint: Path, tmp_path: Path) -> List[str]:
    return [
        "tools/test.py",
        CONFIG,
        str(checkpoint),
        "--eval",
        "--work-dir",
        str(tmp_path),
        "--cfg-options",
        *TINY,
    ]


def final_lines(terminal: str) -> List[str]:
    return [d.strip() for d in terminal.split("\r") if "done in" in d]


def test_test_tool_draws_progress_on_a_terminal(checkpoint: Path, tmp_path: Path) -> None:
    code, stdout, terminal = run_on_pty(
        [sys.executable, *tool_args(checkpoint, tmp_path)], tmp_path
    )
    assert code == 0, stdout + terminal
    draws = [LINE.search(d) for d in terminal.split("\r") if "img/s" in d]
    assert draws and all(draws)
    assert draws[0].group(1, 2) == ("1", "8") and draws[0].group(3).startswith("ETA")
    assert final_lines(terminal) and final_lines(terminal)[0].startswith("[8/8]")
    # Results and metrics are on stdout as ever; the progress is not.
    assert "mAP@0.5: " in stdout and "img/s" not in stdout and "\r" not in stdout


def test_test_tool_piped_has_no_progress(checkpoint: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, *tool_args(checkpoint, tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "mAP@0.5: " in proc.stdout
    assert "img/s" not in proc.stdout + proc.stderr and "\r" not in proc.stdout + proc.stderr


def test_training_evaluation_draws_progress_but_logs_none(tmp_path: Path) -> None:
    args = [sys.executable, "tools/train.py", CONFIG, "--work-dir", str(tmp_path), "--seed", "0"]
    code, stdout, terminal = run_on_pty(args + ["--cfg-options", *TINY], tmp_path)
    assert code == 0, stdout + terminal
    # Two evaluations (before and after training), one finished line each.
    finished = final_lines(terminal)
    assert len(finished) == 2 and all(line.startswith("[8/8]") for line in finished)
    (text_log,) = tmp_path.glob("*[0-9].log")
    (json_log,) = tmp_path.glob("*.log.json")
    for text in (text_log.read_text(), json_log.read_text()):
        assert "mAP" in text and "img/s" not in text and "\r" not in text


@pytest.mark.slow
def test_torchrun_draws_progress_on_rank_0_only(checkpoint: Path, tmp_path: Path) -> None:
    launcher = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
    ]
    gloo = [] if torch.cuda.device_count() >= 2 else ["dist_params.backend='gloo'"]
    args = launcher + tool_args(checkpoint, tmp_path) + gloo + ["--launcher", "pytorch"]
    code, stdout, terminal = run_on_pty(args, tmp_path)
    assert code == 0, stdout + terminal
    # Rank 0 counts its images for both ranks (2 at a time) up to the 8 of the test
    # set; rank 1 draws nothing, so there is exactly one finished line.
    counts = [int(m.group(1)) for m in LINE.finditer(terminal)]
    assert counts and all(c % 2 == 0 for c in counts) and counts[-1] == 8
    assert len(final_lines(terminal)) == 1
    assert "mAP@0.5: " in stdout and "img/s" not in stdout
