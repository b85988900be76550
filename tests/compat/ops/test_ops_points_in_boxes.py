"""mmpar.compat.ops.points_in_boxes against mmcv's in-box test written in float32 scalars."""

from __future__ import annotations

import math

import pytest
import torch

from mmpar.compat.ops.boxes3d import pairs
from mmpar.compat.ops.points_in_boxes import (
    points_in_boxes_all,
    points_in_boxes_cpu,
    points_in_boxes_part,
)
from tests.compat.ops._boxes3d_reference import YAWS, in_box, points_near, random_boxes
from tests.compat.ops._reference import DEVICES

FUNCTIONS = [points_in_boxes_part, points_in_boxes_all, points_in_boxes_cpu]

# mmcv's own test (tests/test_ops/test_roiaware_pool3d.py).
MMCV_BOXES = [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.3], [-10.0, 23.0, 16.0, 10, 20, 20, 0.5]]
MMCV_PTS = [
    [1, 2, 3.3], [1.2, 2.5, 3.0], [0.8, 2.1, 3.5], [1.6, 2.6, 3.6], [0.8, 1.2, 3.9],
    [-9.2, 21.0, 18.2], [3.8, 7.9, 6.3], [4.7, 3.5, -12.2], [3.8, 7.6, -2],
    [-10.6, -12.9, -20], [-16, -18, 9], [-21.3, -52, -5], [0, 0, 0], [6, 7, 8], [-2, -3, -4],
]  # fmt: skip
MMCV_ALL = [[1, 0]] * 5 + [[0, 1]] + [[0, 0]] * 9
MMCV_30DEG_BOX = [[[0.0, 0.0, 0.0, 1.0, 20.0, 1.0, 0.523598]]]
MMCV_30DEG_PTS = [
    [[4, 6.928, 0], [6.928, 4, 0], [4, -6.928, 0], [6.928, -4, 0],
     [-4, 6.928, 0], [-6.928, 4, 0], [-4, -6.928, 0], [-6.928, -4, 0]]
]  # fmt: skip


