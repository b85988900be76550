"""One config in this process: build, one training step, one test batch, checked.

:func:`run_config` never raises: its result (a JSON-able dict) says PASS, FAIL
with the stage and the error, or SKIP with the reason.
"""

from __future__ import annotations

import random
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from mmpar_zoo.batch import make_batches
from mmpar_zoo.checks import StageError, check_result
from mmpar_zoo.config import (
    OPTIONAL_PACKAGES,
    import_custom_modules,
    limit_rois,
    load_config,
    needed_package,
    strip_pretrained,
)
from mmpar_zoo.needs import Needs

#: What ``mmcv.runner``'s checkpoint loader refuses in the child: nothing may be downloaded.
NO_CHECKPOINT = (
    "the zoo run loads no checkpoint (found {!r}): every pretrained weight should have been "
    "stripped from the config"
)


def _no_downloads() -> None:
    """Make every checkpoint load (and so every download) an error in this process."""
    import torch.hub
    from mmcv.runner.checkpoint import CheckpointLoader

    def refuse(filename: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(NO_CHECKPOINT.format(filename))

    CheckpointLoader.load_checkpoint = classmethod(lambda cls, filename, *a, **k: refuse(filename))
    torch.hub.load_state_dict_from_url = refuse
    torch.hub.download_url_to_file = refuse


def _seed(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _timed(result: Dict[str, Any], stage: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, its wall time put in ``result["times"]``, its CPU time in ``result["cpu"]``."""
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    result["times"][stage] = time.perf_counter() - start
    result["cpu"][stage] = time.process_time() - cpu
    return out


def run_config(
    path: Path, rel: str, configs_root: Path, seed: int, config_rois: bool = False
) -> Dict[str, Any]:
    """Build, train one step and test one batch; the result as a JSON-able dict.

    Args:
        path: The config file.
        rel: Its path relative to ``configs_root`` (``<dir>/<name>.py``).
        configs_root: The folder of model directories.
        seed: The seed of Python's, numpy's and torch's generators, and of the batch.
        config_rois: Keep the config's numbers of RoIs, proposals and detections.

    Returns:
        ``config``, ``dir``, ``times`` and ``cpu`` (seconds per stage), ``status``,
        and ``reason`` (SKIP) or ``stage``, ``error`` and ``traceback`` (FAIL).
    """
    result: Dict[str, Any] = {"config": rel, "dir": rel.split("/")[0], "times": {}, "cpu": {}}
    stage = "config"
    try:
        _no_downloads()
        _seed(seed)
        cfg = load_config(path)
        if "model" not in cfg:
            return dict(result, status="SKIP", reason="no model (a dataset or schedule config)")
        package = needed_package(cfg)
        if package is not None:
            return dict(result, status="SKIP", reason=f"needs {package}")
        stage = "build"
        import_custom_modules(cfg)
        model = _timed(result, "build", lambda: build_model(cfg, configs_root, config_rois))
        stage = "batch"
        needs = Needs(cfg)
        train_data, test_data = make_batches(needs, seed)
        stage = "train"
        _timed(result, "train", lambda: train_step(model, train_data))
        stage = "test"
        output = _timed(result, "test", lambda: test_step(model, test_data))
        stage = "check"
        check_result(output, needs, test_data)
    except Exception as exc:
        package = _missing_optional(exc)
        if package is not None:
            return dict(result, status="SKIP", reason=f"needs {package}")
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return dict(
            result,
            status="FAIL",
            stage=stage,
            error=f"{type(exc).__name__}: {_explain(one_line(exc))}",
            traceback="".join(lines)[-4000:],
        )
    return dict(result, status="PASS")


def one_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's message on one line, at most ``limit`` characters.

    Args:
        exc: The exception (a KeyError's key is shown unquoted).
        limit: The most characters kept; a longer message ends in ``...``.
    """
    text = " ".join(
        (str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)).split()
    )
    if len(text) > limit:
        return text[: limit - 3] + "..."
    return text or "(no message)"


def _explain(message: str) -> str:
    """Say what torch's message in a forked child means where there is no GPU at all.

    ``import mmcv`` queries CUDA, so torch calls every forked child a bad fork for
    CUDA and answers its first CUDA call so, not with "no GPU".
    """
    import torch

    if "re-initialize CUDA in forked subprocess" in message and torch.cuda.device_count() == 0:
        return f"the model calls CUDA, and this machine has no GPU (torch: {message})"
    return message


def _missing_optional(exc: BaseException) -> Optional[str]:
    """The optional package (mmcls, timm, sklearn) whose absence ``exc`` reports, if any."""
    text = str(exc)
    name = getattr(exc, "name", None) or ""
    for package in OPTIONAL_PACKAGES:
        if isinstance(exc, ImportError) and (
            name.split(".")[0] == package or f"pip install {package}" in text
        ):
            return package
        if isinstance(exc, KeyError) and f"{package}." in text and "not in the" in text:
            return package
    return None


def build_model(cfg: Any, configs_root: Path, config_rois: bool = False) -> Any:
    """The config's detector, without pretrained weights, its weights initialized.

    Args:
        cfg: The config, changed in place (RoIs limited unless ``config_rois``,
            pretrained weights and ``load_from``/``resume_from`` dropped).
        configs_root: The folder of model directories (for teachers' configs).
        config_rois: Keep the config's numbers of RoIs, proposals and detections.
    """
    from mmdet.models import build_detector

    if not config_rois:
        limit_rois(cfg)
    strip_pretrained(cfg.model, configs_root)
    cfg.load_from = None
    cfg.resume_from = None
    model = build_detector(cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg"))
    model.init_weights()
    return model


def _wrap(model: Any) -> Any:
    from mmpar import MMDataParallel

    return MMDataParallel(model, device_ids=["cpu"])


def train_step(model: Any, data: Any) -> None:
    """One training step through ``mmpar.MMDataParallel``: forward, losses, backward.

    Raises:
        StageError: The loss is not finite, or no parameter got a non-zero gradient.
    """
    import torch

    model.train()
    outputs = _wrap(model).train_step(data, optimizer=None)
    loss = outputs["loss"]
    if not isinstance(loss, torch.Tensor) or not bool(torch.isfinite(loss).all()):
        raise StageError(f"the loss is not finite: {outputs.get('log_vars')}")
    loss.backward()
    if not any(p.grad is not None and bool(p.grad.any()) for p in model.parameters()):
        raise StageError("no parameter got a non-zero gradient")


def test_step(model: Any, data: Any) -> Any:
    """The model's output for the test batch (``return_loss=False, rescale=True``)."""
    import torch

    model.eval()
    with torch.no_grad():
        return _wrap(model)(return_loss=False, rescale=True, **data)
