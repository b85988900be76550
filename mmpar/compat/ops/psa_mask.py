"""The point-wise spatial attention mask of PSANet, as ``mmcv.ops.psa_mask``.

A pure rearrangement (two gathers), so it is exact, differentiable, and works
in every dtype on every device (mmcv-full's kernels take float32/float64 only).

For a feature map of H x W and a mask of h_mask x w_mask (half sizes
``hh = (h_mask - 1) // 2``, ``hw = (w_mask - 1) // 2``), input channel
``i * w_mask + j`` at position (y, x) is the attention between (y, x) and
(y + i - hh, x + j - hw). ``collect`` writes it to output channel
``(y + i - hh) * W + (x + j - hw)`` at (y, x); ``distribute`` to output
channel ``y * W + x`` at (y + i - hh, x + j - hw). Pairs that fall outside
the map are dropped; output entries that no pair reaches are zero.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["PSAMask", "PSAMaskFunction", "psa_mask"]

_TYPES = {"collect": 0, "distribute": 1}


def _pair(mask_size: Union[int, tuple[int, int], list[int], None]) -> tuple[int, int]:
    if isinstance(mask_size, int) and not isinstance(mask_size, bool):
        return mask_size, mask_size
    if (
        isinstance(mask_size, (tuple, list))
        and len(mask_size) == 2
        and all(isinstance(v, int) and v > 0 for v in mask_size)
    ):
        return int(mask_size[0]), int(mask_size[1])
    raise ValueError(
        f"psa_mask: mask_size must be a positive int or (h_mask, w_mask), found {mask_size!r}"
    )


def _psa_type_enum(psa_type: Union[int, str]) -> int:
    if psa_type in _TYPES:
        return _TYPES[psa_type]  # type: ignore[index]
    if psa_type in (0, 1) and not isinstance(psa_type, bool):
        return int(psa_type)
    raise ValueError(
        f"psa_mask: psa_type must be 0 / 'collect' or 1 / 'distribute', found {psa_type!r}"
    )


def _windows(size: int, mask: int, half: int, device: torch.device) -> tuple[Tensor, int, int]:
    """Row indices into the zero-padded mask axis, and the padding.

    Returns ``(index, pad_before, pad_after)`` where ``index[o, s]`` (o: output
    position, s: source position, both in [0, size)) is ``o - s + half +
    pad_before``: mask entry ``o - s + half`` after padding the mask axis so
    that every such entry exists (the padding reads zeros).
    """
    pad_before = max(0, size - 1 - half)
    pad_after = max(0, half + size - mask)
    pos = torch.arange(size, device=device)
    return pos[:, None] - pos[None, :] + (half + pad_before), pad_before, pad_after


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
        (N, H * W, H, W), input's dtype and device. collect:
        ``out[n, q, y, x]`` relates (y, x) to position q = y' * W + x';
        distribute: ``out[n, p, y', x']`` relates position p = y * W + x to
        (y', x'). Pairs farther apart than the mask reaches are zero.

    Raises:
        ValueError: bad psa_type or mask_size, or input not (N, h_mask * w_mask, H, W).
    """
    kind = _psa_type_enum(psa_type)
    h_mask, w_mask = _pair(mask_size)
    if input.dim() != 4 or input.shape[1] != h_mask * w_mask:
        raise ValueError(
            f"psa_mask: input must be (N, h_mask * w_mask = {h_mask * w_mask}, H, W) for "
            f"mask_size {(h_mask, w_mask)}, found shape {tuple(input.shape)}"
        )
    n, _, height, width = input.shape
    rows, top, bottom = _windows(height, h_mask, (h_mask - 1) // 2, input.device)
    cols, left, right = _windows(width, w_mask, (w_mask - 1) // 2, input.device)
    mask = input.reshape(n, h_mask, w_mask, height, width)
    mask = F.pad(mask, (0, 0, 0, 0, left, right, top, bottom))
    # out[n, y', x', y, x] = mask[n, y' - y + hh, x' - x + hw, y, x], one axis at a time.
    row_index = rows.view(1, height, 1, height, 1).expand(n, -1, mask.shape[2], -1, width)
    by_row = mask.gather(1, row_index)
    col_index = cols.view(1, 1, width, 1, width).expand(n, height, -1, height, -1)
    pairs = by_row.gather(2, col_index)
    if kind == 1:
        pairs = pairs.permute(0, 3, 4, 1, 2)
    return pairs.reshape(n, height * width, height, width)


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
        ValueError: psa_type not one of the two.
    """

    def __init__(self, psa_type: str, mask_size: Optional[tuple[int, int]] = None) -> None:
        super().__init__()
        if psa_type not in _TYPES:
            raise ValueError(
                f"PSAMask: psa_type must be 'collect' or 'distribute', found {psa_type!r}"
            )
        self.psa_type_enum = _TYPES[psa_type]
        self.mask_size = mask_size
        self.psa_type = psa_type

    def forward(self, input: Tensor) -> Tensor:
        """(N, h_mask * w_mask, H, W) -> (N, H * W, H, W); see :func:`psa_mask`."""
        if self.mask_size is None:
            raise ValueError("PSAMask: mask_size is required, found None")
        return psa_mask(input, self.psa_type_enum, self.mask_size)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(psa_type={self.psa_type}, mask_size={self.mask_size})"
