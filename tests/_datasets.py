"""Test helpers: datasets that are little more than a length and group flags (samplers, loaders)."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from torch.utils.data import Dataset


class Flagged:
    """A dataset that is only its group flags and, optionally, its image sizes (or its length)."""

    def __init__(
        self, flag: Optional[Sequence[int]] = None, img_sizes=None, n: Optional[int] = None
    ) -> None:
        if flag is not None:
            self.flag = np.asarray(flag)
        if img_sizes is not None:
            self.img_sizes = np.asarray(img_sizes)
        self._n = n if n is not None else len(flag if flag is not None else img_sizes)

    def __len__(self) -> int:
        return self._n


class FlaggedDataset(Dataset):
    """``n`` samples with optional group ``flag``; subclasses say what sample ``i`` is."""

    def __init__(self, n: int, flag: Optional[Sequence[int]] = None) -> None:
        self.n = n
        if flag is not None:
            self.flag = np.asarray(flag)

    def __len__(self) -> int:
        return self.n
