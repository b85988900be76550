"""User errors in tools/train.py, tools/test.py and tools/benchmark.py: one line, exit 2.

Every case runs the tool as a user would (a subprocess) and checks that it ends
with exit status 2 and exactly one non-empty stderr line, ``error: ...``, naming
the key, value or file at fault; ``--debug`` gives the traceback instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.test_tools import CONFIG, GLOO, ROOT, TINY, run_tool, torchrun_launcher, train


def error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The one stderr line of a tool that refused its input, checked to name ``needles``."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work_dir = tmp_path_factory.mktemp("ckpt")
    train(work_dir, "--no-validate", options=TINY + ["runner.max_epochs=1"])
    return work_dir / "latest.pth"


def test_a_misspelled_key_is_refused_naming_the_closest(tmp_path: Path) -> None:
    proc = train(tmp_path, options=TINY + ["runner.max_epoch=2"], check=False)
    line = error_line(proc, "'runner.max_epoch'", "did you mean 'runner.max_epochs'", "+")
    assert "--cfg-options" in line
    assert not list(tmp_path.glob("*.pth")) and not list(tmp_path.glob("*.py"))


def test_a_misspelled_key_inside_a_dict_value_is_refused(tmp_path: Path) -> None:
    proc = train(tmp_path, options=TINY + ["runner={'max_epoch': 2}"], check=False)
    error_line(proc, "'runner.max_epoch'", "'runner.max_epochs'")


def test_keys_the_tools_read_pass_though_the_config_lacks_them(tmp_path: Path) -> None:
    # The key check passes every one of them; the run then stops at the first bad value.
    optional = [
        "amp={'dtype': 'bfloat16', 'loss_scale': 'dynamic'}",
        "fp16.loss_scale=512.0",
        "compile={'mode': 'max-autotune', 'fullgraph': False}",
        "cudnn_benchmark=True",
        "channels_last=False",
        "optimizer_config.cumulative_iters=2",
        "optimizer_config.type='GradientCumulativeOptimizerHook'",
        "data.test_samples_per_gpu=2",
        "work_dir='elsewhere'",
        "model.num_classes=3",
    ]
    proc = train(tmp_path, options=TINY + optional + ["runner.max_epochs=0"], check=False)
    error_line(proc, "runner.max_epochs", "got 0")


def test_plus_adds_a_key_and_a_class_parameter_is_known(tmp_path: Path) -> None:
    # momentum is no key of the config, but a parameter of SGD, which the options select.
    options = TINY + [
        "runner.max_epochs=1",
        "+custom.note='hello'",
        "optimizer={'_delete_': True, 'type': 'SGD', 'lr': 0.01, 'momentum': 0.9}",
    ]
    train(tmp_path, "--no-validate", options=options)
    dumped = (tmp_path / "tiny_det_synthetic.py").read_text()
    assert "note='hello'" in dumped and "momentum=0.9" in dumped


def test_a_parameter_the_model_does_not_take_is_refused(tmp_path: Path) -> None:
    proc = train(tmp_path, options=TINY + ["model.widht=64"], check=False)
    error_line(proc, "'model.widht'", "'model.width'")


@pytest.mark.parametrize(
    "option, needles",
    [
        ("runner.max_epochs=-1", ["runner.max_epochs", "-1"]),
        ("optimizer.lr=abc", ["optimizer.lr", "'abc'"]),
        ("optimizer.lr=0", ["optimizer.lr", "> 0"]),
        ("data.samples_per_gpu=0", ["data.samples_per_gpu", "got 0"]),
        ("data.workers_per_gpu=-1", ["data.workers_per_gpu", "-1"]),
        ("data.persistent_workers=1", ["data.persistent_workers", "True or False", "int 1"]),
        ("checkpoint_config.interval=1.5", ["checkpoint_config.interval", "1.5"]),
        ("evaluation.interval=-3", ["evaluation.interval", "-3"]),
        ("log_config.interval=0", ["log_config.interval", "got 0"]),
        ("lr_config.policy='poly'", ["lr_config.policy", "'poly'"]),
    ],
)
def test_a_value_out_of_range_is_one_line(tmp_path: Path, option: str, needles: List[str]) -> None:
    error_line(train(tmp_path, options=TINY + [option], check=False), *needles)


def test_a_config_without_data_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "nodata.py"
    config.write_text(f"_base_ = [{CONFIG!r}]\ndata = dict(_delete_=True)\n")
    proc = run_tool(["tools/train.py", str(config), "--work-dir", str(tmp_path)], check=False)
    error_line(proc, "data.train: missing", str(config))


def _coco_config(tmp_path: Path) -> Path:
    config = tmp_path / "coco.py"
    config.write_text(
        f"_base_ = [{CONFIG!r}]\n"
        "data = dict(train=dict(_delete_=True, type='CocoDetection',\n"
        f"    ann_file={str(tmp_path / 'ann.json')!r}, img_prefix={str(tmp_path / 'nope')!r}))\n"
    )
    return config


def test_a_missing_image_folder_is_one_line(tmp_path: Path) -> None:
    config = _coco_config(tmp_path)
    command = ["tools/train.py", str(config), "--work-dir", str(tmp_path / "wd"), "--no-validate"]
    proc = run_tool(command, check=False)
    error_line(proc, "data.train", "img_prefix", str(tmp_path / "nope"))
    debug = run_tool(command + ["--debug"], check=False)
    assert debug.returncode != 0 and "Traceback" in debug.stderr
    assert "FileNotFoundError" in debug.stderr


@pytest.mark.slow
def test_a_user_error_on_every_torchrun_rank_exits_2_without_hanging(tmp_path: Path) -> None:
    config = _coco_config(tmp_path)
    proc = run_tool(
        [
            *torchrun_launcher(),
            "tools/train.py",
            str(config),
            "--work-dir",
            str(tmp_path / "wd"),
            "--no-validate",
            "--launcher",
            "pytorch",
            "--cfg-options",
            *GLOO,
        ],
        check=False,
    )
    assert proc.returncode != 0
    ours = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert ours and all("img_prefix" in line for line in ours), proc.stderr[-3000:]
    # The first rank to fail exited 2 (torchrun then stops the other, which may be
    # failing the same way); torchrun's own report, its traceback included, follows.
    assert "exitcode  : 2" in proc.stderr, proc.stderr[-3000:]
    assert 'train.py", line' not in proc.stderr


def test_test_tool_refuses_a_truncated_checkpoint(checkpoint: Path, tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(checkpoint.read_bytes()[:2000])
    proc = run_tool(
        ["tools/test.py", CONFIG, str(truncated), "--eval", "--cfg-options", *TINY], check=False
    )
    error_line(proc, "truncated.pth", "corrupt")
    missing = run_tool(["tools/test.py", CONFIG, str(tmp_path / "nope.pth"), "--eval"], check=False)
    error_line(missing, "nope.pth", "not found")


def test_test_tool_refuses_a_checkpoint_of_another_model(checkpoint: Path) -> None:
    options = TINY + ["model.width=16"]
    proc = run_tool(
        ["tools/test.py", CONFIG, str(checkpoint), "--eval", "--cfg-options", *options],
        check=False,
    )
    error_line(proc, str(checkpoint), "state_dict")


def test_a_missing_load_from_is_one_line(tmp_path: Path) -> None:
    proc = train(tmp_path, options=TINY + [f"load_from={str(tmp_path / 'w.pth')!r}"], check=False)
    error_line(proc, "load_from", "w.pth", "not found")


@pytest.mark.parametrize("tool", ["train.py", "test.py", "plot_log.py"])
def test_help_tells_how_to_add_a_key_and_debug(tool: str) -> None:
    proc = run_tool([f"tools/{tool}", "--help"])
    assert "--debug" in proc.stdout and "traceback" in proc.stdout
    if tool != "plot_log.py":
        assert "+KEY=VALUE" in proc.stdout and "error: ..." in proc.stdout


def test_benchmark_refuses_a_missing_config() -> None:
    proc = subprocess.run(
        [sys.executable, "tools/benchmark.py", "--config", "nope.py"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    error_line(proc, "nope.py", "not found")
