"""mmpar.compat.ops.info: honest build information for mmcv's collect_env."""

from __future__ import annotations

import re

import torch

from mmpar.compat.ops import info


def test_compiler_version_is_torchs_and_says_so():
    version = info.get_compiler_version()
    assert f"torch {torch.__version__}'s build" in version
    assert "mmpar's ops are not compiled" in version
    shown = re.search(
        r"^\s*-\s*((?:GCC|clang|MSVC|Apple clang)\s+\S+)\s*$", torch.__config__.show(), re.M
    )
    assert version.startswith(shown.group(1) if shown else "unknown compiler")


def test_compiler_version_without_a_named_compiler(monkeypatch):
    monkeypatch.setattr(
        torch.__config__, "show", lambda: "PyTorch built with:\n  - OpenMP 201511\n"
    )
    assert info.get_compiler_version().startswith("unknown compiler (torch ")

    def broken():
        raise RuntimeError("no config")

    monkeypatch.setattr(torch.__config__, "show", broken)
    assert info.get_compiler_version().startswith("unknown compiler")


def test_cuda_version(monkeypatch):
    version = info.get_compiling_cuda_version()
    if torch.version.cuda:
        assert version.startswith(f"{torch.version.cuda} (torch ")
    elif getattr(torch.version, "hip", None):
        assert version.startswith(f"HIP {torch.version.hip} (torch ")
    else:
        assert version.startswith("not available (torch ")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    cpu_only = info.get_compiling_cuda_version()
    assert cpu_only.startswith("not available") and "built without CUDA" in cpu_only
    monkeypatch.setattr(torch.version, "hip", "6.1.0", raising=False)
    assert info.get_compiling_cuda_version().startswith("HIP 6.1.0 (torch ")
    monkeypatch.setattr(torch.version, "cuda", "12.1")
    assert info.get_compiling_cuda_version().startswith("12.1 (torch ")


def test_no_onnxruntime_ops():
    assert info.get_onnxruntime_op_path() == ""
    assert sorted(info.__all__) == [
        "get_compiler_version",
        "get_compiling_cuda_version",
        "get_onnxruntime_op_path",
    ]