def reference(points: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """``(B, M, T)`` int32 by the scalar test."""
    return torch.tensor(
        [
            [[int(in_box(p, b)[0]) for b in bs.tolist()] for p in ps.tolist()]
            for ps, bs in zip(points, boxes)
        ],
        dtype=torch.int32,
    ).view(points.shape[0], points.shape[1], boxes.shape[1])


def first_box(all_boxes: torch.Tensor) -> torch.Tensor:
    t = all_boxes.shape[-1]
    index = torch.where(all_boxes.bool(), torch.arange(t, dtype=torch.int32), t).amin(-1)
    return torch.where(index == t, -1, index).to(torch.int32)


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    boxes = torch.tensor([MMCV_BOXES], device=device)
    pts = torch.tensor([MMCV_PTS], device=device)
    expected = torch.tensor([MMCV_ALL], dtype=torch.int32)
    assert torch.equal(points_in_boxes_cpu(pts, boxes).cpu(), expected)
    assert torch.equal(points_in_boxes_all(pts, boxes).cpu(), expected)
    # mmcv's part test: one box per batch element, the points split in two halves.
    part_boxes = torch.tensor([[MMCV_BOXES[0]], [MMCV_BOXES[1]]])
    part_pts = torch.tensor([MMCV_PTS[:8], MMCV_PTS[8:] + [[6, 4, 9]]])
    got = points_in_boxes_part(part_pts.to(device), part_boxes.to(device))
    want = [[0, 0, 0, 0, 0, -1, -1, -1], [-1] * 8]
    assert got.dtype == torch.int32 and got.cpu().tolist() == want
    box30, pts30 = torch.tensor(MMCV_30DEG_BOX, device=device), torch.tensor(MMCV_30DEG_PTS)
    got = points_in_boxes_part(pts30.to(device), box30)
    assert got.cpu().tolist() == [[-1, -1, 0, -1, 0, -1, -1, -1]]
    got = points_in_boxes_cpu(pts30.to(device), box30)
    assert got[..., 0].cpu().tolist() == [[0, 0, 1, 0, 1, 0, 0, 0]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("yaws", [YAWS, None])
def test_matches_reference(device: str, yaws: tuple) -> None:
    gen = torch.Generator().manual_seed(3)
    boxes = torch.stack([random_boxes(7, gen, yaws) for _ in range(2)])
    points = torch.stack([points_near(boxes[b], 60, gen) for b in range(2)])
    want = reference(points, boxes)
    assert want.sum() > 20 and (1 - want).sum() > 20  # both answers are tested
    got_all = points_in_boxes_all(points.to(device), boxes.to(device))
    got_cpu = points_in_boxes_cpu(points.to(device), boxes.to(device))
    got_part = points_in_boxes_part(points.to(device), boxes.to(device))
    assert torch.equal(got_all.cpu(), want) and torch.equal(got_cpu.cpu(), want)
    assert torch.equal(got_part.cpu(), first_box(want))


def test_faces_edges_top_bottom() -> None:
    # Box [-1, 1] x [-2, 2] x [0, 3]: side faces out, top and bottom in.
    box = torch.tensor([[[0.0, 0.0, 0.0, 2.0, 4.0, 3.0, 0.0]]])
    cases = {
        (0.0, 0.0, 0.0): 1,  # bottom face
        (0.0, 0.0, 3.0): 1,  # top face
        (0.5, -1.5, 3.0): 1,
        (1.0, 0.0, 1.0): 0,  # x face
        (-1.0, 0.0, 1.0): 0,
        (0.0, 2.0, 1.0): 0,  # y face
        (1.0, 2.0, 1.5): 0,  # vertical edge
        (0.0, 2.0, 3.0): 0,  # top edge
        (0.0, 0.0, 3.0001): 0,
        (0.0, 0.0, -0.0001): 0,
        (0.9999, 1.9999, 1.0): 1,
    }
    pts = torch.tensor([list(cases)])
    got = points_in_boxes_all(pts, box)[0, :, 0].tolist()
    assert got == list(cases.values())
    assert got == [int(in_box(p, box[0, 0].tolist())[0]) for p in cases]


@pytest.mark.parametrize("yaw", [math.pi, -math.pi, math.pi / 2, -math.pi / 2])
def test_yaw_turns_the_box(yaw: float) -> None:
    # A 4 x 1 box turned by a half or quarter turn.
    box = torch.tensor([[[1.0, 1.0, 0.0, 4.0, 1.0, 1.0, yaw]]])
    along = (1.8, 0.0) if abs(abs(yaw) - math.pi) < 1e-6 else (0.0, 1.8)
    pts = torch.tensor([[[1 + along[0], 1 + along[1], 0.5], [1 + along[1], 1 + along[0], 0.5]]])
    got = points_in_boxes_all(pts, box)[0, :, 0].tolist()
    assert got == [1, 0]  # along the long side in, across it out


def test_nan_follows_the_kernel() -> None:
    box = torch.tensor([[[0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]]])
    nan = math.nan
    pts = torch.tensor([[[nan, nan, nan], [nan, 0.0, 1.0], [0.0, nan, 1.0], [0.0, 0.0, nan]]])
    # A NaN x or y fails the strict x-y test; a NaN z passes the "not above" z test.
    for fn in FUNCTIONS:
        got = fn(pts, box).reshape(-1).tolist()
        assert got == ([-1, -1, -1, 0] if fn is points_in_boxes_part else [0, 0, 0, 1])
    nan_box = box.clone()
    nan_box[..., 3] = nan
    assert points_in_boxes_all(torch.zeros(1, 1, 3) + 0.5, nan_box).item() == 0


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device: str) -> None:
    boxes = torch.rand(2, 3, 7, device=device)
    none = torch.zeros(2, 0, 3, device=device)
    assert points_in_boxes_part(none, boxes).shape == (2, 0)
    assert points_in_boxes_all(none, boxes).shape == (2, 0, 3)
    assert points_in_boxes_cpu(none, boxes).shape == (2, 0, 3)
    pts = torch.rand(2, 5, 3, device=device)
    no_boxes = torch.zeros(2, 0, 7, device=device)
    assert points_in_boxes_part(pts, no_boxes).cpu().tolist() == [[-1] * 5] * 2
    assert points_in_boxes_all(pts, no_boxes).shape == (2, 5, 0)
    assert points_in_boxes_cpu(torch.zeros(0, 5, 3), torch.zeros(0, 2, 7)).shape == (0, 5, 2)


def test_layouts_and_dtypes() -> None:
    gen = torch.Generator().manual_seed(0)
    boxes = random_boxes(4, gen)[None]
    pts = points_near(boxes[0], 30, gen)[None]
    cpu = points_in_boxes_cpu(pts.double(), boxes.double())
    # mmcv's: float32, and the transpose of a (B, T, M) tensor.
    assert cpu.dtype == torch.int32 and cpu.shape == (1, 30, 4) and cpu.stride() == (120, 1, 30)
    assert torch.equal(cpu, points_in_boxes_cpu(pts, boxes))
    all_ = points_in_boxes_all(pts.half(), boxes.half())
    assert all_.dtype == torch.int32 and all_.is_contiguous()
    all64 = points_in_boxes_all(pts.double(), boxes.double())
    assert all64.dtype == torch.int32 and all64.shape == (1, 30, 4)


def test_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(5)
    boxes = torch.stack([random_boxes(5, gen) for _ in range(3)])
    pts = torch.stack([points_near(boxes[b], 40, gen) for b in range(3)])
    whole = [fn(pts, boxes) for fn in FUNCTIONS]
    for chunk in (7, 40, 100):  # runs of rows within and across batch elements
        monkeypatch.setattr(pairs, "CHUNK_PAIRS", chunk)
        for fn, want in zip(FUNCTIONS, whole):
            assert torch.equal(fn(pts, boxes), want)


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_bad_input(fn) -> None:
    pts, boxes = torch.zeros(1, 4, 3), torch.zeros(1, 2, 7)
    with pytest.raises(ValueError, match=r"points_in_boxes_\w+: boxes must have shape \(B, T, 7\)"):
        fn(pts, torch.zeros(1, 2, 5))
    with pytest.raises(ValueError, match="points must have shape"):
        fn(torch.zeros(1, 4, 2), boxes)
    with pytest.raises(ValueError, match="same batch size"):
        fn(pts, torch.zeros(2, 2, 7))
    with pytest.raises(TypeError, match="boxes must be floating point"):
        fn(pts, boxes.int())
    with pytest.raises(TypeError, match="points must be a torch.Tensor"):
        fn(pts.tolist(), boxes)
    if fn is not points_in_boxes_cpu:
        with pytest.raises(TypeError, match="same dtype"):
            fn(pts, boxes.double())
