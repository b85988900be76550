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
import torch

from tests.test_plot_log import plot_cli, write_log
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
    assert 'train.py", line' not in proc.stdout


def test_test_tool_refuses_a_truncated_checkpoint(checkpoint: Path, tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(checkpoint.read_bytes()[:2000])
    proc = run_tool(
        ["tools/test.py", CONFIG, str(truncated), "--eval", "--cfg-options", *TINY], check=False
    )
    error_line(proc, "truncated.pth", "truncated", "ends after 2000 bytes")
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


# --------------------------------------------------------------------------- registered types


@pytest.mark.parametrize(
    "option, needles",
    [
        ("optimizer.type='Adamw'", ["optimizer.type", "'Adamw'", "did you mean 'AdamW'"]),
        ("model.type='TinyDett'", ["model.type", "'TinyDett'", "did you mean 'TinyDet'"]),
        (
            "data.val.type='SyntheticShape'",
            ["data.val.type", "'SyntheticShape'", "did you mean 'SyntheticShapes'"],
        ),
    ],
)
def test_an_unregistered_type_is_one_line_with_the_closest(
    tmp_path: Path, option: str, needles: List[str]
) -> None:
    error_line(train(tmp_path, options=TINY + [option], check=False), *needles)
    assert not list(tmp_path.glob("*.log"))  # refused before any work


def test_an_unregistered_pipeline_step_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "pipeline.py"
    config.write_text(
        f"_base_ = [{CONFIG!r}]\n"
        "data = dict(train=dict(_delete_=True, type='CocoDetection', ann_file='a.json',\n"
        "    img_prefix='img', pipeline=[dict(type='LoadImageFromFile'), dict(type='Resise')]))\n"
    )
    proc = run_tool(["tools/train.py", str(config), "--work-dir", str(tmp_path)], check=False)
    error_line(proc, "data.train.pipeline[1].type", "'Resise'", "did you mean 'Resize'")


def test_test_tool_refuses_an_unregistered_model_type(tmp_path: Path) -> None:
    command = ["tools/test.py", CONFIG, str(tmp_path / "any.pth"), "--eval", "--cfg-options"]
    proc = run_tool(command + ["model.type='Tinydet'"], check=False)
    error_line(proc, "model.type", "'Tinydet'", "did you mean 'TinyDet'")


# --------------------------------------------------------------------------- checkpoints


def _bare_state_dict(checkpoint: Path, tmp_path: Path) -> Path:
    bare = tmp_path / "bare.pth"
    torch.save(torch.load(checkpoint, weights_only=True)["state_dict"], bare)
    return bare


def test_load_from_takes_a_bare_state_dict_and_says_so(checkpoint: Path, tmp_path: Path) -> None:
    bare = _bare_state_dict(checkpoint, tmp_path)
    options = TINY + ["runner.max_epochs=1", f"load_from={str(bare)!r}"]
    proc = train(tmp_path / "wd", "--no-validate", options=options)
    assert f"loaded weights from {bare} (a bare state_dict" in proc.stdout


def test_resume_from_a_bare_state_dict_starts_from_its_weights(
    checkpoint: Path, tmp_path: Path
) -> None:
    bare = _bare_state_dict(checkpoint, tmp_path)
    options = TINY + ["runner.max_epochs=1"]
    proc = train(tmp_path / "wd", "--no-validate", "--resume-from", str(bare), options=options)
    assert "is a bare state_dict" in proc.stdout and "starts at epoch 1" in proc.stdout
    assert f"loaded weights from {bare}" in proc.stdout
    assert (tmp_path / "wd" / "epoch_1.pth").is_file()


def test_test_tool_takes_bare_and_mmcv_style_checkpoints(checkpoint: Path, tmp_path: Path) -> None:
    weights = torch.load(checkpoint, weights_only=True)["state_dict"]
    mmcv_style = tmp_path / "mmcv.pth"
    # As mmcv 1.x saves them, here from a model still wrapped: every key under "module.".
    torch.save(
        dict(
            meta=dict(mmcv_version="1.7.2", epoch=1, iter=3, CLASSES=("a", "b", "c")),
            state_dict={f"module.{k}": v for k, v in weights.items()},
        ),
        mmcv_style,
    )
    kinds = {
        _bare_state_dict(checkpoint, tmp_path): "a bare state_dict",
        mmcv_style: "an mmcv checkpoint",
        checkpoint: "an mmpar checkpoint",
    }
    for path, kind in kinds.items():
        proc = run_tool(["tools/test.py", CONFIG, str(path), "--eval", "--cfg-options", *TINY])
        assert f"weights: {path} ({kind}" in proc.stdout and "mAP@0.5: " in proc.stdout


@pytest.mark.parametrize(
    "damage, needles",
    [
        ("cut", ["truncated", "ends after 50000 bytes", "inside the record"]),
        ("text", ["not a PyTorch checkpoint", "a text file starting 'epoch 1 done'"]),
        ("empty", ["empty (0 bytes)"]),
        ("noise", ["not a PyTorch checkpoint", "starts with the bytes"]),
    ],
)
def test_a_damaged_checkpoint_gets_a_readable_reason(
    checkpoint: Path, tmp_path: Path, damage: str, needles: List[str]
) -> None:
    path = tmp_path / f"{damage}.pth"
    path.write_bytes(
        {
            "cut": checkpoint.read_bytes()[:50_000],
            "text": b"epoch 1 done\nloss 0.5\n",
            "empty": b"",
            "noise": bytes(range(7, 107)),
        }[damage]
    )
    test = run_tool(
        ["tools/test.py", CONFIG, str(path), "--eval", "--cfg-options", *TINY], check=False
    )
    error_line(test, f"{damage}.pth", *needles)
    options = TINY + [f"load_from={str(path)!r}"]
    error_line(train(tmp_path / "wd", options=options, check=False), "load_from", *needles)


def test_plot_log_suggests_the_closest_key(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.log.json")
    proc = plot_cli(str(log), "--keys", "los", "--out", str(tmp_path / "x.png"))
    error_line(proc, "'los'", "did you mean 'loss'", "loss_heatmap")


# --------------------------------------------------------------------------- custom_imports


def _project(tmp_path: Path, body: str) -> dict:
    """A module ``my_project`` in a folder of its own; the environment that finds it."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "my_project.py").write_text(body)
    return dict(PYTHONPATH=f"{ROOT}{os.pathsep}{folder}")


def _config_with_imports(tmp_path: Path, imports: List[str], allow_failed: bool) -> Path:
    config = tmp_path / "mine.py"
    config.write_text(
        f"_base_ = [{CONFIG!r}]\n"
        f"custom_imports = dict(imports={imports!r}, allow_failed_imports={allow_failed})\n"
        "model = dict(type='MyDet')\n"
    )
    return config


MY_DET = (
    "from mmpar.models import TinyDet\n"
    "from mmpar.registry import MODELS\n\n\n"
    "@MODELS.register_module()\n"
    "class MyDet(TinyDet):\n"
    "    pass\n"
)


def test_custom_imports_register_a_model_of_the_users(tmp_path: Path) -> None:
    env = _project(tmp_path, MY_DET)
    config = _config_with_imports(tmp_path, ["my_project", "not_installed"], allow_failed=True)
    options = TINY + ["runner.max_epochs=1", "model.width=16"]  # width: a parameter of MyDet
    command = ["tools/train.py", str(config), "--work-dir", str(tmp_path / "wd"), "--no-validate"]
    proc = run_tool([*command, "--cfg-options", *options], env=env)
    assert "model MyDet:" in proc.stdout
    assert "warning: custom_imports: 'not_installed' failed to import" in proc.stderr


@pytest.mark.parametrize(
    "body, needles",
    [
        (None, ["custom_imports", "cannot import 'not_installed'", "No module named"]),
        ("raise RuntimeError('no GPU here')\n", ["cannot import 'my_project'", "no GPU here"]),
    ],
)
def test_a_failed_custom_import_is_one_line(tmp_path: Path, body: str, needles: List[str]) -> None:
    env = _project(tmp_path, body or MY_DET)
    imports = ["my_project"] if body else ["my_project", "not_installed"]
    config = _config_with_imports(tmp_path, imports, allow_failed=False)
    for tool in (
        ["tools/train.py", str(config)],
        ["tools/test.py", str(config), "x.pth", "--eval"],
    ):
        proc = run_tool([*tool, "--work-dir", str(tmp_path / "wd")], env=env, check=False)
        error_line(proc, *needles)
