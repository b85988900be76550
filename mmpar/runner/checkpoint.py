"""Checkpoints: written atomically, readable with ``torch.load(..., weights_only=True)``.

A checkpoint is a dict::

    dict(
        meta=dict(epoch=..., iter=..., seed=..., config=<text>, config_dict=<dict>,
                  mmpar_version=..., time=...),
        state_dict=<model parameters and buffers, on the CPU>,
        optimizer=<optimizer.state_dict()>,
        rng=<mmpar.runner.rng.get_rng_state()>,
    )

Saving writes a temporary file in the target's directory, flushes and fsyncs
it, then renames it over the target with ``os.replace``; an interrupted or
failed save leaves the previous file untouched. ``latest.pth`` names the newest
checkpoint: a relative symlink where the file system allows, else a copy, both
switched atomically.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from mmpar.module_wrappers import unwrap_module

__all__ = [
    "atomic_write",
    "remove_stale_temporaries",
    "save_checkpoint",
    "load_checkpoint",
    "update_latest",
    "find_latest_checkpoint",
    "weights_to_cpu",
]

PathLike = Union[str, "os.PathLike[str]"]
LATEST = "latest.pth"


def weights_to_cpu(state_dict: Mapping[str, torch.Tensor]) -> "OrderedDict[str, torch.Tensor]":
    """A copy of ``state_dict`` with every tensor on the CPU (detached)."""
    return OrderedDict((k, v.detach().cpu()) for k, v in state_dict.items())


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: PathLike, write: Callable[[Any], None]) -> None:
    """Write a file through ``write(binary_file)`` so that it appears whole or not at all.

    Args:
        path: The file to create or replace.
        write: Called with a binary file open on a temporary file in the same
            directory; whatever it raises is re-raised after the temporary file is removed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(target.parent)


def remove_stale_temporaries(directory: PathLike) -> List[Path]:
    """Delete the temporary files that saves killed midway left in ``directory``.

    Call it when no save is running (before training starts). Returns the
    removed paths; they were never checkpoints (a save renames its temporary
    file only once it is whole).
    """
    removed = []
    for tmp in Path(directory).glob(".*.pth.*.tmp"):
        try:
            tmp.unlink()
            removed.append(tmp)
        except FileNotFoundError:
            pass
    return removed


