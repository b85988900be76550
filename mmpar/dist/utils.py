"""Query the default process group and share values across its ranks.

Everything here also works without a process group, as a world of one process
(rank 0 of 1), so the same code runs in single-process tests and tools.
"""

from __future__ import annotations

import functools
import gc
from typing import Any, Callable, Optional, Tuple, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from mmpar.utils.checks import is_int

__all__ = [
    "barrier",
    "collective_device",
    "destroy_dist",
    "get_dist_info",
    "is_distributed",
    "is_main_process",
    "master_only",
    "sync_random_seed",
]

_INT64_MAX = 2**63 - 1

F = TypeVar("F", bound=Callable[..., Any])


def is_distributed() -> bool:
    """Return whether a default process group is up in this process."""
    return dist.is_available() and dist.is_initialized()


# --------------------------------------------------------------------------- #
# Querying the group
# --------------------------------------------------------------------------- #
def get_dist_info() -> Tuple[int, int]:
    """Return ``(rank, world_size)``; ``(0, 1)`` without a process group."""
    if is_distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_process() -> bool:
    """Return whether this process is rank 0 (always true without a group)."""
    return get_dist_info()[0] == 0


def master_only(func: F) -> F:
    """Decorate ``func`` to run on rank 0 only; other ranks get ``None``.

    No barrier is involved: the other ranks return at once.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if is_main_process():
            return func(*args, **kwargs)
        return None

    return wrapper  # type: ignore[return-value]


def barrier() -> None:
    """Wait for every rank; a no-op without a process group."""
    if is_distributed():
        dist.barrier()


def destroy_dist() -> None:
    """Leave the process group cleanly; a no-op without one.

    Drop your references to DDP wrappers first. A wrapper caught in a reference
    cycle still holds the group until the garbage collector runs, and with gloo
    destroying a group under a live reducer can abort the process at exit
    ("terminate called without an active exception"): so collect garbage, wait
    for every rank, then destroy the group.
    """
    if not is_distributed():
        return
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


# --------------------------------------------------------------------------- #
# Sharing values
# --------------------------------------------------------------------------- #
def collective_device() -> torch.device:
    """Device that tensors of a collective must live on for the current backend."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sync_random_seed(seed: Optional[int] = None) -> int:
    """Return one seed that every rank agrees on.

    With a process group, rank 0's ``seed`` (or, when it is ``None``, a value
    drawn from ``np.random.randint(2**31)``) is broadcast and every rank
    returns it; the other ranks' ``seed`` arguments are ignored. Without a
    group, ``seed`` itself or a fresh random value is returned. Every rank
    must call it (it is a collective).

    Args:
        seed: An int in ``[-2**63, 2**63)`` or ``None``.

    Returns:
        The agreed seed.

    Raises:
        TypeError: ``seed`` is not an int or ``None``.
        ValueError: ``seed`` does not fit into 64 bits.
    """
    if seed is not None:
        if not is_int(seed):
            raise TypeError(f"seed: expected an int or None, got {type(seed).__name__}")
        seed = int(seed)
        if not -_INT64_MAX - 1 <= seed <= _INT64_MAX:
            raise ValueError(f"seed: expected a 64-bit integer, got {seed}")
    else:
        seed = int(np.random.randint(2**31))
    if not is_distributed():
        return seed
    value = torch.tensor(
        seed if dist.get_rank() == 0 else 0, dtype=torch.int64, device=collective_device()
    )
    dist.broadcast(value, src=0)
    return int(value.item())
