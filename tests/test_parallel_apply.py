"""parallel_apply: per-device inputs and scattered batches, threads, errors, state carry-over."""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mmpar.collate import collate
from mmpar.data_container import DataContainer
from mmpar.parallel_apply import default_devices, parallel_apply

CPU2 = ["cpu", "cpu"]


def _samples(n: int) -> list:
    return [
        dict(
            img=DataContainer(torch.full((1, 2 + i, 3), float(i)), stack=True),
            boxes=DataContainer(torch.arange(i + 1, dtype=torch.float32)),
            meta=DataContainer(dict(idx=i), cpu_only=True),
        )
        for i in range(n)
    ]


def test_callable_per_device_inputs_results_in_device_order() -> None:
    out = parallel_apply(lambda a, b: a * 10 + b, [(1, 2), (3, 4), (5, 6)], devices=["cpu"] * 3)
    assert out == [12, 34, 56]


def test_non_tuple_entry_is_the_single_argument() -> None:
    out = parallel_apply(len, [[1, 2, 3], [4]], devices=CPU2)
    assert out == [3, 1]


def test_module_list_one_per_device() -> None:
    mods = [nn.Linear(2, 2), nn.Linear(2, 2)]
    xs = [torch.randn(3, 2), torch.randn(4, 2)]
    out = parallel_apply(mods, xs, devices=CPU2)
    for m, x, y in zip(mods, xs, out):
        torch.testing.assert_close(y, m(x))


def test_per_device_kwargs() -> None:
    out = parallel_apply(
        lambda x, scale: x * scale, [1, 2], devices=CPU2, module_kwargs=[{"scale": 3}, {"scale": 5}]
    )
    assert out == [3, 10]


def test_threads_really_run_at_the_same_time() -> None:
    # Each call waits for the other: run one after the other, they would break the barrier.
    barrier = threading.Barrier(2, timeout=10)
    names = parallel_apply(
        lambda _: (barrier.wait(), threading.current_thread().name)[1], [0, 1], devices=CPU2
    )
    assert len(set(names)) == 2


def test_results_keep_device_order_when_later_devices_finish_first() -> None:
    done_1 = threading.Event()

    def fn(i: int) -> int:
        if i == 0:
            assert done_1.wait(10)
        else:
            done_1.set()
        return i

    assert parallel_apply(fn, [0, 1], devices=CPU2) == [0, 1]


def test_single_device_runs_inline() -> None:
    on_main = parallel_apply(
        lambda _: threading.current_thread() is threading.main_thread(), [0], devices=["cpu"]
    )
    assert on_main == [True]


@pytest.mark.parametrize("grad", [True, False])
def test_grad_mode_carries_into_threads(grad: bool) -> None:
    w = torch.ones(2, requires_grad=True)
    with torch.set_grad_enabled(grad):
        out = parallel_apply(
            lambda x: (torch.is_grad_enabled(), (w * x).requires_grad), [1.0, 2.0], devices=CPU2
        )
    assert out == [(grad, grad), (grad, grad)]


def test_autocast_state_carries_into_threads() -> None:
    a = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = parallel_apply(
            lambda x: (torch.is_autocast_enabled("cpu"), (x @ x).dtype), [a, a], devices=CPU2
        )
    assert out == [(True, torch.bfloat16)] * 2
    out = parallel_apply(lambda x: (x @ x).dtype, [a, a], devices=CPU2)
    assert out == [torch.float32] * 2


def _fail_on(index: int, exc: BaseException):
    def fn(i: int) -> int:
        if i == index:
            raise exc
        return i

    return fn


@pytest.mark.parametrize(
    "exc", [ValueError("bad value"), KeyError("missing"), ZeroDivisionError("zero")]
)
def test_exception_keeps_type_and_names_the_device(exc: Exception) -> None:
    with pytest.raises(type(exc)) as info:
        parallel_apply(_fail_on(1, exc), [0, 1], devices=CPU2)
    message = str(info.value)
    assert "call 1" in message and "device cpu" in message
    assert str(exc.args[0]) in message
    assert info.value.__cause__ is exc


