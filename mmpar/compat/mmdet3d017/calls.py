"""What every mmdet3d 0.17 extension stand-in shares: size checks, in-place writes and
backward passes taken from mmpar's autograd (not an mmdet3d module)."""

from __future__ import annotations

from typing import Callable, Sequence, Tuple

import torch
from torch import Tensor

__all__ = ["check_sizes", "grads_of", "write"]


def check_sizes(where: str, **pairs: Tuple[int, int]) -> None:
    """Raise when a size argument differs from the size of the tensor it describes.

    The C++ entry points take ``b, n, m, ...`` beside the tensors and trust them; a
    mismatch there reads past a buffer. Here it is a ``ValueError``.

    Args:
        where: ``"<module>.<function>"``, the start of the message.
        pairs: ``name=(given, found)``.

    Raises:
        ValueError: naming each size that differs.
    """
    wrong = [f"{n}={g} (the tensors have {f})" for n, (g, f) in pairs.items() if int(g) != f]
    if wrong:
        raise ValueError(f"{where}: size arguments differ from the tensors: {', '.join(wrong)}")


def write(where: str, name: str, target: Tensor, value: Tensor, add: bool = False) -> None:
    """Copy (or add) ``value`` into the caller's output tensor ``target``, in place.

    Raises:
        ValueError: ``target`` cannot hold ``value`` (another element count).
    """
    if target.numel() != value.numel():
        raise ValueError(
            f"{where}: {name} must have {value.numel()} elements {tuple(value.shape)}, "
            f"found {tuple(target.shape)}"
        )
    value = value.reshape(target.shape).to(target.dtype)
    if add:
        target.add_(value)
    else:
        target.copy_(value)


def grads_of(
    fn: Callable[..., Tensor], inputs: Sequence[Tensor], grad_out: Tensor, wrt: Sequence[int]
) -> Tuple[Tensor, ...]:
    """The gradients of ``fn(*inputs)`` for ``grad_out`` with respect to ``inputs[i]``,
    ``i`` in ``wrt`` (mmpar's ops carry mmcv's gradients in their autograd functions)."""
    args = [t.detach().requires_grad_(i in wrt) for i, t in enumerate(inputs)]
    with torch.enable_grad():
        out = fn(*args)
        return torch.autograd.grad(out, [args[i] for i in wrt], grad_out.reshape(out.shape))
