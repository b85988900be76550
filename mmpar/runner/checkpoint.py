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

Loading also takes mmcv's checkpoints (the same layout, ``meta.mmcv_version``) and a
bare ``state_dict`` (what ``torch.save(model.state_dict(), path)`` writes); a
``module.`` prefix on every key (a state saved from a DDP wrapper) is dropped, as
mmcv's ``load_checkpoint`` does. A file that cannot be read is refused with the
reason: empty, truncated, not a PyTorch file at all.
"""

from __future__ import annotations

import os
import pickle
import shutil
import struct
import tempfile
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from mmpar.module_wrappers import unwrap_module

__all__ = [
    "atomic_write",
    "remove_stale_temporaries",
    "save_checkpoint",
    "load_checkpoint",
    "model_weights",
    "unreadable_reason",
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
        path: The file (a ``latest.pth`` symlink is followed): an mmpar or mmcv
            checkpoint, or a bare ``state_dict``.
        model: Loaded with the checkpoint's weights when given (wrappers are
            unwrapped; see :func:`model_weights`).
        optimizer: Loaded with the checkpoint's ``optimizer`` state when given.
        map_location: Where tensors are loaded.
        strict: Passed to ``load_state_dict``.

    Returns:
        The whole dict the file holds (for a bare ``state_dict``, that ``state_dict``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file cannot be read with ``weights_only=True`` (the message
            says why: empty, truncated, not a PyTorch file...), is not a dict, holds
            no weights when a model is given, or no ``optimizer`` when one is given.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"checkpoint {str(file)!r} not found")
    try:
        checkpoint = torch.load(file, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for damaged files: OSError, KeyError...
        reason = unreadable_reason(file)
        if reason is None and isinstance(exc, pickle.UnpicklingError):
            reason = (
                "not loadable with weights_only=True (it holds objects other than tensors "
                f"and plain values): {str(exc).splitlines()[-1]}"
            )
        elif reason is None:
            reason = f"unreadable, truncated or corrupt ({type(exc).__name__}: {exc})"
        raise ValueError(f"checkpoint {str(file)!r}: {reason}") from None
    if not isinstance(checkpoint, dict):
        raise ValueError(
            f"checkpoint {str(file)!r}: expected a dict, got {type(checkpoint).__name__}"
        )
    if model is not None:
        weights, _ = model_weights(checkpoint, str(file))
        unwrap_module(model).load_state_dict(weights, strict=strict)
    if optimizer is not None:
        if "optimizer" not in checkpoint:
            raise ValueError(f"checkpoint {str(file)!r}: has no 'optimizer' state to resume from")
        optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint


def _is_state_dict(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and len(value) > 0
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())
    )


def model_weights(checkpoint: Mapping[str, Any], source: str) -> Tuple[Mapping[str, Any], str]:
    """The model weights of a loaded checkpoint, and what kind of file held them.

    Args:
        checkpoint: What :func:`load_checkpoint` returned.
        source: The file, for messages.

    Returns:
        ``(state_dict, kind)``: kind is ``"an mmpar checkpoint"``, ``"an mmcv
        checkpoint"``, ``"a checkpoint"`` (a ``state_dict`` entry, no known meta) or
        ``"a bare state_dict: model weights only"``. When every key starts with
        ``module.`` (saved from a DDP wrapper), the prefix is dropped.

    Raises:
        ValueError: ``checkpoint`` has no ``state_dict`` dict and is not a state dict itself.
    """
    if isinstance(checkpoint.get("state_dict"), Mapping):
        weights = checkpoint["state_dict"]
        meta = checkpoint.get("meta")
        meta = meta if isinstance(meta, Mapping) else {}
        if "mmpar_version" in meta:
            kind = "an mmpar checkpoint"
        elif "mmcv_version" in meta:
            kind = "an mmcv checkpoint"
        else:
            kind = "a checkpoint"
    elif _is_state_dict(checkpoint):
        weights, kind = checkpoint, "a bare state_dict: model weights only"
    else:
        raise ValueError(
            f"checkpoint {source!r}: has no 'state_dict' and is not a state_dict itself "
            f"(keys: {sorted(map(str, checkpoint))[:10]})"
        )
    if weights and all(isinstance(k, str) and k.startswith("module.") for k in weights):
        weights = OrderedDict((k[len("module.") :], v) for k, v in weights.items())
    return weights, kind


_ZIP_LOCAL = b"PK\x03\x04"


def unreadable_reason(path: PathLike) -> Optional[str]:
    """Why ``path`` is no readable PyTorch file, judged from its bytes; None if it may be one.

    Returns:
        e.g. ``"empty (0 bytes)"``, ``"truncated: ..."``, ``"not a PyTorch checkpoint:
        a text file starting 'hello'"``; None when the file looks whole (the loader's
        own error then tells more).
    """
    file = Path(path)
    size = file.stat().st_size
    if size == 0:
        return "empty (0 bytes)"
    with open(file, "rb") as f:
        head = f.read(64)
    if head.startswith(_ZIP_LOCAL):
        return _zip_reason(file, size)
    if head[:1] == b"\x80":  # a pickle: torch.save's legacy (non-zip) format
        return None
    if len(head) >= 9 and head[8:9] == b"{":
        header = struct.unpack("<Q", head[:8])[0]
        if 0 < header < size:
            return "not a PyTorch checkpoint: a safetensors file (load it with safetensors)"
    # 64 bytes may end inside a multi-byte character: allow a few undecodable at the end.
    text = head.decode("utf-8", "ignore")
    is_text = len(text.encode("utf-8")) >= len(head) - 3
    if text.strip() and is_text and all(c.isprintable() or c.isspace() for c in text):
        first = text.strip().splitlines()[0]
        return f"not a PyTorch checkpoint: a text file starting {first[:40]!r}"
    return f"not a PyTorch checkpoint: it starts with the bytes {head[:8].hex(' ')}"


def _zip_reason(file: Path, size: int) -> Optional[str]:
    try:
        archive = zipfile.ZipFile(file)
    except zipfile.BadZipFile:
        # torch.save writes the archive's directory last: without it, the file was cut.
        return (
            f"truncated: the file ends after {size} bytes{_cut_inside(file)}, before the end "
            "of its zip archive (a copy or download cut short?)"
        )
    with archive:
        names = archive.namelist()
        if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            return f"not a PyTorch checkpoint: a zip archive without data.pkl (holds {names[:3]})"
        try:
            bad = archive.testzip()
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            return f"corrupt zip archive ({exc})"
    if bad is not None:
        return f"corrupt: the record {bad!r} fails its checksum"
    return None


def _cut_inside(file: Path) -> str:
    """``" inside the record 'x/data/3'"``: the last record the cut file starts, or ``""``."""
    data = file.read_bytes()
    start = data.rfind(_ZIP_LOCAL)
    if start < 0 or start + 30 > len(data):
        return ""
    name_len = struct.unpack("<H", data[start + 26 : start + 28])[0]
    name = data[start + 30 : start + 30 + name_len]
    try:
        return f" inside the record {name.decode('utf-8')!r}" if len(name) == name_len else ""
    except UnicodeDecodeError:
        return ""


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