class _TwoArgError(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


def test_exception_that_cannot_be_rebuilt_becomes_runtime_error_chaining_it() -> None:
    original = _TwoArgError(7, "odd")
    with pytest.raises(
        RuntimeError, match=r"call 0 on device cpu raised _TwoArgError: 7: odd"
    ) as info:
        parallel_apply(_fail_on(0, original), [0, 1], devices=CPU2)
    assert info.value.__cause__ is original


def test_first_failing_device_wins() -> None:
    def fn(i: int) -> None:
        raise ValueError(f"fail {i}")

    with pytest.raises(ValueError, match="call 0 .*fail 0"):
        parallel_apply(fn, [0, 1], devices=CPU2)


def test_batch_tensor_is_scattered_and_gathered() -> None:
    x = torch.arange(10.0).reshape(5, 2)
    chunks = parallel_apply(lambda t: t * 2, x, devices=CPU2)
    assert [c.shape[0] for c in chunks] == [3, 2]
    torch.testing.assert_close(
        parallel_apply(lambda t: t * 2, x, devices=CPU2, output_device="cpu"), x * 2
    )


def test_batch_of_containers_is_unwrapped_chunk_per_device() -> None:
    batch = collate(_samples(4), samples_per_gpu=2)

    def fn(data: dict) -> dict:
        for value in data.values():
            assert not isinstance(value, DataContainer)
        return dict(
            idx=[m["idx"] for m in data["meta"]], n=[len(b) for b in data["boxes"]], img=data["img"]
        )

    out = parallel_apply(fn, (batch,), devices=CPU2)
    assert [o["idx"] for o in out] == [[0, 1], [2, 3]]
    assert [o["n"] for o in out] == [[1, 2], [3, 4]]
    assert out[0]["img"].shape == (2, 1, 3, 3) and out[1]["img"].shape == (2, 1, 5, 3)
    merged = parallel_apply(lambda d: fn(d)["idx"], (batch,), devices=CPU2, output_device=-1)
    assert merged == [0, 1, 2, 3]


def test_batch_kwargs_are_scattered_along() -> None:
    x = torch.arange(4.0)
    out = parallel_apply(lambda a, b: a + b, (x,), devices=CPU2, module_kwargs=dict(b=x * 10))
    torch.testing.assert_close(torch.cat(out), x * 11)


def test_small_batch_uses_only_the_first_devices() -> None:
    out = parallel_apply(lambda t: t.shape[0], torch.ones(1, 2), devices=["cpu"] * 3)
    assert out == [1]


@given(n=st.integers(1, 12), k=st.integers(1, 4))
@settings(max_examples=25, deadline=None)
def test_scatter_apply_gather_roundtrip(n: int, k: int) -> None:
    x = torch.randn(n, 3)
    out = parallel_apply(lambda t: t + 1, (x,), devices=["cpu"] * k, output_device="cpu")
    torch.testing.assert_close(out, x + 1)


def test_default_devices_without_cuda_is_one_cpu() -> None:
    if torch.cuda.is_available():
        assert default_devices() == [
            torch.device("cuda", i) for i in range(torch.cuda.device_count())
        ]
    else:
        assert default_devices() == [torch.device("cpu")]
        assert parallel_apply(lambda v: v + 1, [1]) == [2]


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="inputs is a list.*one entry per device \\(2\\), got 3"):
        parallel_apply(lambda v: v, [1, 2, 3], devices=CPU2)
    with pytest.raises(
        TypeError, match="fn must be a module, a list of modules or a callable, got int"
    ):
        parallel_apply(3, [1, 2], devices=CPU2)
    with pytest.raises(ValueError, match="fn is a list of 1 modules but 2 devices"):
        parallel_apply([nn.Identity()], [1, 2], devices=CPU2)
    with pytest.raises(TypeError, match="module_kwargs must be None or a list of dicts"):
        parallel_apply(lambda v: v, [1, 2], devices=CPU2, module_kwargs={"a": 1})
    with pytest.raises(ValueError, match="module_kwargs needs one dict per device"):
        parallel_apply(lambda v: v, [1, 2], devices=CPU2, module_kwargs=[{}])
    with pytest.raises(TypeError, match="with one batch, module_kwargs must be None or a dict"):
        parallel_apply(lambda v: v, (torch.ones(2),), devices=CPU2, module_kwargs=[{}])
    with pytest.raises(TypeError, match="devices"):
        parallel_apply(lambda v: v, [1], devices="cpu")


@pytest.mark.cuda
def test_cuda_threads_use_their_device_and_stream() -> None:
    n = torch.cuda.device_count()
    devices = list(range(n)) * 2 if n == 1 else list(range(n))
    inputs = [torch.ones(2, device=f"cuda:{d}") for d in devices]

    def fn(t: torch.Tensor):
        return (
            torch.cuda.current_device(),
            torch.cuda.current_stream() == torch.cuda.current_stream(t.device),
            t * 2,
        )

    out = parallel_apply(fn, inputs, devices=devices)
    assert [o[0] for o in out] == devices
    assert all(o[1] for o in out)
    assert all(o[2].device == t.device for o, t in zip(out, inputs))
