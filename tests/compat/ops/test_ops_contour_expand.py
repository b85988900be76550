"""mmpar.compat.ops.contour_expand against mmcv's queue algorithm, level by level."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
import torch

from mmpar.compat.ops.contour_expand import contour_expand
from tests.compat.ops._reference import DEVICES


def reference(kernel_mask, label, min_area, kernel_num, level_kernel=lambda level: 0):
    """mmcv's kernel: seeds, then one FIFO expansion per level from K - 2 down to 0.

    ``level_kernel(level)`` is the kernel a level reads: mmcv's compiled offsets are all 0,
    so every level reads kernel 0 (``lambda level: level`` is PSENet's intent).
    """
    kernels, height, width = kernel_mask.shape
    area = [0] * (kernel_num + 1)
    for y in range(height):
        for x in range(width):
            if label[y, x]:
                area[label[y, x]] += 1
    out = [[0] * width for _ in range(height)]
    queue = deque()
    for y in range(height):
        for x in range(width):
            if label[y, x] and area[label[y, x]] >= min_area:
                queue.append((y, x))
                out[y][x] = int(label[y, x])
    for level in range(kernels - 2, -1, -1):
        kernel = kernel_mask[level_kernel(level)]
        edge = deque()
        while queue:
            y, x = queue.popleft()
            grew = False
            for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1)):  # up, down, left, right
                ty, tx = y + dy, x + dx
                if not (0 <= ty < height and 0 <= tx < width):
                    continue
                if kernel[ty, tx] == 0 or out[ty][tx] > 0:
                    continue
                out[ty][tx] = out[y][x]
                queue.append((ty, tx))
                grew = True
            if not grew:
                edge.append((y, x))
        queue = edge
    return out


def random_case(seed: int, kernels: int = 3, size=(10, 12)):
    """Nested random kernels; labels: a few small seed blobs, some touching, some tiny."""
    rng = np.random.default_rng(seed)
    base = rng.random(size) < 0.8
    masks = [base]
    for _ in range(kernels - 1):
        masks.append(masks[-1] & (rng.random(size) < 0.6))
    label = np.zeros(size, np.int32)
    num = 6
    for lab in range(1, num):
        y, x = rng.integers(0, size[0] - 1), rng.integers(0, size[1] - 1)
        label[y : y + rng.integers(1, 3), x : x + rng.integers(1, 4)] = lab
    return np.stack(masks).astype(np.uint8), label, num


def test_mmcv_example():
    label = np.zeros((10, 10), np.int32)
    label[3:7, 2:4], label[3:7, 8] = 1, 2
    text = np.zeros((10, 10), np.uint8)
    text[3:7, 2:9] = 1
    got = contour_expand(np.stack([text, (label > 0).astype(np.uint8)]), label, 1, 3)
    expected = np.zeros((10, 10), np.int64)
    expected[3:7, 2:6], expected[3:7, 6:9] = 1, 2
    assert got == expected.tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("min_area", [0, 3])
def test_matches_queue(device: str, seed: int, min_area: int):
    masks, label, num = random_case(seed)
    expected = reference(masks, label, min_area, num)
    got = contour_expand(torch.from_numpy(masks).to(device), torch.from_numpy(label).to(device),
                         min_area, num)  # fmt: skip
    assert got == expected
    if device == "cpu":
        assert contour_expand(masks.astype(bool), label, min_area, num) == expected


def test_every_level_reads_kernel_zero_as_mmcv_does():
    # Read level by level, kernel 1 would let label 1 reach x = 3 before label 2 moves;
    # mmcv's expansion reads kernel 0 at every level, where the two meet half-way.
    label = np.array([[1, 0, 0, 0, 0, 2]], np.int32)
    masks = np.array([[[1, 1, 1, 1, 1, 1]], [[1, 1, 1, 1, 0, 0]], [[1, 0, 0, 0, 0, 1]]], np.uint8)
    assert contour_expand(masks, label, 0, 3) == [[1, 1, 1, 2, 2, 2]]
    assert reference(masks, label, 0, 3) == [[1, 1, 1, 2, 2, 2]]
    assert reference(masks, label, 0, 3, lambda level: level) == [[1, 1, 1, 1, 2, 2]]


def test_contested_pixel_goes_to_the_first_seed_in_row_major_order():
    masks = np.ones((2, 1, 5), np.uint8)
    label = np.array([[2, 0, 0, 0, 1]], np.int32)
    # (0, 2) is 2 steps from both seeds; the label-2 seed is first in row-major order.
    assert contour_expand(masks, label, 0, 3) == [[2, 2, 2, 1, 1]]
    assert contour_expand(masks, label[:, ::-1], 0, 3) == [[1, 1, 1, 2, 2]]


def test_small_kernels_dropped_and_overtaken():
    label = np.array([[1, 1, 1, 0, 2, 0]], np.int32)
    masks = np.ones((2, 1, 6), np.uint8)
    assert contour_expand(masks, label, 2, 2) == [[1, 1, 1, 1, 1, 1]]
    assert contour_expand(masks, label, 4, 2) == [[0] * 6]


def test_one_kernel_returns_the_seeds():
    label = np.array([[0, 3, 0], [0, 0, 1]], np.int32)
    masks = np.ones((1, 2, 3), np.uint8)
    assert contour_expand(masks, label, 0, 3) == [[0, 3, 0], [0, 0, 1]]
    assert contour_expand(np.ones((0, 2, 3), np.uint8), label, 2, 3) == [[0, 0, 0], [0, 0, 0]]


def test_empty():
    assert contour_expand(np.zeros((2, 0, 4), np.uint8), np.zeros((0, 4), np.int32), 0, 1) == []
    assert contour_expand(np.zeros((2, 3, 0), np.uint8), np.zeros((3, 0), np.int32), 0, 1) == [
        [],
        [],
        [],
    ]


def test_bad_input():
    masks, label = np.ones((2, 2, 3), np.uint8), np.zeros((2, 3), np.int32)
    with pytest.raises(TypeError, match="contour_expand: kernel_mask must be a torch.Tensor or"):
        contour_expand(masks.tolist(), label, 0, 1)
    with pytest.raises(ValueError, match=r"kernel_mask must have shape \(K, H, W\), got \(2, 3\)"):
        contour_expand(masks[0], label, 0, 1)
    with pytest.raises(ValueError, match=r"internal_kernel_label must have shape \(H, W\) = "):
        contour_expand(masks, label.T, 0, 1)
    with pytest.raises(TypeError, match="internal_kernel_label must be a bool or integer"):
        contour_expand(masks, label.astype(np.float32), 0, 1)
    with pytest.raises(TypeError, match="min_kernel_area must be an int, got float"):
        contour_expand(masks, label, 1.5, 1)
    with pytest.raises(TypeError, match="kernel_num must be an int, got NoneType"):
        contour_expand(masks, label, 0, None)
    label[0, 0] = 2
    with pytest.raises(ValueError, match=r"must lie in \[0, kernel_num = 1\], got 0..2"):
        contour_expand(masks, label, 0, 1)


def test_huge_kernel_num_allocates_nothing_for_it():
    masks, label = np.ones((2, 2, 3), np.uint8), np.zeros((2, 3), np.int32)
    label[0, 0] = 1
    assert contour_expand(masks, label, 0, 10**15) == [[1, 1, 1], [1, 1, 1]]
