"""PixelNorm: an image normalized as :func:`mmpar.collate` writes it into the batch.

A worker-side ``Normalize`` followed by padding and formatting passes over a
float32 image three times before collate copies it into the batch: once to
normalize it, once to pad it, once more to lay it out ``(C, H, W)``, each pass
writing four bytes per pixel into freshly allocated memory. A stacked
:class:`~mmpar.data_container.DataContainer` with a :class:`PixelNorm` instead
holds the raw pixels (uint8 typically, padded with a placeholder) and says how
to normalize them: :func:`mmpar.collate` writes ``(raw - mean) / std`` straight
into the batch's float32 buffer, in one pass, and the sample's own padding gets
its value in normalized units. The batch is the one the worker-side steps make,
bit for bit: the same float32 arithmetic in the same order.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple, Union

import torch

__all__ = ["PixelNorm"]

Number = Union[int, float]


class PixelNorm(NamedTuple):
    """How the raw ``(C, H, W)`` pixels of one image become its normalized float32 image.

    Attributes:
        mean: One value per channel (of the output order).
        std: One non-zero value per channel.
        swap_rb: Reverse the channel order first (BGR to RGB).
        content_hw: The ``(h, w)`` of the image itself; the rest of the raw tensor
            (``Pad``'s margin, its placeholder pixels) becomes ``margin``.
        margin: The value of that margin, in normalized units.
    """

    mean: Tuple[float, ...]
    std: Tuple[float, ...]
    swap_rb: bool
    content_hw: Tuple[int, int]
    margin: Number = 0

    def check(self, raw: torch.Tensor, field: str) -> None:
        """Check that ``raw`` is a ``(C, H, W)`` CPU tensor this norm applies to.

        Raises:
            TypeError: ``raw`` is not a tensor.
            ValueError: It is not 3-D, its channels do not match ``mean``/``std``,
                or it is smaller than ``content_hw``.
        """
        if not isinstance(raw, torch.Tensor):
            raise TypeError(f"{field}: a PixelNorm needs tensor data, got {type(raw).__name__}")
        if raw.dim() != 3 or raw.shape[0] != len(self.mean) or len(self.std) != len(self.mean):
            raise ValueError(
                f"{field}: a PixelNorm of {len(self.mean)} means and {len(self.std)} stds "
                f"needs a (C, H, W) tensor of as many channels, got shape {tuple(raw.shape)}"
            )
        h, w = self.content_hw
        if h > raw.shape[1] or w > raw.shape[2]:
            raise ValueError(
                f"{field}: content_hw {self.content_hw} is larger than the image "
                f"{tuple(raw.shape[1:])}"
            )

    def write(self, out: torch.Tensor, raw: torch.Tensor) -> None:
        """Write the normalized ``raw`` ``(C, H, W)`` into ``out``, a float32 tensor of its shape.

        ``out`` may be a strided view (a sample's corner of a padded batch).
        """
        h, w = self.content_hw
        body = out[:, :h, :w]
        channels = raw.shape[0]
        for c in range(channels):  # the cast to float32, as ``astype`` does; no flipped copy
            body[c].copy_(raw[channels - 1 - c if self.swap_rb else c, :h, :w])
        body.sub_(torch.tensor(self.mean, dtype=torch.float32)[:, None, None])
        body.div_(torch.tensor(self.std, dtype=torch.float32)[:, None, None])
        out[:, h:].fill_(self.margin)
        out[:, :h, w:].fill_(self.margin)

    def apply(self, raw: torch.Tensor) -> torch.Tensor:
        """The normalized image: a new float32 ``(C, H, W)`` tensor."""
        out = torch.empty(raw.shape, dtype=torch.float32)
        self.write(out, raw)
        return out
