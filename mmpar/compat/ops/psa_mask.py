"""The point-wise spatial attention mask of PSANet, as ``mmcv.ops.psa_mask``.

A pure rearrangement (two gathers), so it is exact, differentiable, and works
in every dtype on every device (mmcv-full's kernels take float32/float64 only).

For a feature map of H x W and a mask of h_mask x w_mask (half sizes
``hh = (h_mask - 1) // 2``, ``hw = (w_mask - 1) // 2``), input channel
``i * w_mask + j`` at position (y, x) is the attention between (y, x) and
(y + i - hh, x + j - hw). ``collect`` writes it to output channel
``(y + i - hh) * W + (x + j - hw)`` at (y, x); ``distribute`` to output
channel ``y * W + x`` at (y + i - hh, x + j - hw). Pairs that fall outside
the map are dropped; output entries that no pair reaches are zero. A NaN is
moved as any value is (to the entry its pair reaches, or dropped with it).

An unknown ``psa_type`` and an input whose channels are not ``h_mask * w_mask``
raise ``ArgumentError`` (mmcv asserts both): a ``ValueError`` and an
``AssertionError``.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import ArgumentError

__all__ = ["PSAMask", "PSAMaskFunction", "psa_mask"]

_TYPES = {"collect": 0, "distribute": 1}


def _pair(mask_size: Union[int, tuple[int, int], list[int], None]) -> tuple[int, int]:
    if isinstance(mask_size, int) and not isinstance(mask_size, bool) and mask_size > 0:
        return mask_size, mask_size
    if (
        isinstance(mask_size, (tuple, list))
        and len(mask_size) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in mask_size)
    ):
        return int(mask_size[0]), int(mask_size[1])
    raise ValueError(
        f"mmcv.ops.psa_mask: mask_size must be a positive int or (h_mask, w_mask) of them, "
        f"found {mask_size!r}"
    )


def _psa_type_enum(psa_type: Union[int, str]) -> int:
    if isinstance(psa_type, str) and psa_type in _TYPES:
        return _TYPES[psa_type]
    if isinstance(psa_type, int) and not isinstance(psa_type, bool) and psa_type in (0, 1):
        return int(psa_type)
    raise ArgumentError(
        f"mmcv.ops.psa_mask: psa_type must be 0 / 'collect' or 1 / 'distribute', found {psa_type!r}"
    )


def _shifts(size: int, mask: int, device: torch.device) -> tuple[Tensor, Optional[Tensor]]:
    """Mask indices along one axis, and where they are real.

    Returns ``(index, outside)``: ``index[o, s]`` (o: output position, s:
    source position, both in [0, size)) is the mask entry ``o - s + half``,
    clamped into [0, mask); ``outside[o, s]`` is True where it had to be
    clamped (that pair is farther apart than the mask reaches), or None when
    the mask reaches every pair.
    """
    half = (mask - 1) // 2
    pos = torch.arange(size, device=device)
    index = pos[:, None] - pos[None, :] + half
    if half >= size - 1 and mask - 1 - half >= size - 1:
        return index, None
    return index.clamp(0, mask - 1), (index < 0) | (index >= mask)


def psa_mask(
    input: Tensor, psa_type: Union[int, str], mask_size: Union[int, tuple[int, int]]
) -> Tensor:
    """The over-complete attention map of PSANet from its compact mask.

    Args:
        input: (N, h_mask * w_mask, H, W) float, channel ``i * w_mask + j``
            relating each position to the one ``(i - (h_mask - 1) // 2,
            j - (w_mask - 1) // 2)`` away.
        psa_type: 0 or ``'collect'``; 1 or ``'distribute'``.
        mask_size: (h_mask, w_mask), or one int for both.

    Returns:
        (N, H * W, H, W), contiguous, input's dtype and device. collect:
        ``out[n, q, y, x]`` relates (y, x) to position q = y' * W + x';
        distribute: ``out[n, p, y', x']`` relates position p = y * W + x to
        (y', x'). Pairs farther apart than the mask reaches are zero.

    Raises:
        ValueError: a bad ``mask_size``.
        ArgumentError: a bad ``psa_type``, or input not (N, h_mask * w_mask, H, W)
            (mmcv asserts them; a ValueError too).
    """
    kind = _psa_type_enum(psa_type)
    h_mask, w_mask = _pair(mask_size)
    if not isinstance(input, Tensor) or input.dim() != 4 or input.shape[1] != h_mask * w_mask:
        found = tuple(input.shape) if isinstance(input, Tensor) else type(input).__name__
        raise ArgumentError(
            f"mmcv.ops.psa_mask: input must be (N, h_mask * w_mask = {h_mask * w_mask}, H, W) for "
            f"mask_size {(h_mask, w_mask)}, found {found}"
        )
    n, _, height, width = input.shape
    rows, rows_outside = _shifts(height, h_mask, input.device)
    cols, cols_outside = _shifts(width, w_mask, input.device)
    mask = input.reshape(n, h_mask, w_mask, height, width)
    # out[n, y', x', y, x] = mask[n, y' - y + hh, x' - x + hw, y, x], one axis at a time
    # (the one intermediate is (N, H, w_mask, H, W)). gather's backward needs only
    # its index, so the pairs out of the mask's reach are zeroed in place.
    row_index = rows.view(1, height, 1, height, 1).expand(n, -1, w_mask, -1, width)
    by_row = mask.gather(1, row_index)
    if rows_outside is not None:
        by_row.masked_fill_(rows_outside.view(1, height, 1, height, 1), 0)
    col_index = cols.view(1, 1, width, 1, width).expand(n, height, -1, height, -1)
    pairs = by_row.gather(2, col_index)
    if cols_outside is not None:
        pairs.masked_fill_(cols_outside.view(1, 1, width, 1, width), 0)
    if kind == 1:
        pairs = pairs.permute(0, 3, 4, 1, 2)
    # Contiguous, as mmcv's kernels write it: callers view(-1) it.
    return pairs.reshape(n, height * width, height, width).contiguous()


class PSAMaskFunction:
    """Stand-in for mmcv's autograd Function: :meth:`apply` is :func:`psa_mask`."""

    @staticmethod
    def apply(
        input: Tensor, psa_type: Union[int, str], mask_size: Union[int, tuple[int, int]]
    ) -> Tensor:
        """See :func:`psa_mask`."""
        return psa_mask(input, psa_type, mask_size)


class PSAMask(nn.Module):
    """:func:`psa_mask` as a module, as mmcv's ``PSAMask``.

    Args:
        psa_type: ``'collect'`` or ``'distribute'``.
        mask_size: (h_mask, w_mask) (or one int); required by :meth:`forward`.

    Raises:
        ArgumentError: psa_type not one of the two (mmcv asserts it; a ValueError too).
    """

    def __init__(self, psa_type: str, mask_size: Optional[tuple[int, int]] = None) -> None:
        super().__init__()
        if not isinstance(psa_type, str) or psa_type not in _TYPES:
            raise ArgumentError(
                f"mmcv.ops.PSAMask: psa_type must be 'collect' or 'distribute', found {psa_type!r}"
            )
        self.psa_type_enum = _TYPES[psa_type]
        self.mask_size = mask_size
        self.psa_type = psa_type

    def forward(self, input: Tensor) -> Tensor:
        """(N, h_mask * w_mask, H, W) -> (N, H * W, H, W); see :func:`psa_mask`."""
        if self.mask_size is None:
            raise ValueError("mmcv.ops.PSAMask: mask_size is required, found None")
        return psa_mask(input, self.psa_type_enum, self.mask_size)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(psa_type={self.psa_type}, mask_size={self.mask_size})"
