"""mmpar.compat.ops.pixel_group against a FIFO queue written from mmcv's kernel, in float32."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
import torch

from mmpar.compat.ops.pixel_group import pixel_group
from tests.compat.ops._reference import DEVICES


def reference(score, mask, embedding, kernel_label, contour, region_num, threshold):
    """The kernel's definition: kernel means, a FIFO queue of contour pixels, float32 sums."""
    height, width, dims = embedding.shape
    f32 = np.float32
    sums = [[f32(0)] * dims for _ in range(region_num)]
    counts = [f32(0)] * region_num
    labels = kernel_label.astype(np.int64).copy()
    queue = deque()
    for y in range(height):
        for x in range(width):
            lab = labels[y, x]
            if lab > 0:
                for d in range(dims):
                    sums[lab][d] = f32(sums[lab][d] + embedding[y, x, d])
                counts[lab] = f32(counts[lab] + f32(1))
                if contour[y, x]:
                    queue.append((y, x, lab))
    means = [[f32(s / counts[lab]) if counts[lab] else f32("nan") for s in sums[lab]]
             for lab in range(region_num)]  # fmt: skip
    limit = f32(f32(threshold) * f32(threshold))
    while queue:
        y, x, lab = queue.popleft()
        for dy, dx in ((0, -1), (0, 1), (-1, 0), (1, 0)):  # left, right, up, down
            ty, tx = y + dy, x + dx
            if not (0 <= ty < height and 0 <= tx < width):
                continue
            if not mask[ty, tx] or labels[ty, tx] > 0:
                continue
            dist = f32(0)
            for d in range(dims):
                diff = f32(means[lab][d] - embedding[ty, tx, d])
                dist = f32(float(dist) + float(diff) ** 2)
            if dist >= limit:
                continue
            labels[ty, tx] = lab
            queue.append((ty, tx, lab))
    out = [[f32(0), f32(0)] for _ in range(region_num)]
    for y in range(height):
        for x in range(width):
            lab = labels[y, x]
            if lab > 0:
                out[lab][0] = f32(out[lab][0] + score[y, x])
                out[lab][1] = f32(out[lab][1] + f32(1))
                out[lab] += [float(x), float(y)]
    for row in out:
        if row[1] > 0:
            row[0] = f32(row[0] / row[1])
    return [[float(v) for v in row] for row in out]


def random_case(seed: int, size=(9, 11), region_num=5, dims=3):
    """Kernels of labels 1..region_num-1 (blobs, some touching) in a mostly-true mask."""
    rng = np.random.default_rng(seed)
    height, width = size
    score = rng.random(size, dtype=np.float32)
    mask = rng.random(size) < 0.85
    label = np.zeros(size, np.int32)
    for lab in range(1, region_num):
        y, x = rng.integers(0, height - 1), rng.integers(0, width - 1)
        label[y : y + rng.integers(1, 3), x : x + rng.integers(1, 3)] = lab
    contour = (label > 0) & (rng.random(size) < 0.8)
    # Embeddings near their nearest kernel's centre value, so that some pixels are refused.
    embedding = rng.random((height, width, dims), dtype=np.float32)
    return score, mask, embedding, label, contour.astype(np.uint8), region_num


def test_mmcv_example_exact_floats():
    score = np.zeros((10, 10), np.float32)
    score[3:7, 1:9] = 0.9
    embedding = np.zeros((10, 10, 8), np.float32)
    embedding[:, :7], embedding[:, 7:] = 0.9, 10.0
    label = np.zeros((10, 10), np.int32)
    label[3:7, 2:5], label[3:7, 8] = 1, 2
    contour = (label > 0).astype(np.uint8)
    contour[4:6, 3] = 0
    got = pixel_group(score, score > 0.5, embedding, label, contour, 3, 0.8)
    # mmcv's own expected numbers: the float32 sums of the kernel, bit for bit.
    assert got[0] == [0.0, 0.0]
    assert got[1][:2] == [0.8999997973442078, 24.0] and got[2][:2] == [0.9000000357627869, 8.0]
    assert got == reference(score, score > 0.5, embedding, label, contour, 3, 0.8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(12))
def test_matches_queue(device: str, seed: int):
    score, mask, embedding, label, contour, num = random_case(seed)
    threshold = 0.45 if seed % 2 else 10.0  # refusing some pixels, or none
    expected = reference(score, mask, embedding, label, contour, num, threshold)
    args = [torch.from_numpy(a).to(device) for a in (score, mask, embedding, label, contour)]
    assert pixel_group(*args, num, threshold) == expected
    if device == "cpu":  # numpy in, the same out
        assert pixel_group(score, mask, embedding, label, contour, num, threshold) == expected


def test_contested_pixel_goes_to_the_first_in_queue_order():
    # Free pixel (1, 1) lies between kernel 1 at (1, 0) and kernel 2 at (1, 2): both reach it
    # in the first level; (1, 0) comes first in row-major order and so wins.
    mask = np.ones((3, 3), bool)
    label = np.zeros((3, 3), np.int32)
    label[1, 0], label[1, 2] = 1, 2
    embedding = np.zeros((3, 3, 2), np.float32)
    score = np.ones((3, 3), np.float32)
    left_two_columns = [6.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 2.0, 1.0, 2.0]
    right_column = [3.0, 2.0, 0.0, 2.0, 1.0, 2.0, 2.0]
    got = pixel_group(score, mask, embedding, label, label.astype(np.uint8), 3, 1.0)
    assert got == reference(score, mask, embedding, label, label > 0, 3, 1.0)
    assert got[1][1:] == left_two_columns and got[2][1:] == right_column
    # Kernel 2 first in row-major order: it wins the middle column instead.
    label[1, 0], label[1, 2] = 2, 1
    got = pixel_group(score, mask, embedding, label, label.astype(np.uint8), 3, 1.0)
    assert got[2][1:] == left_two_columns and got[1][1:] == right_column


