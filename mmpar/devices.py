"""Targets: what ``target_gpus`` / ``target_device`` arguments may hold."""

from __future__ import annotations

from typing import List, Sequence, Union

import torch

__all__ = ["Target", "resolve_device", "resolve_targets"]

#: One target: a CUDA index (``-1`` = the CPU), a device string or a ``torch.device``.
Target = Union[int, str, torch.device]


def resolve_device(target: Target, argument: str = "target") -> torch.device:
    """Turn one target into a ``torch.device`` and check that it exists.

    Args:
        target: ``-1`` or ``"cpu"`` for the CPU, ``k`` or ``"cuda:k"`` for GPU ``k``,
            or a ``torch.device``.
        argument: Name used in error messages.

    Returns:
        The device; a CUDA device always carries its index.

    Raises:
        TypeError: ``target`` is of another type.
        ValueError: an unknown device string or type, a negative index other than
            -1, or a CUDA device on a machine without CUDA or beyond its count.
    """
    if isinstance(target, bool):
        raise TypeError(f"{argument}: expected an int, str or torch.device, got bool {target!r}")
    if isinstance(target, int):
        if target == -1:
            return torch.device("cpu")
        if target < 0:
            raise ValueError(f"{argument}: a device index is -1 (CPU) or >= 0, got {target}")
        device = torch.device("cuda", target)
    elif isinstance(target, (str, torch.device)):
        try:
            device = torch.device(target)
        except RuntimeError as err:
            raise ValueError(f"{argument}: unknown device {target!r} ({err})") from None
    else:
        raise TypeError(
            f"{argument}: expected an int, str or torch.device, got {type(target).__name__} "
            f"{target!r}"
        )
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise ValueError(f"{argument}: only CPU and CUDA targets are supported, got {device}")
    if not torch.cuda.is_available():
        raise ValueError(
            f"{argument}: {device} requested but CUDA is not available on this machine"
        )
    index = torch.cuda.current_device() if device.index is None else device.index
    if index >= torch.cuda.device_count():
        raise ValueError(
            f"{argument}: {device} requested but only {torch.cuda.device_count()} CUDA device(s) "
            "exist"
        )
    return torch.device("cuda", index)


def resolve_targets(targets: Sequence[Target], argument: str = "target_gpus") -> List[torch.device]:
    """Resolve a non-empty list of targets; a target may appear more than once.

    Raises:
        TypeError: ``targets`` is not a list or tuple, or holds a bad entry.
        ValueError: ``targets`` is empty, or an entry names no usable device.
    """
    if isinstance(targets, (int, str, torch.device)) or not isinstance(targets, (list, tuple)):
        raise TypeError(
            f"{argument}: expected a list of targets such as [0, 1], [-1] or ['cpu'], "
            f"got {type(targets).__name__} {targets!r}"
        )
    if len(targets) == 0:
        raise ValueError(f"{argument}: needs at least one target, got an empty list")
    return [resolve_device(t, f"{argument}[{i}]") for i, t in enumerate(targets)]
