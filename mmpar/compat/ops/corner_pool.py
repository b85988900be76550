"""Corner pooling of CornerNet (``mmcv.ops.corner_pool``), with ``torch.cummax``.

`CornerNet <https://arxiv.org/abs/1808.01244>`_ pools each pixel with the
maximum of every pixel from it to the border in one direction:

* ``'top'``: ``out[..., y, x] = max(inp[..., y:, x])`` (from the bottom border up)
* ``'bottom'``: ``out[..., y, x] = max(inp[..., :y + 1, x])``
* ``'left'``: ``out[..., y, x] = max(inp[..., y, x:])``
* ``'right'``: ``out[..., y, x] = max(inp[..., y, :x + 1])``

mmcv 1.7.2 computes it with ``torch.cummax`` too (its compiled kernels serve only
ONNX export), so the values and the gradients (each output's gradient goes to
the one input pixel ``cummax`` picked: among equal maxima, the last one met in
the scan) are mmcv's. So is the answer to a NaN: ``cummax`` carries it to every
pixel after it in the scan.
"""

from __future__ import annotations

from typing import Dict, Tuple

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import ArgumentError

__all__ = ["CornerPool"]


class CornerPool(nn.Module):
    """Corner pooling in one direction.

    Args:
        mode: ``'bottom'``, ``'left'``, ``'right'`` or ``'top'``.

    Raises:
        ArgumentError: another ``mode`` (mmcv asserts it; a ValueError too).
    """

    #: mode -> (the dimension of (N, C, H, W) scanned, whether it is scanned backwards).
    cummax_dim_flip: Dict[str, Tuple[int, bool]] = {
        "bottom": (2, False),
        "left": (3, True),
        "right": (3, False),
        "top": (2, True),
    }

    def __init__(self, mode: str) -> None:
        super().__init__()
        if not isinstance(mode, str) or mode not in self.cummax_dim_flip:
            raise ArgumentError(
                f"mmcv.ops.CornerPool: mode must be one of {sorted(self.cummax_dim_flip)}, "
                f"found {mode!r}"
            )
        self.mode = mode

    def forward(self, x: Tensor) -> Tensor:
        """(N, C, H, W) -> (N, C, H, W), the running maximum towards the pooled border."""
        if not isinstance(x, Tensor) or x.dim() != 4:
            found = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"mmcv.ops.CornerPool: x must be (N, C, H, W), found {found}")
        dim, flip = self.cummax_dim_flip[self.mode]
        if flip:
            x = x.flip(dim)
        pooled = torch.cummax(x, dim=dim).values
        return pooled.flip(dim) if flip else pooled
