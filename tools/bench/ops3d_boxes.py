"""The 3D box ops' rows of the 3D ops section (``tools/bench/ops3d.py``).

:func:`rows` times mmpar's box ops with the section's ``compare`` (alternating rounds,
one thread, median of the per-round ratios):

* ``points_in_boxes_cpu``: 120,000 points (``quick``: 20,000) uniform in ``[0, 70] x
  [-40, 40] x [-3, 1]`` m against 64 car-size boxes (3.9 x 1.6 x 1.56 m, any yaw)
  spread over that range, against mmcv-full 1.7.2's CPU kernel
  ``points_in_boxes_cpu_forward``, called as mmcv's wrapper calls it. The kernel is
  loaded from ``$MMPAR_MMCV_FULL_EXT``, the path of a build of mmcv-full's ``_ext``
  module (the ``.so`` file or its folder); the row is skipped when it is unset.
* ``boxes_iou_bev`` (500 x 500 rotated ``(x1, y1, x2, y2, ry)`` boxes), ``nms_bev`` and
  ``nms3d`` (4,000 boxes in 400 clusters, threshold 0.5; ``nms3d`` with mmcv's
  ``iou3d`` kernel's overlap) against torchvision's ``box_iou`` and ``nms`` on the same
  boxes without their angle: what the rotation costs.
* ``RoIAwarePool3d`` (out_size 14, max_pts_per_voxel 128, 16 channels), ``max`` and
  ``avg``: 128 rois over 16,384 points (half of them in the rois) against a plain-torch
  scatter formulation of the same work: the dense in-box test, each inside point's
  voxel, then a ``scatter_reduce_`` max or an ``index_add_`` mean, without mmcv's cap of
  points per voxel and its argmax.

Target: within 3x of the reference (the rotated rows: within 3x is not expected, the
ratio is what the rotation costs).
"""

from __future__ import annotations

import math
import warnings
from types import ModuleType
from typing import Callable, List, Tuple

import ops3d_common as common
import torch
from torch import Tensor

#: ``(op, case, reference, ours_s, reference_s, ratio, target)``, as ``ops.py``'s rows.
Row = Tuple[str, str, str, float, float, float, str]
CAR = (3.9, 1.6, 1.56)


def scene(n_points: int, n_boxes: int, seed: int) -> Tuple[Tensor, Tensor]:
    """``(n_points, 3)`` points and ``(n_boxes, 7)`` bottom-centre car boxes."""
    gen = torch.Generator().manual_seed(seed)
    low, span = torch.tensor([0.0, -40.0, -3.0]), torch.tensor([70.0, 80.0, 4.0])
    points = torch.rand(n_points, 3, generator=gen) * span + low
    centre = torch.rand(n_boxes, 3, generator=gen) * span + low
    centre[:, 2] = -1.7
    yaw = (torch.rand(n_boxes, 1, generator=gen) - 0.5) * 2 * math.pi
    return points, torch.cat((centre, torch.tensor(CAR).expand(n_boxes, 3), yaw), 1)


def mmcv_points_in_boxes_cpu(ext: ModuleType, points: Tensor, boxes: Tensor) -> Tensor:
    """mmcv's ``points_in_boxes_cpu`` wrapper (one batch element) around the kernel."""
    out = points.new_zeros((boxes.shape[0], points.shape[0]), dtype=torch.int)
    ext.points_in_boxes_cpu_forward(boxes.float().contiguous(), points.float().contiguous(), out)
    return out.T


