"""One config in this process: build, one training step, one test batch, checked.

What differs from codebase to codebase (the builder, the batches, the steps, the
result's form) is the :class:`~mmpar_zoo.codebase.Codebase`'s.

:func:`run_config` never raises: its result (a JSON-able dict) says PASS, FAIL
with the stage and the error, or SKIP with the reason.
"""

from __future__ import annotations

import random
import re
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence

from mmpar_zoo.codebase import Codebase
from mmpar_zoo.config import import_custom_modules, needed_package

#: What ``mmcv.runner``'s checkpoint loader refuses in the child: nothing may be downloaded.
NO_CHECKPOINT = (
    "the zoo run loads no checkpoint (found {!r}): every pretrained weight should have been "
    "stripped from the config"
)


def _no_downloads(empty: bool = False) -> None:
    """Make every checkpoint load (and so every download) an error in this process.

    Args:
        empty: Answer mmcv's checkpoint loads with an empty state dict instead
            (``Codebase.loss_networks``); torch.hub's are still refused.
    """
    import torch.hub
    from mmcv.runner.checkpoint import CheckpointLoader

    def refuse(filename: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(NO_CHECKPOINT.format(filename))

    def answer(cls: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
        return {} if empty else refuse(filename)

    CheckpointLoader.load_checkpoint = classmethod(answer)
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
    codebase: Codebase,
    path: Path,
    rel: str,
    configs_root: Path,
    seed: int,
    config_rois: bool = False,
    build_only: bool = False,
) -> Dict[str, Any]:
    """Build, train one step and test one batch; the result as a JSON-able dict.

    Args:
        codebase: The codebase whose config it is.
        path: The config file.
        rel: Its path relative to ``configs_root`` (``<model dir>/<name>.py``).
        configs_root: The folder of model directories.
        seed: The seed of Python's, numpy's and torch's generators, and of the batch.
        config_rois: Keep the config's numbers of RoIs, proposals and detections.
        build_only: Only build the model (as the codebase's ``build_only`` does).

    Returns:
        ``config``, ``dir``, ``times`` and ``cpu`` (seconds per stage), ``status``,
        and ``reason`` (SKIP) or ``stage``, ``error`` and ``traceback`` (FAIL).
    """
    result: Dict[str, Any] = {"config": rel, "dir": model_dir(rel), "times": {}, "cpu": {}}
    stage = "config"
    try:
        _no_downloads(empty=bool(codebase.loss_networks))
        _seed(seed)
        cfg = codebase.load_config(path)
        if "model" not in cfg:
            return dict(result, status="SKIP", reason="no model (a dataset or schedule config)")
        package = needed_package(cfg, codebase.optional)
        if package is not None:
            return dict(result, status="SKIP", reason=f"needs {package}")
        stage = "build"
        import_custom_modules(cfg)
        model = _timed(
            result, "build", lambda: codebase.build_model(cfg, configs_root, config_rois)
        )
        if build_only or codebase.build_only:
            return dict(result, status="PASS")
        stage = "batch"
        train_data, test_data, expect = codebase.make_batches(cfg, seed)
        stage = "train"
        _timed(result, "train", lambda: codebase.train_step(model, train_data, cfg))
        stage = "test"
        output = _timed(result, "test", lambda: codebase.test_step(model, test_data))
        stage = "check"
        codebase.check_result(output, expect, test_data)
    except Exception as exc:
        package = _missing_optional(exc, codebase.optional)
        if package is not None:
            return dict(result, status="SKIP", reason=f"needs {package}")
        missing = _missing_file(exc) if stage == "build" else None
        if missing is not None:  # a model that reads data the codebase does not ship
            return dict(result, status="SKIP", reason=f"needs the file {missing}")
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return dict(
            result,
            status="FAIL",
            stage=stage,
            error=f"{type(exc).__name__}: {_explain(one_line(exc))}",
            traceback="".join(lines)[-4000:],
        )
    return dict(result, status="PASS")


def model_dir(rel: str) -> str:
    """A config's model directory: the folder it is in, relative to the configs' root."""
    return rel.rsplit("/", 1)[0] if "/" in rel else "."


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


def _missing_file(exc: BaseException) -> Optional[str]:
    """The file whose absence ``exc`` reports (mmcv's registry keeps the message only)."""
    if not isinstance(exc, FileNotFoundError):
        return None
    match = re.search(r"No such file or directory: '([^']+)'", str(exc))
    return exc.filename or (match.group(1) if match else None)


def _missing_optional(exc: BaseException, optional: Sequence[str]) -> Optional[str]:
    """The optional package (of ``optional``) whose absence ``exc`` reports, if any."""
    text = str(exc)
    name = getattr(exc, "name", None) or ""
    for package in optional:
        if isinstance(exc, ImportError) and (
            name.split(".")[0] == package or f"pip install {package}" in text
        ):
            return package
        if isinstance(exc, KeyError) and f"{package}." in text and "not in the" in text:
            return package
    return None
