"""What the ``mmcv._ext`` stand-ins share: where a message starts, size checks, in-place
writes, and backward passes taken from mmpar's autograd (no mmcv module of its own)."""

from __future__ import annotations

from typing import Callable, Sequence, Tuple

import torch
from torch import Tensor

__all__ = ["NAME", "check_sizes", "grads_of", "where", "write"]

#: The module the entry points stand in for.
NAME = "mmcv._ext"


def where(function: str) -> str:
    """``"mmcv._ext.<function>"``: the start of every message an entry point raises."""
    return f"{NAME}.{function}"


def check_sizes(function: str, **pairs: Tuple[int, int]) -> None:
    """Raise when a size argument differs from the size of the tensor it describes.

    mmcv-full's kernels take ``b, n, m, ...`` beside the tensors and trust them (a
    mismatch reads past a buffer); here a mismatch is a ``ValueError``.

    Args:
        function: The entry point's name.
        pairs: ``name=(given, found)``.

    Raises:
        ValueError: Naming each size that differs.
    """
    wrong = [f"{n}={g} (the tensors have {f})" for n, (g, f) in pairs.items() if int(g) != f]
    if wrong:
        raise ValueError(
            f"{where(function)}: size arguments differ from the tensors: {', '.join(wrong)}"
        )


def write(function: str, name: str, target: Tensor, value: Tensor, add: bool = False) -> None:
    """Copy (or, ``add``, add) ``value`` into the caller's tensor ``target``, in place.

    Args:
        function: The entry point's name, for the message.
        name: The argument's name, for the message.
        target: The caller's output tensor; keeps its shape, dtype and storage.
        value: As many elements as ``target``, any dtype.
        add: Add into ``target`` (the kernels' atomic adds) instead of overwriting it.

    Raises:
        ValueError: ``target`` has another number of elements.
    """
    if not isinstance(target, Tensor):
        raise TypeError(
            f"{where(function)}: {name} must be a tensor, found {type(target).__name__}"
        )
    if target.numel() != value.numel():
        raise ValueError(
            f"{where(function)}: {name} must have {value.numel()} elements "
            f"{tuple(value.shape)}, found shape {tuple(target.shape)}"
        )
    value = value.detach().reshape(target.shape).to(target.dtype)
    if add:
        target.add_(value)
    else:
        target.copy_(value)


def grads_of(
    fn: Callable[..., Tensor], inputs: Sequence[Tensor], grad_out: Tensor, wrt: Sequence[int]
) -> Tuple[Tensor, ...]:
    """The gradients of ``fn(*inputs)`` for ``grad_out`` with respect to ``inputs[i]``,
    ``i`` in ``wrt`` (mmpar's ops carry mmcv's gradients in their autograd functions).

    Args:
        fn: mmpar's op, returning one tensor.
        inputs: Its tensor arguments (detached here; the caller's are left alone).
        grad_out: The gradient of the output, any shape of as many elements.
        wrt: The positions in ``inputs`` whose gradients are wanted.

    Returns:
        One gradient per ``wrt`` entry (zeros where the output does not depend on it).
    """
    args = [t.detach().requires_grad_(i in wrt) for i, t in enumerate(inputs)]
    with torch.enable_grad():
        out = fn(*args)
        grads = torch.autograd.grad(
            out, [args[i] for i in wrt], grad_out.reshape(out.shape), allow_unused=True
        )
    return tuple(torch.zeros_like(args[i]) if g is None else g for i, g in zip(wrt, grads))
