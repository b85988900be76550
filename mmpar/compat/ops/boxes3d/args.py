"""The argument checks of the 3D box ops (not an mmcv module).

Each raises one line that starts with ``mmcv.ops.<op>: `` and names the parameter,
what was expected and what was found: a ``TypeError`` for a wrong type or dtype, a
``ValueError`` for a wrong shape, device or value.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

from torch import Tensor

__all__ = ["BOX_LAYOUT", "check_same", "check_tensor", "check_threshold"]

#: The columns of mmcv's 3D boxes, for the messages.
BOX_LAYOUT = "(x, y, z, x_size, y_size, z_size, rz)"


def check_tensor(op: str, name: str, value: Any, shape: Sequence[Any], layout: str = "") -> Tensor:
    """``value`` if it is a floating-point tensor of ``shape``.

    Args:
        op: The op's mmcv name, e.g. ``"points_in_boxes_part"``.
        name: The parameter's name.
        value: The argument.
        shape: One entry per dimension: an int that the size must equal, or a
            string (a symbol, e.g. ``"B"``) for any size.
        layout: The columns, for the message, e.g. :data:`BOX_LAYOUT`.

    Raises:
        TypeError: ``value`` is not a floating-point tensor.
        ValueError: ``value`` has another shape.
    """
    if not isinstance(value, Tensor):
        raise TypeError(
            f"mmcv.ops.{op}: {name} must be a torch.Tensor, found {type(value).__name__}"
        )
    if not value.is_floating_point():
        raise TypeError(f"mmcv.ops.{op}: {name} must be floating point, found {value.dtype}")
    fits = value.dim() == len(shape) and all(
        isinstance(want, str) or size == want for size, want in zip(value.shape, shape)
    )
    if not fits:
        expected = "(" + ", ".join(str(s) for s in shape) + ")"
        described = f"{expected} {layout}".rstrip()
        raise ValueError(
            f"mmcv.ops.{op}: {name} must have shape {described}, found {tuple(value.shape)}"
        )
    return value


def check_same(op: str, dims: Sequence[tuple], dtype: bool = True, **tensors: Tensor) -> None:
    """Raises unless ``tensors`` share their device (and dtype) and the named sizes.

    Args:
        op: The op's mmcv name.
        dims: ``(label, (name, dim), (name, dim), ...)`` entries: sizes that must be
            equal, e.g. ``("batch size", ("points", 0), ("boxes", 0))``.
        dtype: Whether the dtypes must be equal too.
        **tensors: The tensors by parameter name, the first one the reference.
    """
    names = list(tensors)
    first = tensors[names[0]]
    for name in names[1:]:
        other = tensors[name]
        if other.device != first.device:
            raise ValueError(
                f"mmcv.ops.{op}: {names[0]} and {name} must be on the same device, "
                f"found {first.device} and {other.device}"
            )
        if dtype and other.dtype != first.dtype:
            raise TypeError(
                f"mmcv.ops.{op}: {names[0]} and {name} must have the same dtype, "
                f"found {first.dtype} and {other.dtype}"
            )
    for label, *where in dims:
        sizes = [tensors[name].shape[dim] for name, dim in where]
        if len(set(sizes)) > 1:
            said = " and ".join(f"{name} ({size})" for (name, _), size in zip(where, sizes))
            raise ValueError(f"mmcv.ops.{op}: {said} must have the same {label}")


def check_threshold(op: str, name: str, value: Any) -> float:
    """``value`` as a float: a real number (a one-number tensor too), not NaN.

    Raises:
        TypeError: not a real number (a bool is not).
        ValueError: NaN.
    """
    if isinstance(value, Tensor) and value.numel() == 1 and not value.is_complex():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"mmcv.ops.{op}: {name} must be a real number, found {type(value).__name__} {value!r}"
        )
    number = float(value)
    if math.isnan(number):
        raise ValueError(f"mmcv.ops.{op}: {name} must be a number, found nan")
    return number
