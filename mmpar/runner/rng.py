"""Seeding and the random states a checkpoint carries (python, numpy, torch)."""

from __future__ import annotations

import os
import random
import warnings
from typing import Any, Dict

import numpy as np
import torch

from mmpar.utils.checks import is_int

__all__ = ["DETERMINISTIC_CUBLAS", "set_random_seed", "get_rng_state", "set_rng_state"]

#: ``CUBLAS_WORKSPACE_CONFIG`` value that makes cuBLAS deterministic (NVIDIA's cuBLAS docs).
DETERMINISTIC_CUBLAS = ":4096:8"


def set_random_seed(seed: int, deterministic: bool = False) -> None:
    """Seed ``random``, ``numpy`` and ``torch`` (all devices).

    Args:
        seed: The seed, an int.
        deterministic: Also make torch choose deterministic algorithms
            (``torch.use_deterministic_algorithms(True)``, cuDNN benchmarking off);
            an operation without a deterministic version then raises.

    Raises:
        TypeError: ``seed`` is not an int.
    """
    if not is_int(seed):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__} {seed!r}")
    random.seed(int(seed))
    np.random.seed(int(seed) % (1 << 32))
    torch.manual_seed(int(seed))
    if deterministic:
        # cuBLAS needs this to be deterministic; it is read when CUDA starts
        # (tools/train.py sets it before anything touches CUDA).
        if "CUBLAS_WORKSPACE_CONFIG" not in os.environ and torch.cuda.is_initialized():
            warnings.warn(
                "set_random_seed(deterministic=True): CUDA is already initialised without "
                "CUBLAS_WORKSPACE_CONFIG, so cuBLAS may not be deterministic; set "
                "CUBLAS_WORKSPACE_CONFIG=:4096:8 (or call set_random_seed) before using CUDA",
                UserWarning,
                stacklevel=2,
            )
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", DETERMINISTIC_CUBLAS)
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def get_rng_state() -> Dict[str, Any]:
    """The random states of this process as tensors and plain values.

    Only tensors, ints, floats, strings, lists, tuples and dicts, so a checkpoint
    holding it loads with ``torch.load(..., weights_only=True)``.

    Returns:
        ``dict(python=(version, tuple of ints, gauss), numpy=dict(...), torch=ByteTensor,
        cuda=[ByteTensor per device])``.
    """
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return dict(
        python=random.getstate(),
        numpy=dict(
            kind=str(kind),
            keys=torch.from_numpy(keys.astype(np.int64)),
            pos=int(pos),
            has_gauss=int(has_gauss),
            gauss=float(gauss),
        ),
        torch=torch.get_rng_state(),
        cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    )


def set_rng_state(state: Dict[str, Any]) -> None:
    """Restore states saved by :func:`get_rng_state`.

    CUDA states are restored when this process sees as many devices as were saved.

    Raises:
        ValueError: ``state`` lacks one of ``python``, ``numpy``, ``torch``.
    """
    missing = [k for k in ("python", "numpy", "torch") if k not in state]
    if missing:
        raise ValueError(
            f"rng state: missing entries {missing}; expected a dict from get_rng_state()"
        )
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    keys = np.asarray(
        np_state["keys"].numpy() if isinstance(np_state["keys"], torch.Tensor) else np_state["keys"]
    )
    np.random.set_state(
        (
            np_state["kind"],
            keys.astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["gauss"],
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)
