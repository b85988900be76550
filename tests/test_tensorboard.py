"""``log_config.hooks``: TextLoggerHook and TensorboardLoggerHook, as mmdet 2.x configs name them.

A real training run through tools/train.py writes TensorBoard events that hold the
JSON log's values; other hook types, keys and a missing ``tensorboard`` package are
one ``error:`` line (exit 2).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch

from mmpar.runner.config_checks import check_train_config
from mmpar.runner.log_hooks import (
    TensorboardMissingError,
    TensorboardWriter,
    build_log_writers,
    check_log_config,
    first_momentum,
)
from mmpar.runner.logger import JsonLogWriter
from tests._dist_helpers import run_launcher
from tests.test_tools import CONFIG, ROOT, TIMEOUT, TINY, json_records, train, train_args
from tests.test_tools_errors import error_line

BOTH_HOOKS = "log_config.hooks=[{'type': 'TextLoggerHook'}, {'type': 'TensorboardLoggerHook'}]"


def _scalars(log_dir: Path) -> Dict[str, List[Tuple[int, float]]]:
    """Every scalar series of the event files in ``log_dir``: tag -> [(step, value)]."""
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    ).EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {
        tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


@pytest.fixture(scope="module")
def tensorboard_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("tensorboard")
    work_dir = tmp_path_factory.mktemp("tb")
    train(work_dir, options=TINY + [BOTH_HOOKS])
    return work_dir


def test_training_writes_the_json_logs_scalars_as_events(tensorboard_run: Path) -> None:
    assert list((tensorboard_run / "tf_logs").glob("events.out.tfevents.*"))
    scalars = _scalars(tensorboard_run / "tf_logs")
    records = json_records(tensorboard_run)
    train_records = [r for r in records if r["mode"] == "train"]
    losses = sorted(k for k in train_records[0] if k.startswith("loss"))
    assert losses == ["loss", "loss_heatmap", "loss_offset", "loss_size"]
    # mmcv's tags: time and data_time are logged as text only.
    assert set(scalars) == {f"train/{k}" for k in losses} | {"learning_rate", "momentum", "val/mAP"}
    # The JSON log rounds to 6 decimals, events hold float32: equal within either.
    iters = [r["iter"] for r in train_records]
    for key in losses:
        assert [step for step, _ in scalars[f"train/{key}"]] == iters
        expected = [r[key] for r in train_records]
        assert [v for _, v in scalars[f"train/{key}"]] == pytest.approx(
            expected, rel=1e-6, abs=1e-6
        )
    assert [v for _, v in scalars["learning_rate"]] == pytest.approx(
        [r["lr"] for r in train_records], rel=1e-6, abs=1e-6
    )
    # AdamW's momentum, as mmcv logs it: betas[0].
    assert [v for _, v in scalars["momentum"]] == pytest.approx([0.9] * len(iters))
    val_records = [r for r in records if r["mode"] == "val"]
    assert [step for step, _ in scalars["val/mAP"]] == [0, iters[-1]]
    assert [v for _, v in scalars["val/mAP"]] == pytest.approx(
        [r["mAP"] for r in val_records], abs=1e-6
    )
    (text_log,) = tensorboard_run.glob("*[0-9].log")
    assert f"TensorBoard: scalars go to {tensorboard_run / 'tf_logs'}" in text_log.read_text()


def test_a_run_without_hooks_writes_no_events(tmp_path: Path) -> None:
    check_train_config(_config_dict(hooks=None), splits=())
    writers = build_log_writers(
        dict(interval=4), JsonLogWriter(tmp_path / "a.log.json"), tmp_path, 0
    )
    writers.write(dict(mode="train", epoch=1, iter=1, lr=0.1, loss=1.0))
    writers.close()
    assert not (tmp_path / "tf_logs").exists()
    assert json.loads((tmp_path / "a.log.json").read_text())["loss"] == 1.0


def _config_dict(hooks: object) -> dict:
    import mmpar.config

    cfg = mmpar.config.Config.fromfile(CONFIG).to_dict()
    cfg["log_config"] = dict(interval=4) if hooks is None else dict(interval=4, hooks=hooks)
    return cfg


@pytest.mark.parametrize(
    "hook, needles",
    [
        (
            "{'type': 'WandbLoggerHook'}",
            ["log_config.hooks[1].type", "'WandbLoggerHook'", "TensorboardLoggerHook"],
        ),
        (
            "{'type': 'TensorBoardLoggerHook'}",
            ["log_config.hooks[1].type", "did you mean 'TensorboardLoggerHook'"],
        ),
        (
            "{'type': 'TensorboardLoggerHook', 'logdir': 'x'}",
            ["log_config.hooks[1].logdir", "did you mean 'log_dir'"],
        ),
        ("{'type': 'TextLoggerHook'}", ["log_config.hooks[1].type", "already log_config.hooks[0]"]),
    ],
    ids=["other-type", "typo", "unknown-key", "twice"],
)
def test_train_refuses_other_hooks_in_one_line(
    tmp_path: Path, hook: str, needles: List[str]
) -> None:
    option = f"log_config.hooks=[{{'type': 'TextLoggerHook'}}, {hook}]"
    proc = train(tmp_path / "work", options=TINY + [option], check=False)
    error_line(proc, *needles)
    assert not (tmp_path / "work").exists()  # refused before anything is written


def test_a_config_file_naming_another_hook_is_refused(tmp_path: Path) -> None:
    # Where mmdet 2.x users have it: in the config file (it used to be ignored silently).
    config = tmp_path / "wandb.py"
    config.write_text(
        f"_base_ = [{CONFIG!r}]\n"
        "log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook'), "
        "dict(type='WandbLoggerHook', init_kwargs=dict(project='x'))])\n"
    )
    args = train_args(tmp_path / "work", options=TINY)
    args[1] = str(config)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = run_launcher([sys.executable, *args], timeout=TIMEOUT, cwd=ROOT, env=env)
    error_line(
        proc,
        "log_config.hooks[1].type: 'WandbLoggerHook' is not supported",
        "['TextLoggerHook', 'TensorboardLoggerHook']",
        str(config),
    )


def test_train_without_tensorboard_says_how_to_install_it(tmp_path: Path) -> None:
    # A package folder named tensorboard that cannot be imported shadows the real one,
    # as on a machine without it.
    shadow = tmp_path / "shadow" / "tensorboard"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tensorboard'\", name='tensorboard')\n"
    )
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(shadow.parent), str(ROOT)]),
        OMP_NUM_THREADS="1",
    )
    args = train_args(tmp_path / "work", options=TINY + [BOTH_HOOKS])
    proc = run_launcher([sys.executable, *args], timeout=TIMEOUT, cwd=ROOT, env=env)
    error_line(
        proc,
        "log_config.hooks[1]: TensorboardLoggerHook needs the tensorboard package",
        'pip install -e ".[tensorboard]"',
    )
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    "hooks, error, needles",
    [
        (dict(type="TensorboardLoggerHook"), TypeError, ["log_config.hooks: expected a list"]),
        (["TextLoggerHook"], TypeError, ["log_config.hooks[0]: expected a dict"]),
        ([dict(type="TextLoggerHook", interval=50)], ValueError, ["hooks[0].interval: 50", "4"]),
        ([dict(type="TextLoggerHook", by_epoch=False)], ValueError, ["hooks[0].by_epoch"]),
        (
            [dict(type="TensorboardLoggerHook", log_dir=3)],
            TypeError,
            ["hooks[0].log_dir: expected a folder"],
        ),
    ],
    ids=["not-a-list", "not-a-dict", "own-interval", "by-iteration", "log-dir-type"],
)
def test_check_names_the_entry_at_fault(hooks: object, error: type, needles: List[str]) -> None:
    with pytest.raises(error) as info:
        check_train_config(_config_dict(hooks), splits=())
    for needle in needles:
        assert needle in str(info.value)


def test_hooks_that_match_the_interval_pass() -> None:
    hooks = [
        dict(type="TextLoggerHook", interval=4, by_epoch=True),
        dict(type="TensorboardLoggerHook", interval=4, log_dir="x"),
    ]
    pytest.importorskip("tensorboard")
    assert check_log_config(dict(interval=4, hooks=hooks)) == hooks


def test_missing_tensorboard_is_an_import_error_and_a_value_error() -> None:
    exc = TensorboardMissingError("x", name="tensorboard")
    assert isinstance(exc, ImportError) and isinstance(exc, ValueError)


def test_log_dir_is_honoured_and_only_rank_0_writes(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    log_config = dict(
        interval=1, hooks=[dict(type="TensorboardLoggerHook", log_dir=str(tmp_path / "tb"))]
    )
    for rank in (1, 0):
        writers = build_log_writers(
            log_config, JsonLogWriter(tmp_path / "a.log.json", rank), tmp_path, rank
        )
        writers.write(dict(mode="meta", iter=0, seed=1))
        writers.write(dict(mode="train", epoch=1, iter=1, lr=0.5, time=0.1, loss=2.0))
        writers.write(dict(mode="val", tag="val", epoch=1, iter=1, mAP=0.25))
        writers.close()
        if rank == 1:
            assert not (tmp_path / "tb").exists() and not (tmp_path / "a.log.json").exists()
    assert not (tmp_path / "tf_logs").exists()
    assert _scalars(tmp_path / "tb") == {
        "train/loss": [(1, 2.0)],
        "learning_rate": [(1, 0.5)],
        "val/mAP": [(1, 0.25)],
    }


def test_a_resumed_run_hides_what_the_interrupted_run_logged_after_its_checkpoint(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tensorboard")
    log_config = dict(interval=1, hooks=[dict(type="TensorboardLoggerHook")])
    # The first run logged iterations 1-6 and was killed; its checkpoint is at iter 4.
    for resumed_iter, steps, loss in ((0, range(1, 7), 1.0), (4, range(5, 9), 2.0)):
        writers = build_log_writers(
            log_config,
            JsonLogWriter(tmp_path / "a.log.json"),
            tmp_path,
            0,
            resumed_iter=resumed_iter,
        )
        for step in steps:
            writers.write(dict(mode="train", epoch=1, iter=step, lr=0.1, loss=loss))
        writers.close()
    assert _scalars(tmp_path / "tf_logs")["train/loss"] == [
        (1, 1.0),
        (2, 1.0),
        (3, 1.0),
        (4, 1.0),
        (5, 2.0),
        (6, 2.0),
        (7, 2.0),
        (8, 2.0),
    ]


@pytest.mark.parametrize(
    "optimizer, expected",
    [
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.8), 0.8),
        (lambda p: torch.optim.AdamW(p, lr=0.1, betas=(0.7, 0.99)), 0.7),
        (lambda p: torch.optim.Adagrad(p, lr=0.1), 0.0),
    ],
    ids=["sgd", "adamw", "none"],
)
def test_momentum_is_what_mmcv_logs(optimizer, expected: float) -> None:
    params = [torch.nn.Parameter(torch.zeros(1))]
    assert first_momentum(optimizer(params)) == pytest.approx(expected)


def test_events_of_other_ranks_and_meta_records_are_not_written(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    writer = TensorboardWriter(tmp_path / "tb", rank=2)
    writer.write(dict(mode="train", epoch=1, iter=1, lr=0.1, loss=1.0))
    writer.close()
    assert not (tmp_path / "tb").exists()