def save_checkpoint(
    path: PathLike,
    model: nn.Module,
    optimizer: Optional[torch.optim.Optimizer] = None,
    meta: Optional[Mapping[str, Any]] = None,
    rng: Optional[Mapping[str, Any]] = None,
    rng_ranks: Optional[Sequence[Mapping[str, Any]]] = None,
    extra: Optional[Mapping[str, Any]] = None,
) -> None:
    """Save model, optimizer, meta data and random states atomically (see the module docstring).

    Args:
        path: Checkpoint file, e.g. ``work_dir/epoch_3.pth``.
        model: The model or its wrapper (the inner model's weights are saved).
        optimizer: Saved when given.
        meta: Plain values (``epoch``, ``iter``, ``seed``, ``config``...).
        rng: From :func:`mmpar.runner.rng.get_rng_state` (this process's states).
        rng_ranks: Every rank's states, indexed by rank, in a distributed run:
            each rank resumes its own random streams.
        extra: More top-level entries of plain values and tensors, e.g.
            ``amp=dict(scaler=...)``; they may not replace the entries above.

    Raises:
        TypeError: ``model`` is not an ``nn.Module`` or ``meta`` is not a dict.
        ValueError: ``extra`` names an entry written above.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"save_checkpoint: model must be an nn.Module, got {type(model).__name__}")
    if meta is not None and not isinstance(meta, Mapping):
        raise TypeError(f"save_checkpoint: meta must be a dict or None, got {type(meta).__name__}")
    checkpoint: Dict[str, Any] = dict(
        meta=dict(meta or {}), state_dict=weights_to_cpu(unwrap_module(model).state_dict())
    )
    if optimizer is not None:
        checkpoint["optimizer"] = optimizer.state_dict()
    if rng is not None:
        checkpoint["rng"] = dict(rng)
    if rng_ranks is not None:
        checkpoint["rng_ranks"] = [dict(r) for r in rng_ranks]
    clash = sorted(set(extra or {}) & {"meta", "state_dict", "optimizer", "rng", "rng_ranks"})
    if clash:
        raise ValueError(f"save_checkpoint: extra may not replace the entries {clash}")
    checkpoint.update(extra or {})
    atomic_write(path, lambda f: torch.save(checkpoint, f))


def load_checkpoint(
    path: PathLike,
    model: Optional[nn.Module] = None,
    optimizer: Optional[torch.optim.Optimizer] = None,
    map_location: Union[str, torch.device] = "cpu",
    strict: bool = True,
) -> Dict[str, Any]:
    """Read a checkpoint (``weights_only=True``: no code runs) and load it into a model/optimizer.

    Args:
        path: The file (a ``latest.pth`` symlink is followed).
        model: Loaded with the checkpoint's ``state_dict`` when given (wrappers are unwrapped).
        optimizer: Loaded with the checkpoint's ``optimizer`` state when given.
        map_location: Where tensors are loaded.
        strict: Passed to ``load_state_dict``.

    Returns:
        The whole checkpoint dict.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file cannot be read with ``weights_only=True``, is not a dict, or
            lacks ``state_dict`` or ``optimizer`` when they are to be loaded.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"checkpoint {str(file)!r} not found")
    try:
        checkpoint = torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ValueError(
            f"checkpoint {str(file)!r}: not loadable with weights_only=True (it holds objects "
            f"other than tensors and plain values, or is not a checkpoint): "
            f"{str(exc).splitlines()[-1]}"
        ) from None
    except (RuntimeError, EOFError) as exc:  # a truncated or corrupt zip archive
        raise ValueError(
            f"checkpoint {str(file)!r}: unreadable, truncated or corrupt ({exc})"
        ) from None
    if not isinstance(checkpoint, dict):
        raise ValueError(
            f"checkpoint {str(file)!r}: expected a dict, got {type(checkpoint).__name__}"
        )
    if model is not None:
        if "state_dict" not in checkpoint:
            raise ValueError(
                f"checkpoint {str(file)!r}: has no 'state_dict' (keys: {sorted(checkpoint)})"
            )
        unwrap_module(model).load_state_dict(checkpoint["state_dict"], strict=strict)
    if optimizer is not None:
        if "optimizer" not in checkpoint:
            raise ValueError(f"checkpoint {str(file)!r}: has no 'optimizer' state to resume from")
        optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint


def update_latest(checkpoint: PathLike, link_name: str = LATEST) -> Path:
    """Point ``<dir of checkpoint>/latest.pth`` at ``checkpoint``.

    A relative symlink is made under a temporary name and renamed over the old
    one; where symlinks are not allowed, the file is copied atomically instead.

    Returns:
        The path of the link (or copy).
    """
    target = Path(checkpoint)
    link = target.parent / link_name
    tmp = target.parent / f".{link_name}.{os.getpid()}.tmp"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(target.name, tmp)
        os.replace(tmp, link)
    except OSError:
        if tmp.is_symlink():
            tmp.unlink()
        atomic_write(link, lambda f: _copy_into(target, f))
    return link


def _copy_into(source: Path, f: Any) -> None:
    with open(source, "rb") as src:
        shutil.copyfileobj(src, f)


def find_latest_checkpoint(work_dir: PathLike) -> Optional[Path]:
    """The newest checkpoint of ``work_dir``: ``latest.pth`` if it resolves, else the
    ``epoch_N.pth`` with the largest N, else None."""
    directory = Path(work_dir)
    latest = directory / LATEST
    if latest.is_file():  # follows the symlink; False for a dangling one
        return latest
    epochs = []
    for p in directory.glob("epoch_*.pth"):
        try:
            epochs.append((int(p.stem.split("_", 1)[1]), p))
        except ValueError:
            continue
    return max(epochs)[1] if epochs else None