def test_refused_pixel_can_join_another_kernel():
    # (0, 1) is far from kernel 1's mean, close to kernel 2's: kernel 1 reaches it first
    # (row-major) and refuses, kernel 2 takes it.
    label = np.array([[1, 0, 2]], np.int32)
    embedding = np.array([[[0.0], [5.0], [5.0]]], np.float32)
    score = np.ones((1, 3), np.float32)
    mask = np.ones((1, 3), bool)
    got = pixel_group(score, mask, embedding, label, label.astype(np.uint8), 3, 1.0)
    assert got[1] == [1.0, 1.0, 0.0, 0.0]
    assert got[2] == [1.0, 2.0, 1.0, 0.0, 2.0, 0.0]


def test_kernel_pixels_count_outside_mask_and_nan_embeddings_pass():
    label = np.array([[1, 0, 0]], np.int32)
    mask = np.array([[False, True, True]])
    embedding = np.array([[[0.0], [np.nan], [9.0]]], np.float32)
    score = np.array([[0.5, 1.0, 1.0]], np.float32)
    got = pixel_group(score, mask, embedding, label, label.astype(np.uint8), 2, 1.0)
    assert got == reference(score, mask, embedding, label, label, 2, 1.0)
    assert got[1][:2] == [0.75, 2.0]  # the NaN pixel joins, as in the kernel; 9.0 is refused


def test_empty_and_unused_labels():
    empty = np.zeros((0, 4), np.float32)
    got = pixel_group(empty, empty > 0, np.zeros((0, 4, 2), np.float32), empty.astype(np.int32),
                      empty.astype(np.uint8), 3, 0.5)  # fmt: skip
    assert got == [[0.0, 0.0]] * 3
    score = np.ones((2, 2), np.float32)
    label = np.array([[0, 3], [0, 0]], np.int32)
    got = pixel_group(score, score > 0, np.zeros((2, 2, 1), np.float32), label,
                      np.zeros((2, 2), np.uint8), 5, 0.5)  # fmt: skip
    assert got[1] == got[2] == got[4] == [0.0, 0.0]
    assert got[3] == [1.0, 1.0, 1.0, 0.0]  # no contour: the kernel does not grow
    assert pixel_group(empty, empty > 0, np.zeros((0, 4, 2), np.float32),
                       empty.astype(np.int32), empty.astype(np.uint8), 0, 0.5) == []  # fmt: skip


def test_bad_input():
    score = np.ones((2, 3), np.float32)
    args = [score, score > 0, np.zeros((2, 3, 2), np.float32), np.zeros((2, 3), np.int32),
            np.zeros((2, 3), np.uint8)]  # fmt: skip
    with pytest.raises(TypeError, match="pixel_group: score must be a torch.Tensor or numpy"):
        pixel_group(score.tolist(), *args[1:], 2, 0.5)
    with pytest.raises(ValueError, match=r"embedding must have shape \(H, W, C\) with score's"):
        pixel_group(*args[:2], np.zeros((2, 4, 2), np.float32), *args[3:], 2, 0.5)
    with pytest.raises(ValueError, match=r"kernel_label must have shape \(H, W\)"):
        pixel_group(*args[:3], np.zeros((3, 2), np.int32), args[4], 2, 0.5)
    with pytest.raises(TypeError, match="kernel_label must be a bool or integer tensor"):
        pixel_group(*args[:3], np.zeros((2, 3), np.float32), args[4], 2, 0.5)
    with pytest.raises(TypeError, match="kernel_region_num must be an int, got float"):
        pixel_group(*args, 2.0, 0.5)
    with pytest.raises(TypeError, match="distance_threshold must be a float, got str"):
        pixel_group(*args, 2, "0.5")
    labels = np.array([[0, 2, 0], [0, 0, 0]], np.int32)
    with pytest.raises(ValueError, match=r"kernel_label must lie in \[0, kernel_region_num = 2"):
        pixel_group(*args[:3], labels, args[4], 2, 0.5)


@pytest.mark.parametrize("threshold", [float("nan"), -0.5])
def test_distance_threshold_nan_or_negative(threshold):
    score = np.ones((2, 3), np.float32)
    args = [score, score > 0, np.zeros((2, 3, 2), np.float32), np.zeros((2, 3), np.int32),
            np.zeros((2, 3), np.uint8)]  # fmt: skip
    with pytest.raises(ValueError, match="pixel_group: distance_threshold must be a number >= 0"):
        pixel_group(*args, 2, threshold)


def test_a_float64_default_dtype_changes_nothing():
    """The CPU sums take the embedding's dtype, not torch's default."""
    score, mask, embedding, label, contour, num = random_case(0)
    expected = reference(score, mask, embedding, label, contour, num, 0.45)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = pixel_group(score, mask, embedding, label, contour, num, 0.45)
    finally:
        torch.set_default_dtype(default)
    assert got == expected
