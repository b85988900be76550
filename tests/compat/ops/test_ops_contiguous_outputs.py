"""Every op's output is a contiguous tensor, as mmcv's kernels allocate theirs.

Codebases ``.view()`` the outputs: mmocr 0.6.3's DRRG reshapes ``RoIAlignRotated``'s
``(K, C, ph, pw)`` output with ``.view(K, -1)``, which fails on a permuted tensor.
"""

from __future__ import annotations

from typing import Callable, Dict

import pytest
import torch

pytest.importorskip("torchvision")

from mmpar.compat import ops  # noqa: E402


def _feat(c: int = 8) -> torch.Tensor:
    return torch.rand(2, c, 16, 16, generator=torch.Generator().manual_seed(0))


ROIS = torch.tensor([[0, 1, 1, 9, 9], [1, 2, 2, 12, 10.0]])
ROTATED_ROIS = torch.tensor([[0, 6, 6, 8, 4, 0.3], [1, 8, 8, 6, 6, -0.4]])

CASES: Dict[str, Callable[[], torch.Tensor]] = {
    "roi_align avg": lambda: ops.roi_align(_feat(), ROIS, (7, 7), 1.0, 2),
    "roi_align max": lambda: ops.roi_align(_feat(), ROIS, (7, 7), 1.0, 2, "max"),
    "roi_pool": lambda: ops.roi_pool(_feat(), ROIS, (7, 7), 1.0),
    "deform_roi_pool": lambda: ops.deform_roi_pool(
        _feat(), ROIS, torch.rand(2, 2, 7, 7), (7, 7), 1.0, 2
    ),
    "roi_align_rotated": lambda: ops.roi_align_rotated(_feat(), ROTATED_ROIS, (7, 7), 1.0, 2),
    "riroi_align_rotated": lambda: ops.RiRoIAlignRotated((7, 7), 1.0, 8, 2)(
        _feat(16), ROTATED_ROIS
    ),
    "rotated_feature_align": lambda: ops.rotated_feature_align(
        _feat(), torch.rand(2, 16, 16, 5) * 4, 1 / 8, 1
    ),
    "upfirdn2d": lambda: ops.upfirdn2d(_feat(2), torch.ones(3, 3) / 9, up=2, pad=(1, 1)),
    "carafe": lambda: ops.carafe(_feat(), torch.rand(2, 25, 32, 32).softmax(1), 5, 1, 2),
    "deform_conv2d": lambda: ops.DeformConv2d(8, 4, 3, padding=1)(
        _feat(), torch.zeros(2, 18, 16, 16)
    ),
    "corner_pool": lambda: ops.CornerPool("top")(_feat()),
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_output_is_contiguous(op: str) -> None:
    out = CASES[op]()
    assert out.is_contiguous(), f"{op}: output of shape {tuple(out.shape)} is not contiguous"
    assert out.view(out.shape[0], -1).shape[0] == out.shape[0]
