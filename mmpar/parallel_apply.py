"""parallel_apply: run a function on several devices at once, one thread each."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from mmpar.devices import Target, resolve_targets
from mmpar.gather import gather
from mmpar.scatter_gather import scatter_kwargs

__all__ = ["default_devices", "parallel_apply", "scatter_batch"]

Fn = Union[nn.Module, Sequence[nn.Module], Callable[..., Any]]


def default_devices() -> List[torch.device]:
    """Every visible CUDA device, or one CPU target on a machine without CUDA."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [torch.device("cpu")]


def parallel_apply(
    fn: Fn,
    inputs: Any,
    devices: Optional[Sequence[Target]] = None,
    output_device: Optional[Target] = None,
    dim: int = 0,
    module_kwargs: Optional[Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]] = None,
) -> Any:
    """Call ``fn`` once per device, in parallel threads, and collect the results.

    How ``inputs`` is read (the rule is the type of ``inputs``):

    * a ``list`` holds **per-device inputs**, one entry per device, already placed.
      An entry that is a ``tuple`` is the positional arguments of that call; any
      other entry is its single argument. ``module_kwargs`` is then None or a list
      with one dict per device.
    * anything else is **one batch**, split with mmpar's container-aware
      :func:`~mmpar.scatter_gather.scatter_kwargs` over ``devices`` first: a
      ``tuple`` is the positional arguments, any other object (tensor, dict,
      :class:`~mmpar.data_container.DataContainer`...) the single argument;
      ``module_kwargs`` is then None or one dict, scattered along. To pass a list
      as one batch, wrap it: ``(my_list,)``. A batch smaller than the number of
      devices uses only the first devices.

    Args:
        fn: A module or any callable (called for every device), or a list of
            modules with one per device (e.g. from ``torch.nn.parallel.replicate``).
        inputs: Per-device inputs (a list) or one batch, see above.
        devices: Targets (``0``, ``"cuda:1"``, ``-1``/``"cpu"``, torch.device);
            repeats allowed. Default: every visible CUDA device, or ``["cpu"]``.
        output_device: When given, the results are merged onto it with mmpar's
            :func:`~mmpar.gather.gather` (tensors concatenated along
            ``dim``); when None the list of results is returned.
        dim: Dimension to scatter the batch along and to gather results along.
        module_kwargs: Keyword arguments, see above.

    Returns:
        ``[result on devices[0], result on devices[1], ...]`` in device order, or
        their gathered merge when ``output_device`` is given.

    Raises:
        TypeError: ``fn`` is not callable; ``module_kwargs`` has the wrong form.
        ValueError: lengths of ``fn``, ``inputs``, ``module_kwargs`` and ``devices``
            disagree; a bad device.
        Exception: what ``fn`` raised on a device, re-raised with the same type and
            the device named in its message (a ``RuntimeError`` chaining the
            original when that type cannot be rebuilt from a message).

    Each thread runs under the caller's grad mode and autocast state; on CUDA it
    also makes its device current and runs on that device's current stream.
    """
    targets = default_devices() if devices is None else resolve_targets(devices, "devices")
    if isinstance(inputs, list):
        args, kwargs = _per_device(inputs, module_kwargs, len(targets))
    else:
        args, kwargs = scatter_batch(inputs, module_kwargs, targets, dim)
        targets = targets[: len(args)]
    fns = _functions(fn, len(targets))
    results = _run_all(fns, args, kwargs, targets)
    if output_device is None:
        return results
    return gather(results, output_device, dim=dim)


def _per_device(
    inputs: List[Any], module_kwargs: Any, n_devices: int
) -> Tuple[List[Tuple[Any, ...]], List[Dict[str, Any]]]:
    if len(inputs) != n_devices:
        raise ValueError(
            f"parallel_apply: inputs is a list, read as per-device inputs, so it needs one entry "
            f"per device ({n_devices}), got {len(inputs)}; pass one batch as a tuple "
            "(e.g. (batch,)) to have it scattered, or give matching devices"
        )
    args = [x if isinstance(x, tuple) else (x,) for x in inputs]
    if module_kwargs is None:
        return args, [{} for _ in inputs]
    if not isinstance(module_kwargs, (list, tuple)) or not all(
        isinstance(k, Mapping) for k in module_kwargs
    ):
        raise TypeError(
            "parallel_apply: with per-device inputs (a list), module_kwargs must be None or a list "
            f"of dicts, one per device, got {type(module_kwargs).__name__}"
        )
    if len(module_kwargs) != n_devices:
        raise ValueError(
            f"parallel_apply: module_kwargs needs one dict per device ({n_devices}), got "
            f"{len(module_kwargs)}"
        )
    return args, [dict(k) for k in module_kwargs]


