"""What built the ops (``mmcv.ops.info``), as mmcv's ``collect_env`` reports it.

mmcv-full reports the compiler and CUDA version its extension was built with.
mmpar's ops compile nothing: they run torch's and torchvision's kernels, so
these report torch's build, and say so. There are no onnxruntime custom ops.
"""

from __future__ import annotations

import re

import torch

__all__ = ["get_compiler_version", "get_compiling_cuda_version", "get_onnxruntime_op_path"]

_COMPILER = re.compile(r"^\s*-\s*((?:GCC|clang|MSVC|Apple clang)\s+\S+)\s*$", re.MULTILINE)


def _note() -> str:
    return f"torch {torch.__version__}'s build; mmpar's ops are not compiled, they run on torch"


def get_compiler_version() -> str:
    """The compiler of torch's build (e.g. ``"GCC 13.3 (torch 2.4.0's build; ...)"``).

    Returns:
        The compiler named in ``torch.__config__.show()`` (``"unknown compiler"``
        when it names none), with a note that it is torch's.
    """
    try:
        config = torch.__config__.show()
    except Exception:  # a build whose config cannot be shown still has ops to run
        config = ""
    found = _COMPILER.search(config)
    compiler = found.group(1) if found else "unknown compiler"
    return f"{compiler} ({_note()} and torchvision)"


def get_compiling_cuda_version() -> str:
    """The CUDA (or HIP) version of torch's build, or ``"not available ..."`` without one.

    Returns:
        ``torch.version.cuda`` (or ``torch.version.hip``) with a note that it is
        torch's; starts with ``"not available"``, as mmcv's does, for a CPU-only torch.
    """
    cuda = getattr(torch.version, "cuda", None)
    hip = getattr(torch.version, "hip", None)
    if cuda:
        return f"{cuda} ({_note()} and torchvision)"
    if hip:
        return f"HIP {hip} ({_note()} and torchvision)"
    return f"not available ({_note()} and torchvision, built without CUDA)"


def get_onnxruntime_op_path() -> str:
    """``""``: mmpar has no onnxruntime custom-op library (as mmcv without one built)."""
    return ""
