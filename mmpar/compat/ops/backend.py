"""What every stand-in op shares: torchvision's kernels, and how an op says no.

mmpar's ops are built on ``torchvision.ops`` and plain torch; mmpar compiles
nothing. torchvision is optional (the ``mmcv-ops`` extra): an op that needs it
imports it through :func:`torchvision_ops`, which says how to install it. The
ops also share here their dtype checks, the dtype they compute in, how they
take mmcv's deprecated keyword names, and the error of a bad argument.
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

import torch
from torch import Tensor

__all__ = [
    "ArgumentError",
    "INSTALL_HINT",
    "UnsupportedOpError",
    "check_float",
    "check_float_tensors",
    "check_int",
    "check_layer_input",
    "float_compute_dtype",
    "renamed_kwargs",
    "torchvision_ops",
    "unsupported",
]

_F = TypeVar("_F", bound=Callable[..., Any])

INSTALL_HINT = (
    'pip install -e ".[mmcv-ops]" (or pip install torchvision, the build that matches your torch)'
)


class UnsupportedOpError(NotImplementedError):
    """An op, or a mode of an op, that mmpar's stand-in for ``mmcv.ops`` does not supply."""


class ArgumentError(ValueError, AssertionError):
    """A bad argument; an ``AssertionError`` too, because mmcv 1.x asserts its arguments.

    Code and tests written against mmcv catch ``AssertionError`` where mmcv asserts
    (an unknown mode, channels not divisible by ``groups``, ...); mmpar's ops raise
    this there, with their one-line message, so that both ``except ValueError``
    and ``except AssertionError`` catch it.
    """


def unsupported(op: str, param: str, found: Any, supported: str) -> UnsupportedOpError:
    """The one-line error for a parameter value that mmpar's op does not support.

    Args:
        op: The op's mmcv name, e.g. ``"nms"``.
        param: The parameter, e.g. ``"offset"``.
        found: The value that was given.
        supported: What mmpar supports, e.g. ``"offset=0"``.

    Returns:
        The error, for the caller to raise.
    """
    return UnsupportedOpError(
        f"mmcv.ops.{op}: {param}={found!r} is not supported by mmpar's ops (only {supported}); "
        f"change {param}, or install an mmcv-full whose compiled ops load for your torch "
        "(then mmpar keeps mmcv's ops)"
    )


def torchvision_ops() -> ModuleType:
    """``torchvision.ops``, with its compiled kernels loaded.

    Raises:
        ImportError: torchvision is not installed, or its kernels do not load
            for this torch (a torchvision built for another torch).
    """
    try:
        import torchvision.ops as ops
    except ImportError as err:
        raise ImportError(
            f"mmpar's mmcv.ops need torchvision, which could not be imported ({err}); "
            + INSTALL_HINT
        ) from err
    if not hasattr(torch.ops.torchvision, "nms"):
        raise ImportError(
            "mmpar's mmcv.ops need torchvision's compiled kernels, which did not load "
            "(torchvision::nms does not exist: this torchvision was built for another torch); "
            + INSTALL_HINT
        )
    return ops


def check_float(op: str, **tensors: Tensor | None) -> None:
    """Raises ``TypeError`` for a given tensor that is not floating point.

    Args:
        op: The op's mmcv name, for the message.
        **tensors: The tensors by argument name; None (an absent optional) passes.
    """
    for name, tensor in tensors.items():
        if tensor is not None and not tensor.is_floating_point():
            raise TypeError(f"mmcv.ops.{op}: {name} must be floating point, found {tensor.dtype}")


def check_float_tensors(op: str, device: torch.device, owner: str, **tensors: Any) -> None:
    """Raises unless each given tensor is a floating-point tensor on ``device``.

    Args:
        op: The op's name as the message gives it, e.g. ``"mmcv.ops.masked_conv2d"``.
        device: The device they must be on.
        owner: Whose device that is, for the message, e.g. ``"features'"``.
        **tensors: The tensors by argument name; None (an absent optional) passes.

    Raises:
        TypeError: one is not a tensor, or not floating point.
        ValueError: one is on another device.
    """
    for name, tensor in tensors.items():
        if tensor is None:
            continue
        if not isinstance(tensor, Tensor) or not tensor.is_floating_point():
            found = tensor.dtype if isinstance(tensor, Tensor) else type(tensor).__name__
            raise TypeError(f"{op}: {name} must be a floating-point tensor, found {found}")
        if tensor.device != device:
            raise ValueError(
                f"{op}: {name} must be on {owner} device {device}, found {tensor.device}"
            )


def check_int(
    op: str, name: str, value: Any, minimum: int, error: type[ValueError] = ValueError
) -> int:
    """``value`` as an int, or a one-line error naming ``op`` and ``name``.

    Args:
        op: The op's name as the message gives it, e.g. ``"mmcv.ops.carafe"``.
        name: The argument's name.
        value: An int (anything with ``__index__`` but a bool).
        minimum: The smallest value allowed.
        error: The class raised for a value below ``minimum`` (``ArgumentError``
            where mmcv asserts the range).

    Returns:
        ``value`` as an int.

    Raises:
        TypeError: ``value`` is not an int.
        ValueError: (``error``) ``value`` is below ``minimum``.
    """
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None:
        raise TypeError(f"{op}: {name} must be an int, found {value!r}")
    if number < minimum:
        raise error(f"{op}: {name} must be an int >= {minimum}, found {value!r}")
    return number


def check_layer_input(op: str, name: str, x: Tensor, weight: Tensor) -> None:
    """Raises unless a layer whose parameter is ``weight`` can take ``x``.

    Outside autocast, ``x`` must have the dtype and device of the layer's
    parameters: torch's own layers would fail deep inside a matmul or a conv.

    Args:
        op: The op's name as the message gives it, e.g. ``"mmcv.ops.SumCell"``.
        name: The argument's name.
        x: The input tensor.
        weight: One of the layer's parameters.

    Raises:
        TypeError: ``x``'s dtype is not ``weight``'s (and autocast is off).
        ValueError: ``x`` is not on ``weight``'s device.
    """
    if x.device != weight.device:
        raise ValueError(
            f"{op}: {name} must be on the layer's device {weight.device}, found {x.device}"
        )
    if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(
            f"{op}: {name} must have the layer's dtype {weight.dtype} (or run under autocast), "
            f"found {x.dtype}"
        )


def float_compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype an op computes ``dtype`` in: float64 stays, any other dtype is float32.

    float16 and bfloat16 inputs are computed in float32; the op casts its result back.
    """
    return torch.float64 if dtype == torch.float64 else torch.float32


def renamed_kwargs(
    renames: dict[str, str], conflict: str, owner: str | None = None
) -> Callable[[_F], _F]:
    """A decorator that lets a function take mmcv's deprecated keyword names.

    A deprecated name is renamed, with mmcv's ``DeprecationWarning``; giving it
    together with its new name is a ``TypeError``.

    Args:
        renames: Deprecated name -> new name.
        conflict: The ``TypeError``'s message, a ``str.format`` template of
            ``owner``, ``old`` and ``new``.
        owner: The name the messages give the function; None for its ``__name__``.

    Returns:
        The decorator.
    """

    def decorate(func: _F) -> _F:
        name = func.__name__ if owner is None else owner

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(conflict.format(owner=name, old=old, new=new))
                warnings.warn(
                    f'"{old}" is deprecated in `{name}`, please use "{new}" instead',
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
