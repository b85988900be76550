"""--cfg-options key checks: known keys, '+' additions, class parameters, close matches."""

from __future__ import annotations

import pytest

from mmpar.config import Config
from mmpar.config.option_keys import (
    check_option_keys,
    matches_pattern,
    option_paths,
    split_added,
)
from mmpar.runner.config_checks import check_test_config, check_train_config
from mmpar.runner.tool_keys import TOOL_KEYS, registered_type_accepts

BASE = dict(
    model=dict(type="TinyDet", width=32),
    optimizer=dict(type="AdamW", lr=0.003),
    runner=dict(max_epochs=8),
    data=dict(samples_per_gpu=4, workers_per_gpu=0, train=dict(type="SyntheticShapes")),
    pipeline=[dict(type="Resize"), dict(type="Pad")],
)


def check(options: dict) -> None:
    """Apply ``options`` to BASE as the tools do, then check their keys."""
    plain, added = split_added(options)
    cfg = Config(BASE)
    cfg.merge_from_dict(plain)
    check_option_keys(BASE, cfg.to_dict(), plain, TOOL_KEYS, added, registered_type_accepts)


def test_keys_of_the_config_and_of_the_schema_are_known() -> None:
    check({"runner.max_epochs": 2, "pipeline.1.type": "Pad", "data.train.type": "X"})
    check({"amp": {"dtype": "float16", "loss_scale": {"init_scale": 1024.0}}})
    check({"fp16.loss_scale": 512.0, "cudnn_benchmark": True, "channels_last": True})
    check({"compile": True})
    check({"compile.options": {"triton.cudagraphs": True}, "compile.mode": "reduce-overhead"})
    check({"optimizer_config": {"grad_clip": None, "cumulative_iters": 4, "type": "X"}})


@pytest.mark.parametrize(
    "options, unknown, close",
    [
        ({"runner.max_epoch": 2}, "runner.max_epoch", "runner.max_epochs"),
        ({"runner": {"max_epoch": 2}}, "runner.max_epoch", "runner.max_epochs"),
        ({"amp.dtpye": "float16"}, "amp.dtpye", "amp.dtype"),
        ({"optimizer_config.cumulative_iter": 2}, "optimizer_config.cumulative_iter", None),
        ({"model.widht": 64}, "model.widht", "model.width"),
    ],
)
def test_unknown_keys_are_refused_with_close_matches(options, unknown, close) -> None:
    with pytest.raises(ValueError, match=f"unknown key '{unknown}'") as info:
        check(options)
    assert f"+{unknown}=" in str(info.value)
    if close is not None:
        assert f"'{close}'" in str(info.value)


def test_plus_adds_any_key_and_everything_below_it() -> None:
    check({"+my_key": 1, "+extra": {"deep": {"er": 2}}})
    assert split_added({"+a.b": 1, "c": 2}) == ({"a.b": 1, "c": 2}, {"a.b"})
    with pytest.raises(ValueError, match="KEY=VALUE"):
        split_added({"+": 1})


def test_parameters_of_the_class_a_dict_builds_are_known() -> None:
    check({"optimizer.type": "SGD", "optimizer.momentum": 0.9})  # judged against SGD
    with pytest.raises(ValueError, match="optimizer.momentum"):
        check({"optimizer.momentum": 0.9})  # AdamW has no momentum
    check({"model.num_classes": 5, "data.train.num_samples": 3})
    assert not registered_type_accepts({"type": "NoSuchThing"}, "x")
    assert not registered_type_accepts({}, "x")


def test_patterns_and_paths() -> None:
    assert matches_pattern("compile.options.a.b", "compile.options.**")
    assert not matches_pattern("compile.options", "compile.options.**")
    assert matches_pattern("a.x.c", "a.*.c") and not matches_pattern("a.x", "a.*.c")
    assert option_paths("a", {"b": {"c": 1}, "_delete_": True}) == ["a", "a.b", "a.b.c"]


@pytest.mark.parametrize(
    "change, error, words",
    [
        ({"runner.max_epochs": -1}, ValueError, ["runner.max_epochs", "-1"]),
        ({"runner.max_epochs": True}, TypeError, ["runner.max_epochs", "bool"]),
        ({"optimizer.lr": "abc"}, TypeError, ["optimizer.lr", "'abc'"]),
        ({"optimizer.lr": -0.1}, ValueError, ["optimizer.lr", "-0.1"]),
        ({"data.samples_per_gpu": 0}, ValueError, ["data.samples_per_gpu", "0"]),
        ({"data.workers_per_gpu": 1.5}, TypeError, ["data.workers_per_gpu", "1.5"]),
        ({"+checkpoint_config.interval": -1}, ValueError, ["checkpoint_config.interval"]),
        ({"+log_config.interval": 0}, ValueError, ["log_config.interval"]),
        ({"+seed": -5}, ValueError, ["seed", "-5"]),
        ({"data": {"_delete_": True}}, ValueError, ["data.train", "missing"]),
        ({"runner": 3}, TypeError, ["runner", "dict"]),
    ],
)
def test_train_config_values_are_checked(change, error, words) -> None:
    plain, _ = split_added(change)
    cfg = Config(BASE)
    cfg.merge_from_dict(plain)
    with pytest.raises(error) as info:
        check_train_config(cfg, splits=("train",))
    assert all(w in str(info.value) for w in words), str(info.value)


def test_good_configs_pass_and_test_needs_data_test() -> None:
    check_train_config(Config(BASE), splits=("train",))
    with pytest.raises(ValueError, match="data.val: missing"):
        check_train_config(Config(BASE))
    with pytest.raises(ValueError, match="data.test: missing"):
        check_test_config(Config(BASE))
