"""mmpar.compat.ops.roipoint_pool3d against a loop over boxes and points (mmcv's sampling)."""

from __future__ import annotations

import math

import pytest
import torch

from mmpar.compat.ops.boxes3d import pairs
from mmpar.compat.ops.roipoint_pool3d import RoIPointPool3d, RoIPointPool3dFunction
from tests.compat.ops._boxes3d_reference import in_box, points_near, random_boxes
from tests.compat.ops._reference import DEVICES

# mmcv's own test (tests/test_ops/test_roipoint_pool3d.py).
MMCV_POINTS = [
    [1, 2, 3.3], [1.2, 2.5, 3.0], [0.8, 2.1, 3.5], [1.6, 2.6, 3.6], [0.8, 1.2, 3.9],
    [-9.2, 21.0, 18.2], [3.8, 7.9, 6.3], [4.7, 3.5, -12.2], [3.8, 7.6, -2],
    [-10.6, -12.9, -20], [-16, -18, 9], [-21.3, -52, -5], [0, 0, 0], [6, 7, 8], [-2, -3, -4],
]  # fmt: skip
MMCV_ROIS = [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.3], [-10.0, 23.0, 16.0, 10, 20, 20, 0.5]]
MMCV_FEAT = [
    [[1, 2, 3.3, 1, 2, 3.3], [1.2, 2.5, 3, 1.2, 2.5, 3],
     [0.8, 2.1, 3.5, 0.8, 2.1, 3.5], [1.6, 2.6, 3.6, 1.6, 2.6, 3.6]],
    [[-9.2, 21, 18.2, -9.2, 21, 18.2]] * 4,
]  # fmt: skip


def reference(points, feats, boxes, num):
    """Per batch element and box: the first ``num`` inside points, cycled; and the flags."""
    pooled, flags = [], []
    for pts_b, feats_b, boxes_b in zip(points.tolist(), feats.tolist(), boxes.tolist()):
        rows, row_flags = [], []
        for box in boxes_b:
            found = [i for i, p in enumerate(pts_b) if in_box(p, box)[0]][:num]
            if not found:
                rows.append([[0.0] * (3 + len(feats_b[0]))] * num)
            else:
                rows.append([pts_b[found[k % len(found)]] + feats_b[found[k % len(found)]]
                             for k in range(num)])  # fmt: skip
            row_flags.append(int(not found))
        pooled.append(rows)
        flags.append(row_flags)
    return torch.tensor(pooled, dtype=feats.dtype), torch.tensor(flags, dtype=torch.int32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_mmcv_numbers(device: str, dtype: torch.dtype) -> None:
    points = torch.tensor(MMCV_POINTS, dtype=dtype, device=device)[None]
    rois = torch.tensor([MMCV_ROIS], dtype=dtype, device=device)
    feat, flag = RoIPointPool3d(num_sampled_points=4)(points, points.clone(), rois)
    assert feat.dtype == dtype and flag.dtype == torch.int32
    torch.testing.assert_close(feat.cpu(), torch.tensor([MMCV_FEAT], dtype=dtype))
    assert flag.cpu().tolist() == [[0, 0]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num", [1, 7, 40])
def test_matches_reference(device: str, num: int) -> None:
    gen = torch.Generator().manual_seed(num)
    boxes = torch.stack([random_boxes(5, gen) for _ in range(2)])
    points = torch.stack([points_near(boxes[b], 50, gen) for b in range(2)])
    boxes[0, 4] = torch.tensor([40.0, 40.0, 0.0, 1.0, 1.0, 1.0, 0.0])  # empty
    feats = torch.randn(2, 50, 3, generator=gen)
    want_feat, want_flag = reference(points, feats, boxes, num)
    assert want_flag.sum() >= 1 and (1 - want_flag).sum() >= 5
    got_feat, got_flag = RoIPointPool3d(num)(points.to(device), feats.to(device), boxes.to(device))
    assert torch.equal(got_feat.cpu(), want_feat) and torch.equal(got_flag.cpu(), want_flag)


def test_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(4)
    boxes = torch.stack([random_boxes(6, gen) for _ in range(3)])
    points = torch.stack([points_near(boxes[b], 30, gen) for b in range(3)])
    feats = torch.randn(3, 30, 2, generator=gen)
    whole = RoIPointPool3d(9)(points, feats, boxes)
    monkeypatch.setattr(pairs, "CHUNK_PAIRS", 50)
    chunked = RoIPointPool3d(9)(points, feats, boxes)
    assert all(torch.equal(a, b) for a, b in zip(whole, chunked))


def test_nan_empty_and_no_backward() -> None:
    box = torch.tensor([[[0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]]])
    pts = torch.tensor([[[math.nan, 0.0, 1.0], [0.0, 0.0, math.nan], [0.5, 0.5, 0.5]]])
    feat, flag = RoIPointPool3d(3)(pts, torch.arange(3.0).view(1, 3, 1), box)
    # NaN x: in no box; NaN z: passes the kernel's z test. Found: points 1, 2; cycled.
    assert feat[0, 0, :, 3].tolist() == [1.0, 2.0, 1.0] and flag.tolist() == [[0]]
    feat, flag = RoIPointPool3d(2)(torch.zeros(1, 0, 3), torch.zeros(1, 0, 4), box)
    assert feat.shape == (1, 1, 2, 7) and feat.abs().sum() == 0 and flag.tolist() == [[1]]
    feat, flag = RoIPointPool3d(2)(pts, torch.zeros(1, 3, 4), torch.zeros(1, 0, 7))
    assert feat.shape == (1, 0, 2, 7) and flag.shape == (1, 0)
    feats = torch.rand(1, 3, 2, requires_grad=True)
    out, _ = RoIPointPool3dFunction.apply(pts, feats, box, 4)
    with pytest.raises(NotImplementedError, match="no backward"):
        out.sum().backward()


def test_bad_input() -> None:
    pts, feats, boxes = torch.zeros(1, 4, 3), torch.zeros(1, 4, 2), torch.zeros(1, 2, 7)
    pool = RoIPointPool3d(8)
    with pytest.raises(ValueError, match=r"RoIPointPool3d: boxes3d must have shape \(B, M, 7\)"):
        pool(pts, feats, torch.zeros(1, 2, 6))
    with pytest.raises(ValueError, match="points must have shape"):
        pool(torch.zeros(4, 3), feats, boxes)
    with pytest.raises(ValueError, match="same batch size"):
        pool(pts, feats, torch.zeros(2, 2, 7))
    with pytest.raises(ValueError, match="same number of points"):
        pool(pts, torch.zeros(1, 5, 2), boxes)
    with pytest.raises(TypeError, match="point_features must be floating point"):
        pool(pts, feats.int(), boxes)
    with pytest.raises(ValueError, match="num_sampled_points must be an int >= 1"):
        RoIPointPool3d(0)