def scatter_batch(
    inputs: Any,
    module_kwargs: Any,
    targets: List[torch.device],
    dim: int,
    caller: str = "parallel_apply",
) -> Tuple[List[Tuple[Any, ...]], List[Dict[str, Any]]]:
    """One batch (a tuple of arguments, or the single argument) and its keyword
    arguments cut over ``targets``: per used target, an argument tuple and a kwargs dict.

    Raises:
        TypeError: ``module_kwargs`` is neither None nor a dict.
    """
    if module_kwargs is not None and not isinstance(module_kwargs, Mapping):
        raise TypeError(
            f"{caller}: with one batch, module_kwargs must be None or a dict (scattered along "
            f"with the batch), got {type(module_kwargs).__name__}"
        )
    batch = inputs if isinstance(inputs, tuple) else (inputs,)
    chunks, kw_chunks = scatter_kwargs(batch, dict(module_kwargs or {}), targets, dim=dim)
    return [tuple(c) for c in chunks], [dict(k) for k in kw_chunks]


def _functions(fn: Fn, n: int) -> List[Callable[..., Any]]:
    if isinstance(fn, (list, tuple, nn.ModuleList)):
        if len(fn) < n:
            raise ValueError(
                f"parallel_apply: fn is a list of {len(fn)} modules but {n} devices are used; "
                "give one module per device"
            )
        bad = [i for i, f in enumerate(fn) if not callable(f)]
        if bad:
            raise TypeError(
                f"parallel_apply: fn[{bad[0]}] is not callable: {type(fn[bad[0]]).__name__}"
            )
        return list(fn)[:n]
    if not callable(fn):
        raise TypeError(
            "parallel_apply: fn must be a module, a list of modules or a callable, got "
            f"{type(fn).__name__}"
        )
    return [fn] * n


def _run_all(
    fns: List[Callable[..., Any]],
    args: List[Tuple[Any, ...]],
    kwargs: List[Dict[str, Any]],
    targets: List[torch.device],
) -> List[Any]:
    state = _CallerState()
    results: List[Any] = [None] * len(fns)
    errors: List[Optional[BaseException]] = [None] * len(fns)

    def work(i: int) -> None:
        try:
            with state.enter(targets[i]):
                results[i] = fns[i](*args[i], **kwargs[i])
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller below
            errors[i] = exc

    if len(fns) == 1:
        work(0)
    else:
        threads = [
            threading.Thread(target=work, args=(i,), name=f"parallel_apply-{i}")
            for i in range(len(fns))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for i, err in enumerate(errors):
        if err is not None:
            _reraise(err, i, targets[i])
    return results


class _CallerState:
    """Grad mode, autocast state and CUDA streams of the calling thread."""

    def __init__(self) -> None:
        self.grad_enabled = torch.is_grad_enabled()
        self.autocast = {
            kind: (torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
            for kind in (("cpu", "cuda") if torch.cuda.is_available() else ("cpu",))
        }
        self.streams: Dict[int, Any] = {}
        if torch.cuda.is_available():
            self.streams = {
                i: torch.cuda.current_stream(i) for i in range(torch.cuda.device_count())
            }

    def enter(self, device: torch.device) -> ExitStack:
        stack = ExitStack()
        stack.enter_context(torch.set_grad_enabled(self.grad_enabled))
        for kind, (enabled, dtype) in self.autocast.items():
            stack.enter_context(torch.autocast(kind, dtype=dtype, enabled=enabled))
        if device.type == "cuda":
            stack.enter_context(torch.cuda.device(device))
            stack.enter_context(torch.cuda.stream(self.streams[device.index]))
        return stack


def _reraise(err: BaseException, index: int, device: torch.device) -> None:
    """Raise ``err`` again with ``index``/``device`` in its message, keeping its type."""
    original = err.args[0] if isinstance(err, KeyError) and len(err.args) == 1 else str(err)
    message = (
        f"parallel_apply: call {index} on device {device} raised {type(err).__name__}: {original}"
    )
    try:
        new = type(err)(message)
    except Exception:  # noqa: BLE001 - constructor needs other arguments
        new = RuntimeError(message)
    raise new.with_traceback(err.__traceback__) from err
