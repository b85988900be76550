"""Checkpoints: atomic saves, weights_only loading, latest.pth, random states."""

from __future__ import annotations

import os
import random
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from mmpar.data_parallel import MMDataParallel
from mmpar.runner import checkpoint as ckpt_module
from mmpar.runner.checkpoint import (
    atomic_write,
    find_latest_checkpoint,
    load_checkpoint,
    model_weights,
    save_checkpoint,
    unreadable_reason,
    update_latest,
)
from mmpar.runner.rng import get_rng_state, set_random_seed, set_rng_state


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))


def trained_pair(seed: int = 0):
    model = make_model(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(2, 3, 8, 8)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_round_trip_with_weights_only(tmp_path: Path) -> None:
    model, optimizer = trained_pair()
    path = tmp_path / "epoch_1.pth"
    save_checkpoint(
        path,
        MMDataParallel(model, device_ids=["cpu"]),
        optimizer,
        meta=dict(epoch=1, iter=5, seed=3, config="x = 1"),
        rng=get_rng_state(),
    )
    raw = torch.load(path, weights_only=True)
    assert set(raw) == {"meta", "state_dict", "optimizer", "rng"} and raw["meta"]["iter"] == 5
    assert all(not k.startswith("module.") for k in raw["state_dict"])  # the wrapper is unwrapped
    other, other_opt = trained_pair(seed=1)
    load_checkpoint(path, other, other_opt)
    for key, value in model.state_dict().items():
        assert torch.equal(other.state_dict()[key], value)
    assert other_opt.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_failed_save_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, optimizer = trained_pair()
    path = tmp_path / "epoch_1.pth"
    save_checkpoint(path, model, optimizer, meta=dict(epoch=1))
    good = path.read_bytes()

    def half_written(obj, f):
        f.write(b"PK\x03\x04 partial checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(ckpt_module.torch, "save", half_written)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, optimizer, meta=dict(epoch=2))
    monkeypatch.undo()
    assert path.read_bytes() == good
    assert load_checkpoint(path)["meta"]["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["epoch_1.pth"]  # no temporary file left behind


def test_atomic_write_interrupted_by_keyboard_interrupt(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")

    def interrupted(f):
        f.write(b"new")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, interrupted)
    assert target.read_bytes() == b"old" and len(list(tmp_path.iterdir())) == 1


def test_latest_symlink_and_copy_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = trained_pair()
    for epoch in (1, 2):
        save_checkpoint(tmp_path / f"epoch_{epoch}.pth", model, meta=dict(epoch=epoch))
        link = update_latest(tmp_path / f"epoch_{epoch}.pth")
    assert link.is_symlink() and os.readlink(link) == "epoch_2.pth"
    assert find_latest_checkpoint(tmp_path) == link
    assert load_checkpoint(link)["meta"]["epoch"] == 2

    def no_symlinks(*args, **kwargs):
        raise OSError("symlinks not supported")

    monkeypatch.setattr(ckpt_module.os, "symlink", no_symlinks)
    save_checkpoint(tmp_path / "epoch_3.pth", model, meta=dict(epoch=3))
    link = update_latest(tmp_path / "epoch_3.pth")
    assert not link.is_symlink() and load_checkpoint(link)["meta"]["epoch"] == 3


def test_find_latest_without_link(tmp_path: Path) -> None:
    assert find_latest_checkpoint(tmp_path) is None
    for name in ("epoch_2.pth", "epoch_10.pth", "epoch_x.pth"):
        (tmp_path / name).write_bytes(b"")
    assert find_latest_checkpoint(tmp_path) == tmp_path / "epoch_10.pth"


def test_rng_state_round_trip_through_a_checkpoint(tmp_path: Path) -> None:
    set_random_seed(7)
    path = tmp_path / "rng.pth"
    save_checkpoint(path, nn.Linear(1, 1), rng=get_rng_state())
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    set_random_seed(99)
    set_rng_state(load_checkpoint(path)["rng"])
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected
    with pytest.raises(ValueError, match=r"missing entries \['numpy'\]"):
        set_rng_state(dict(python=random.getstate(), torch=torch.get_rng_state()))


def test_load_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.pth"):
        load_checkpoint(tmp_path / "nope.pth")
    unsafe = tmp_path / "unsafe.pth"
    torch.save(dict(meta=dict(obj=Path("x"))), unsafe)  # a class instance: refused by weights_only
    with pytest.raises(ValueError, match="weights_only=True"):
        load_checkpoint(unsafe)
    weights_only = tmp_path / "weights.pth"
    torch.save(dict(state_dict=nn.Linear(1, 1).state_dict()), weights_only)
    with pytest.raises(ValueError, match="no 'optimizer'"):
        load_checkpoint(
            weights_only, nn.Linear(1, 1), torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)
        )
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        save_checkpoint(tmp_path / "x.pth", "model")
    whole = tmp_path / "whole.pth"
    save_checkpoint(whole, nn.Linear(2, 2))
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    size = truncated.stat().st_size
    with pytest.raises(ValueError, match=f"truncated.pth': truncated: the file ends after {size} "):
        load_checkpoint(truncated)


def test_model_weights_of_each_kind(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    mmpar_style = tmp_path / "mmpar.pth"
    save_checkpoint(mmpar_style, model, meta=dict(mmpar_version="0", epoch=1))
    bare = tmp_path / "bare.pth"
    torch.save(model.state_dict(), bare)
    mmcv_style = tmp_path / "mmcv.pth"
    wrapped = {f"module.{k}": v for k, v in model.state_dict().items()}
    torch.save(dict(meta=dict(mmcv_version="1.7.2"), state_dict=wrapped), mmcv_style)
    kinds = {mmpar_style: "an mmpar checkpoint", bare: "a bare state_dict", mmcv_style: "an mmcv"}
    for path, kind in kinds.items():
        weights, found = model_weights(load_checkpoint(path), str(path))
        assert found.startswith(kind) and sorted(weights) == ["bias", "weight"]
        other = nn.Linear(2, 2)
        load_checkpoint(path, other)
        assert torch.equal(other.weight, model.weight)
    with pytest.raises(ValueError, match="has no 'state_dict' and is not a state_dict"):
        model_weights(dict(meta={}, epoch=3), "x.pth")


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "empty (0 bytes)"),
        (b"model: resnet\n", "a text file starting 'model: resnet'"),
        (b"\x10\x00\x00\x00\x00\x00\x00\x00{}" + b" " * 14, "a safetensors file"),
        (bytes(range(200, 256)), "it starts with the bytes c8 c9"),
    ],
)
def test_unreadable_files_say_why(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "x.pth"
    path.write_bytes(content)
    assert reason in unreadable_reason(path)
    with pytest.raises(ValueError, match=re.escape(reason)):
        load_checkpoint(path)


def test_a_zip_that_is_no_checkpoint_says_so(tmp_path: Path) -> None:
    path = tmp_path / "x.pth"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hi")
    assert "a zip archive without data.pkl" in unreadable_reason(path)
    whole = tmp_path / "whole.pth"
    save_checkpoint(whole, nn.Linear(2, 2))
    assert unreadable_reason(whole) is None
