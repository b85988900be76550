"""Checks of the config values that training and testing consume, each naming its key.

``runner.max_epochs=-1`` or ``optimizer.lr='abc'`` would otherwise start a run that
trains nothing, or fail deep inside the optimizer. These checks run where the
config is consumed (:func:`mmpar.runner.apis.train_model`) and, earlier, in the
tools, so that a bad value is one line naming the key and the value.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional, Sequence, Tuple

from mmpar.registry import DATASETS, MODELS, OPTIMIZERS, TRANSFORMS, Registry
from mmpar.runner.log_hooks import check_log_config
from mmpar.runner.lr_schedule import check_lr_config
from mmpar.utils.checks import is_int, is_number

__all__ = ["check_registered_types", "check_test_config", "check_train_config", "lookup"]

_MISSING = object()


def lookup(cfg: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    """The value at dotted ``key``; ``default`` (or an error) where a part is missing.

    Raises:
        TypeError: a part on the way is not a dict.
        ValueError: the key is missing and no default is given.
    """
    node: Any = cfg
    walked = []
    for part in key.split("."):
        if not isinstance(node, Mapping):
            where = ".".join(walked)
            raise TypeError(
                f"{where}: expected a dict (with {part!r}), got {type(node).__name__} {node!r}"
            )
        walked.append(part)
        if part not in node or node[part] is None:
            if default is _MISSING:
                raise ValueError(f"{key}: missing from the config")
            return default
        node = node[part]
    return node


def _as_mapping(cfg: Any) -> Mapping[str, Any]:
    """A :class:`mmpar.config.Config` as the plain dict it holds; a mapping as it is."""
    return cfg if isinstance(cfg, Mapping) else cfg.to_dict()


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def _int_at_least(cfg: Mapping[str, Any], key: str, minimum: int, what: str, default: Any) -> None:
    value = lookup(cfg, key, default)
    if value is None:
        return
    if not is_int(value):
        raise TypeError(f"{key}: expected an int >= {minimum} ({what}), got {_describe(value)}")
    if value < minimum:
        raise ValueError(f"{key}: expected an int >= {minimum} ({what}), got {value}")


def _dict_at(cfg: Mapping[str, Any], key: str, needed: Sequence[str], tool: str) -> Mapping:
    try:
        node = lookup(cfg, key)
    except ValueError:
        raise ValueError(
            f"{key}: missing from the config; {tool} needs {', '.join(needed)}"
        ) from None
    if not isinstance(node, Mapping):
        raise TypeError(f"{key}: expected a dict, got {_describe(node)}")
    return node


def _check_data(cfg: Mapping[str, Any], splits: Sequence[str], tool: str) -> None:
    needed = ["data." + s for s in splits] + ["data.samples_per_gpu", "data.workers_per_gpu"]
    _dict_at(cfg, "data", needed, tool)
    for split in splits:
        node = _dict_at(cfg, f"data.{split}", needed, tool)
        if "type" not in node:
            raise ValueError(f"data.{split}.type: missing; name the dataset, e.g. 'CocoDetection'")
    _int_at_least(cfg, "data.samples_per_gpu", 1, "images per process and batch", _MISSING)
    _int_at_least(cfg, "data.workers_per_gpu", 0, "DataLoader workers per process", _MISSING)
    _int_at_least(cfg, "data.test_samples_per_gpu", 1, "images per batch when testing", None)
    persistent = lookup(cfg, "data.persistent_workers", False)
    if not isinstance(persistent, bool):
        raise TypeError(
            f"data.persistent_workers: expected True or False, got {_describe(persistent)}"
        )


def _check_model(cfg: Mapping[str, Any], tool: str) -> None:
    node = _dict_at(cfg, "model", ["model.type"], tool)
    if "type" not in node:
        raise ValueError("model.type: missing; name the model, e.g. 'TinyDet'")


def _typed_fields(
    cfg: Mapping[str, Any], splits: Sequence[str], optimizer: bool
) -> Iterator[Tuple[str, Any, Registry]]:
    """(field, type given, registry that must know it) for what the tools build by name."""
    model = cfg.get("model")
    if isinstance(model, Mapping):
        yield "model.type", model.get("type"), MODELS
    data = cfg.get("data")
    for split in splits:
        node = data.get(split) if isinstance(data, Mapping) else None
        if not isinstance(node, Mapping):
            continue
        yield f"data.{split}.type", node.get("type"), DATASETS
        pipeline = node.get("pipeline")
        if isinstance(pipeline, (list, tuple)):
            for i, step in enumerate(pipeline):
                if isinstance(step, Mapping):
                    yield f"data.{split}.pipeline[{i}].type", step.get("type"), TRANSFORMS
    if optimizer and isinstance(cfg.get("optimizer"), Mapping):
        yield "optimizer.type", cfg["optimizer"].get("type"), OPTIMIZERS


def check_registered_types(
    cfg: Any, splits: Sequence[str] = ("train", "val"), optimizer: bool = True
) -> None:
    """Check that every ``type`` the tools build by name is registered, before any work.

    Checked: ``model.type``, ``data.<split>.type`` and the ``type`` of each step of
    ``data.<split>.pipeline``, and ``optimizer.type`` when ``optimizer`` is True. A
    type given as a class, or missing, is left to the builders.

    Raises:
        KeyError: a type is not registered; the message names the field, the type and
            the closest registered names.
    """
    cfg = _as_mapping(cfg)
    for field, kind, registry in _typed_fields(cfg, splits, optimizer):
        if isinstance(kind, str) and kind not in registry:
            try:
                registry.get(kind)
            except KeyError as exc:
                raise KeyError(f"{field}: {exc.args[0]}") from None


def check_train_config(cfg: Any, splits: Sequence[str] = ("train", "val")) -> None:
    """Check what training reads: data, model, optimizer, epochs, intervals, ``lr_config``,
    and that the types of the model, datasets, pipelines and optimizer are registered.

    Args:
        cfg: The config (a :class:`mmpar.config.Config` or a dict).
        splits: The datasets (``data.<split>``) that must be configured; none where
            the datasets are given already built.

    Raises:
        TypeError: a value of the wrong type, or a dict expected where there is none.
        ValueError: a required key is missing, or a value is out of range.
        KeyError: a type is not registered (see :func:`check_registered_types`).
    """
    tool = "training"
    cfg = _as_mapping(cfg)
    _check_data(cfg, splits, tool)
    _check_model(cfg, tool)
    optimizer = _dict_at(cfg, "optimizer", ["optimizer.type", "optimizer.lr"], tool)
    lr = optimizer.get("lr")
    if not is_number(lr) or not lr > 0:
        kind = TypeError if not is_number(lr) else ValueError
        raise kind(f"optimizer.lr: expected a number > 0 (the learning rate), got {_describe(lr)}")
    _dict_at(cfg, "runner", ["runner.max_epochs"], tool)
    _int_at_least(cfg, "runner.max_epochs", 1, "epochs to train", _MISSING)
    _int_at_least(cfg, "checkpoint_config.interval", 0, "epochs between checkpoints", None)
    _int_at_least(cfg, "evaluation.interval", 0, "epochs between evaluations, 0: at the end", None)
    _int_at_least(cfg, "log_config.interval", 1, "iterations between log lines", None)
    check_log_config(cfg.get("log_config"))
    _check_seed(cfg.get("seed"))
    check_lr_config(cfg.get("lr_config"))
    check_registered_types(cfg, splits, optimizer=True)


def check_test_config(cfg: Any) -> None:
    """Check what testing reads: ``data.test``, the batch sizes and workers, ``model``,
    and that their types are registered.

    Raises:
        TypeError: a value of the wrong type.
        ValueError: a required key is missing, or a value is out of range.
        KeyError: a type is not registered (see :func:`check_registered_types`).
    """
    cfg = _as_mapping(cfg)
    _check_data(cfg, ["test"], "testing")
    _check_model(cfg, "testing")
    check_registered_types(cfg, ["test"], optimizer=False)


def _check_seed(seed: Optional[Any]) -> None:
    if seed is not None and (not is_int(seed) or seed < 0):
        raise ValueError(f"seed: expected an int >= 0 or None, got {_describe(seed)}")