def bev_boxes(n: int, clusters: int, seed: int) -> Tensor:
    """``(n, 5)`` ``(x1, y1, x2, y2, ry)`` car boxes jittered around ``clusters`` centres."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.rand(clusters, 2, generator=gen) * torch.tensor([70.0, 80.0])
    centre = centres[torch.randint(0, clusters, (n,), generator=gen)]
    centre = centre + torch.randn(n, 2, generator=gen) * 0.5
    half = torch.tensor(CAR[:2]) / 2 * (1 + 0.1 * torch.randn(n, 2, generator=gen))
    yaw = (torch.rand(n, 1, generator=gen) - 0.5) * 2 * math.pi
    return torch.cat((centre - half, centre + half, yaw), 1)


def torch_roiaware(rois: Tensor, pts: Tensor, feats: Tensor, out: int, mode: str) -> Tensor:
    """The same pooling in plain torch: dense in-box test, voxel, scatter."""
    cos, sin = torch.cos(-rois[:, 6:7]), torch.sin(-rois[:, 6:7])
    dx, dy = pts[None, :, 0] - rois[:, 0:1], pts[None, :, 1] - rois[:, 1:2]
    lx, ly = dx * cos - dy * sin, dx * sin + dy * cos
    lz = pts[None, :, 2] - rois[:, 2:3]
    size = rois[:, 3:6, None]
    inside = (lx.abs() < size[:, 0] / 2) & (ly.abs() < size[:, 1] / 2)
    inside &= (lz >= 0) & (lz <= size[:, 2])
    roi, point = inside.nonzero(as_tuple=True)
    local = torch.stack((lx[roi, point], ly[roi, point], lz[roi, point]), 1)
    local[:, :2] += size[roi, :2, 0] / 2
    cell = (local / (size[roi, :, 0] / out)).long().clamp(0, out - 1)
    key = ((roi * out + cell[:, 0]) * out + cell[:, 1]) * out + cell[:, 2]
    slots, channels = rois.shape[0] * out**3, feats.shape[1]
    values = feats.index_select(0, point)
    if mode == "max":
        pooled = feats.new_full((slots, channels), -math.inf)
        pooled.scatter_reduce_(0, key[:, None].expand_as(values), values, "amax")
        pooled = pooled.where(pooled > -math.inf, 0)
    else:
        pooled = feats.new_zeros(slots, channels).index_add_(0, key, values)
        pooled /= torch.bincount(key, minlength=slots).clamp(min=1)[:, None]
    return pooled.view(rois.shape[0], out, out, out, channels)


def pool_scene(n_rois: int, n_points: int, channels: int) -> Tuple[Tensor, Tensor, Tensor]:
    """``rois``, ``pts`` (half of them inside the rois) and ``(n_points, channels)`` features."""
    pts, rois = scene(n_points, n_rois, seed=3)
    rois[:, 3:6] *= 1.5
    gen = torch.Generator().manual_seed(4)
    half = n_points // 2
    owner = rois[torch.randint(0, n_rois, (half,), generator=gen)]
    local = (torch.rand(half, 3, generator=gen) - 0.5) * owner[:, 3:6] * 0.98
    cos, sin = torch.cos(owner[:, 6]), torch.sin(owner[:, 6])
    pts[:half, 0] = owner[:, 0] + local[:, 0] * cos - local[:, 1] * sin
    pts[:half, 1] = owner[:, 1] + local[:, 0] * sin + local[:, 1] * cos
    pts[:half, 2] = owner[:, 2] + owner[:, 5] / 2 + local[:, 2]
    return rois, pts, torch.randn(n_points, channels, generator=gen)


def rows(quick: bool) -> List[Row]:
    """The rows, timed on one thread."""
    import torchvision.ops as tv

    from mmpar.compat.ops import (
        RoIAwarePool3d,
        boxes_iou_bev,
        nms3d,
        nms_bev,
        points_in_boxes_cpu,
    )

    compare = common.ops().compare
    rounds = 2 if quick else 5
    out: List[Row] = []

    def add(op: str, case: str, ref_name: str, ours: Callable, ref: Callable, target: str):
        ours_s, ref_s, ratio = compare(ours, ref, rounds)
        out.append((op, case, ref_name, ours_s, ref_s, ratio, target))

    ext = common.mmcv_full_ext()
    if ext is not None:
        n = 20000 if quick else 120000
        points, boxes = scene(n, 64, seed=0)
        add(
            "points_in_boxes_cpu",
            f"{n} points x 64 car boxes",
            "mmcv-full 1.7.2 CPU kernel",
            lambda: points_in_boxes_cpu(points[None], boxes[None]),
            lambda: mmcv_points_in_boxes_cpu(ext, points, boxes),
            "<= 3x",
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # mmcv's deprecated wrappers
        count = 200 if quick else 500
        a, b = bev_boxes(count, count // 10, seed=1), bev_boxes(count, count // 10, seed=2)
        add(
            "boxes_iou_bev",
            f"{count} x {count} rotated car boxes",
            "torchvision box_iou (axis-aligned)",
            lambda: boxes_iou_bev(a, b),
            lambda: tv.box_iou(a[:, :4], b[:, :4]),
            "",
        )
        count = 1000 if quick else 4000
        boxes = bev_boxes(count, count // 10, seed=3)
        scores = torch.rand(count, generator=torch.Generator().manual_seed(5))
        add(
            "nms_bev",
            f"{count} rotated car boxes in {count // 10} clusters, iou 0.5",
            "torchvision nms (axis-aligned)",
            lambda: nms_bev(boxes, scores, 0.5),
            lambda: tv.nms(boxes[:, :4], scores, 0.5),
            "",
        )
    # The same boxes as 3D boxes (x, y, z, dx, dy, dz, heading): mmcv's kernel's overlap.
    centre, size = (boxes[:, :2] + boxes[:, 2:4]) / 2, boxes[:, 2:4] - boxes[:, :2]
    boxes3d = torch.cat(
        (centre, torch.zeros(count, 1), size, torch.ones(count, 1), boxes[:, 4:]), 1
    )
    add(
        "nms3d",
        f"{count} rotated car boxes in {count // 10} clusters, iou 0.5",
        "torchvision nms (axis-aligned)",
        lambda: nms3d(boxes3d, scores, 0.5),
        lambda: tv.nms(boxes[:, :4], scores, 0.5),
        "",
    )
    n_rois, n_points, channels = (32, 4096, 16) if quick else (128, 16384, 16)
    rois, pts, feats = pool_scene(n_rois, n_points, channels)
    with torch.no_grad():
        for mode in ("max", "avg"):
            pool = RoIAwarePool3d(14, 128, mode)
            add(
                f"RoIAwarePool3d {mode}",
                f"{n_rois} rois, {n_points} points, out 14, {channels} ch",
                "torch in-box mask + scatter_reduce_ / index_add_",
                lambda: pool(rois, pts, feats),
                lambda: torch_roiaware(rois, pts, feats, 14, mode),
                "<= 3x",
            )
    return out
