"""resolve_device / resolve_targets: the spellings of a target."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from mmpar import resolve_device, resolve_targets


@pytest.mark.parametrize(
    "target", [-1, "cpu", "cpu:0", torch.device("cpu"), torch.device("cpu", 0)]
)
def test_cpu_spellings(target: Any) -> None:
    assert resolve_device(target) == torch.device("cpu")


def test_repeated_and_mixed_targets() -> None:
    assert resolve_targets(["cpu", -1, torch.device("cpu")]) == [torch.device("cpu")] * 3
    assert resolve_targets((-1,)) == [torch.device("cpu")]


@pytest.mark.parametrize(
    "target, exc, pattern",
    [
        ("npu", ValueError, r"where: unknown device 'npu'"),
        ("", ValueError, r"where: unknown device ''"),
        ("meta", ValueError, r"where: only CPU and CUDA targets are supported, got meta"),
        (torch.device("meta"), ValueError, r"where: only CPU and CUDA"),
        (-2, ValueError, r"where: a device index is -1 \(CPU\) or >= 0, got -2"),
        (True, TypeError, r"where: expected an int, str or torch.device, got bool"),
        (None, TypeError, r"where: expected an int, str or torch.device, got NoneType"),
        (1.0, TypeError, r"where: .*got float"),
    ],
)
def test_bad_target(target: Any, exc: type, pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        resolve_device(target, "where")


@pytest.mark.parametrize(
    "targets, exc, pattern",
    [
        ([], ValueError, "gpus: needs at least one target"),
        ((), ValueError, "gpus: needs at least one target"),
        (0, TypeError, "gpus: expected a list of targets"),
        ("cpu", TypeError, "gpus: expected a list of targets"),
        (torch.device("cpu"), TypeError, "gpus: expected a list of targets"),
        (None, TypeError, "gpus: expected a list of targets"),
        (["cpu", "x"], ValueError, r"gpus\[1\]: unknown device 'x'"),
    ],
)
def test_bad_target_lists(targets: Any, exc: type, pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        resolve_targets(targets, "gpus")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on machines without CUDA")
@pytest.mark.parametrize("target", [0, 3, "cuda", "cuda:1", torch.device("cuda", 0)])
def test_cuda_without_cuda(target: Any) -> None:
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device(target)


@pytest.mark.cuda
def test_cuda_spellings() -> None:
    assert (
        resolve_device(0)
        == resolve_device("cuda:0")
        == resolve_device(torch.device("cuda", 0))
        == torch.device("cuda", 0)
    )
    assert resolve_device("cuda").index == torch.cuda.current_device()
    with pytest.raises(ValueError, match="CUDA device"):
        resolve_device(torch.cuda.device_count())
