"""mmcv-full 1.7.2's 3D entry points of ``mmcv._ext`` (voxelization, 3D boxes, point search
and grouping, PAConv) against mmpar's ops: forward, and backward written or added in
place into the caller's tensors as the kernels write them.
"""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.mmcv_ext import (
    assign_score,
    boxes3d,
    grouping,
    points,
    voxel,
)
from mmpar.compat.ops.assign_score_withk import assign_score_withk
from mmpar.compat.ops.ball_query import ball_query
from mmpar.compat.ops.furthest_point_sample import (
    furthest_point_sample,
    furthest_point_sample_with_dist,
)
from mmpar.compat.ops.gather_points import gather_points
from mmpar.compat.ops.group_points import grouping_operation
from mmpar.compat.ops.iou3d import boxes_overlap_bev, nms3d, nms3d_normal
from mmpar.compat.ops.knn import knn
from mmpar.compat.ops.points_in_boxes import (
    points_in_boxes_all,
    points_in_boxes_cpu,
    points_in_boxes_part,
)
from mmpar.compat.ops.roiaware_pool3d import RoIAwarePool3dFunction
from mmpar.compat.ops.roipoint_pool3d import RoIPointPool3dFunction
from mmpar.compat.ops.scatter_points import dynamic_scatter
from mmpar.compat.ops.three_interpolate import three_interpolate
from mmpar.compat.ops.three_nn import three_nn
from mmpar.compat.ops.voxelize import voxelization
from tests.compat._mmcv_env import requires_torchvision
from tests.compat.ops._reference import DEVICES

pytestmark = [requires_torchvision]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _features(device: str, seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed), dtype=torch.float64).to(device)


def _boxes(n: int, seed: int, device: str = "cpu") -> torch.Tensor:
    """``(n, 7)`` bottom-centre boxes in a 10 m square."""
    scale = torch.tensor([10, 10, 2, 3, 3, 2, 3.0])
    low = torch.tensor([0, 0, 0, 0.5, 0.5, 0.5, 0.0])
    return (torch.rand(n, 7, generator=_gen(seed)) * scale + low).to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_hard_and_dynamic_voxelize_write_into_the_callers_buffers(device: str) -> None:
    pts = (torch.rand(300, 4, generator=_gen(10)) * 12 - 1).to(device)
    size, rng = [1.0, 1.0, 2.0], [0, 0, 0, 10, 10, 10]
    voxels = pts.new_full((40, 5, 4), -7.0)
    coors = torch.full((40, 3), -7, dtype=torch.int32, device=device)
    counts = torch.full((40,), -7, dtype=torch.int32, device=device)
    voxel_num = torch.zeros((), dtype=torch.long)
    ptrs = [t.data_ptr() for t in (voxels, coors, counts, voxel_num)]
    voxel.hard_voxelize_forward(
        pts,
        torch.tensor(size),
        torch.tensor(rng),
        voxels,
        coors,
        counts,
        voxel_num,
        max_points=5,
        max_voxels=40,
        NDim=3,
        deterministic=True,
    )
    assert [t.data_ptr() for t in (voxels, coors, counts, voxel_num)] == ptrs
    want = voxelization(pts, size, rng, 5, 40)
    v = int(voxel_num)
    assert v == want[0].shape[0] == 40
    for got, exp in zip((voxels, coors, counts), want):
        assert torch.equal(got[:v], exp)
    dyn = torch.zeros((300, 3), dtype=torch.int32, device=device)
    voxel.dynamic_voxelize_forward(pts, torch.tensor(size), torch.tensor(rng), dyn, NDim=3)
    assert torch.equal(dyn, voxelization(pts, size, rng, -1, -1))
    with pytest.raises(ValueError, match=r"^mmcv\._ext\.dynamic_voxelize_forward: NDim must be 3"):
        voxel.dynamic_voxelize_forward(pts, size, rng, dyn, NDim=4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce_type", ["sum", "mean", "max"])
def test_dynamic_point_to_voxel_forward_and_backward(device: str, reduce_type: str) -> None:
    feats = torch.randn(60, 3, generator=_gen(11)).to(device)
    coors = torch.randint(-1, 3, (60, 3), generator=_gen(12), dtype=torch.int32).to(device)
    out, out_coors, point2voxel, count = voxel.dynamic_point_to_voxel_forward(
        feats, coors, reduce_type
    )
    leaf = feats.clone().requires_grad_()
    want, want_coors = dynamic_scatter(leaf, coors, reduce_type)
    assert torch.equal(out, want.detach()) and torch.equal(out_coors, want_coors)
    assert point2voxel.dtype == count.dtype == torch.int32
    kept = (coors >= 0).all(1)
    assert (point2voxel[~kept] == -1).all()
    assert torch.equal(out_coors[point2voxel[kept].long()], coors[kept])
    assert count.sum() == kept.sum()
    grad_out = torch.randn(want.shape, generator=_gen(13)).to(device)
    want.backward(grad_out)
    grad = torch.full_like(feats, 5.0)  # dropped points' rows are left as given
    voxel.dynamic_point_to_voxel_backward(
        grad, grad_out, feats, out, point2voxel, count, reduce_type
    )
    assert torch.equal(grad[kept], leaf.grad[kept]) and (grad[~kept] == 5).all()


@pytest.mark.parametrize("device", DEVICES)
def test_points_in_boxes_entry_points_write_only_the_points_inside(device: str) -> None:
    boxes = _boxes(6, 14, device)[None].repeat(2, 1, 1)
    pts = (torch.rand(2, 80, 3, generator=_gen(15)) * 10).to(device)
    part = torch.full((2, 80), -9, dtype=torch.int32, device=device)
    boxes3d.points_in_boxes_part_forward(boxes, pts, part)
    want = points_in_boxes_part(pts, boxes)
    assert torch.equal(part, want.where(want >= 0, -9))
    every = torch.full((2, 80, 6), 7, dtype=torch.int32, device=device)
    boxes3d.points_in_boxes_all_forward(boxes, pts, every)
    want = points_in_boxes_all(pts, boxes)
    assert torch.equal(every, want.where(want == 1, 7)) and (want == 1).any()
    one = torch.zeros((6, 80), dtype=torch.int32, device=device)
    boxes3d.points_in_boxes_cpu_forward(boxes[0], pts[0], one)
    assert torch.equal(one, points_in_boxes_cpu(pts[:1], boxes[:1])[0].T)


@pytest.mark.parametrize("device", DEVICES)
def test_iou3d_entry_points_write_overlaps_and_kept_positions(device: str) -> None:
    boxes = _boxes(25, 16, device)
    ans = boxes.new_zeros(25, 4)
    boxes3d.iou3d_boxes_overlap_bev_forward(boxes, boxes[:4], ans)
    assert torch.equal(ans, boxes_overlap_bev(boxes, boxes[:4]))
    scores = torch.rand(25, generator=_gen(17)).to(device)
    order = scores.sort(0, descending=True)[1]
    for entry, face in (
        (boxes3d.iou3d_nms3d_forward, nms3d),
        (boxes3d.iou3d_nms3d_normal_forward, nms3d_normal),
    ):
        keep = torch.full((25,), -1, dtype=torch.long, device=device)
        num_out = torch.zeros((), dtype=torch.long)
        entry(boxes[order].contiguous(), keep, num_out, nms_overlap_thresh=0.05)
        kept = order[keep[: int(num_out)]]
        assert torch.equal(kept, face(boxes, scores, 0.05)) and 1 < int(num_out) < 25


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", [0, 1])
def test_roiaware_pool3d_forward_and_backward(device: str, mode: int) -> None:
    rois = _boxes(4, 18, device)
    pts = (torch.rand(600, 3, generator=_gen(19)) * torch.tensor([10, 10, 2.0])).to(device)
    feats = torch.randn(600, 5, generator=_gen(20)).to(device)
    grid, slots = (2, 3, 1), 6
    pooled = feats.new_zeros(4, *grid, 5)
    argmax = torch.zeros((4, *grid, 5), dtype=torch.int32, device=device)
    members = torch.zeros((4, *grid, slots), dtype=torch.int32, device=device)
    boxes3d.roiaware_pool3d_forward(rois, pts, feats, argmax, members, pooled, pool_method=mode)
    leaf = feats.clone().requires_grad_()
    want = RoIAwarePool3dFunction.apply(rois, pts, leaf, grid, slots, mode)
    assert torch.equal(pooled, want.detach())
    counts = members[..., 0]
    assert counts.max() == slots - 1 and (counts > 0).sum() > 4  # full voxels too
    if mode == 0:
        assert ((argmax >= 0) == (counts > 0)[..., None]).all()
    grad_out = torch.randn(want.shape, generator=_gen(21)).to(device)
    want.backward(grad_out)
    grad_in = torch.ones_like(feats)
    boxes3d.roiaware_pool3d_backward(members, argmax, grad_out, grad_in, pool_method=mode)
    torch.testing.assert_close(grad_in, leaf.grad + 1, rtol=1e-5, atol=1e-6)


def test_roipoint_pool3d_forward_writes_features_and_empty_flags() -> None:
    pts = torch.rand(2, 90, 3, generator=_gen(22)) * 10
    feats = torch.randn(2, 90, 4, generator=_gen(23))
    boxes = _boxes(5, 24)[None].repeat(2, 1, 1)
    boxes[:, -1, :3] += 100  # a box holding no point
    pooled = torch.full((2, 5, 16, 7), -1.0)
    flag = torch.full((2, 5), -1, dtype=torch.int32)
    boxes3d.roipoint_pool3d_forward(pts, boxes, feats, pooled, flag)
    want = RoIPointPool3dFunction.apply(pts, feats, boxes, 16)
    assert torch.equal(pooled, want[0]) and torch.equal(flag, want[1]) and flag[:, -1].all()


# --- Point search and grouping ---------------------------------------------------------


def _clouds(device: str, seed: int = 25) -> tuple:
    xyz = (torch.rand(2, 40, 3, generator=_gen(seed)) * 4).to(device)
    return xyz, xyz[:, :9].contiguous() + 0.1


@pytest.mark.parametrize("device", DEVICES)
def test_ball_query_and_stacked_ball_query_forward(device: str) -> None:
    xyz, centers = _clouds(device)
    idx = torch.full((2, 9, 6), -3, dtype=torch.int32, device=device)
    points.ball_query_forward(
        centers, xyz, idx, b=2, n=40, m=9, min_radius=0.2, max_radius=1.5, nsample=6
    )
    assert torch.equal(idx, ball_query(0.2, 1.5, 6, xyz, centers))
    counts = torch.tensor([40, 40], dtype=torch.int32, device=device)
    stacked = torch.zeros((18, 6), dtype=torch.int32, device=device)
    points.stack_ball_query_forward(
        centers.view(-1, 3),
        counts.new_tensor([9, 9]),
        xyz.view(-1, 3),
        counts,
        stacked,
        max_radius=1.5,
        nsample=6,
    )
    assert torch.equal(
        stacked,
        ball_query(
            0, 1.5, 6, xyz.view(-1, 3), centers.view(-1, 3), counts, counts.new_tensor([9, 9])
        ),
    )
    with pytest.raises(
        ValueError,
        match=r"^mmcv\._ext\.ball_query_forward: size arguments "
        r"differ from the tensors: n=41 \(the tensors have 40\)",
    ):
        points.ball_query_forward(centers, xyz, idx, 2, 41, 9, 0.2, 1.5, 6)


def _brute_sq_dist(centers: torch.Tensor, pts: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``|centers[b, m] - pts[b, idx[b, m, j]]|^2``, axis by axis, by loops."""
    out = torch.empty(idx.shape, dtype=pts.dtype)
    for b, m, j in torch.cartesian_prod(*[torch.arange(s) for s in idx.shape]).tolist():
        d = centers[b, m].cpu() - pts[b, idx[b, m, j]].cpu()
        out[b, m, j] = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_knn_forward_writes_indices_and_squared_distances(device: str) -> None:
    xyz, centers = _clouds(device, 26)
    idx = torch.zeros((2, 9, 5), dtype=torch.int32, device=device)
    dist2 = torch.zeros((2, 9, 5), device=device)
    points.knn_forward(xyz, centers, idx, dist2, b=2, n=40, m=9, nsample=5)
    assert torch.equal(idx, knn(5, xyz, centers).transpose(1, 2))
    assert torch.equal(dist2.cpu(), _brute_sq_dist(centers, xyz, idx.long().cpu()))
    # Fewer points than neighbours: the kernel's start values (1e10, index 0) remain.
    idx, dist2 = idx[:, :, :5].clone(), dist2.clone()
    points.knn_forward(xyz[:, :3], centers, idx, dist2, b=2, n=3, m=9, nsample=5)
    assert (idx[..., 3:] == 0).all() and (dist2[..., 3:] == 1e10).all()
    assert sorted(idx[0, 0, :3].tolist()) == [0, 1, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_three_nn_forward_writes_squared_distances(device: str) -> None:
    xyz, centers = _clouds(device, 27)
    dist2 = torch.zeros((2, 9, 3), device=device)
    idx = torch.zeros((2, 9, 3), dtype=torch.int32, device=device)
    points.three_nn_forward(centers, xyz, dist2, idx, b=2, n=9, m=40)
    dist, want_idx = three_nn(centers, xyz)
    assert torch.equal(idx, want_idx)
    assert torch.equal(dist2.cpu(), _brute_sq_dist(centers, xyz, idx.long().cpu()))
    torch.testing.assert_close(dist2.sqrt(), dist)
    points.three_nn_forward(centers, xyz[:, :2], dist2, idx, b=2, n=9, m=2)
    assert (dist2[..., 2] == float("inf")).all() and (idx[..., 2] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_furthest_point_sampling_entry_points(device: str) -> None:
    xyz, _ = _clouds(device, 28)
    idx = torch.zeros((2, 7), dtype=torch.int32, device=device)
    temp = xyz.new_full((2, 40), 1e10)
    points.furthest_point_sampling_forward(xyz, temp, idx, b=2, n=40, m=7)
    assert torch.equal(idx, furthest_point_sample(xyz, 7))
    dist = torch.cdist(xyz, xyz)
    points.furthest_point_sampling_with_dist_forward(dist, temp, idx, b=2, n=40, m=7)
    assert torch.equal(idx, furthest_point_sample_with_dist(dist, 7))


@pytest.mark.parametrize("device", DEVICES)
def test_grouping_entry_points_forward_and_backward_add(device: str) -> None:
    feats = _features(device, 29, 2, 4, 30)
    cases = [  # (entry forward, entry backward, face, index, size arguments)
        (
            grouping.three_interpolate_forward,
            grouping.three_interpolate_backward,
            three_interpolate,
            (
                torch.randint(0, 30, (2, 8, 3), generator=_gen(30), dtype=torch.int32),
                torch.rand(2, 8, 3, generator=_gen(31), dtype=torch.float64),
            ),
            lambda out: dict(b=2, c=4, m=30, n=8),
            lambda out: dict(b=2, c=4, n=8, m=30),
        ),
        (
            grouping.group_points_forward,
            grouping.group_points_backward,
            grouping_operation,
            (torch.randint(0, 30, (2, 8, 5), generator=_gen(32), dtype=torch.int32),),
            lambda out: dict(b=2, c=4, n=30, npoints=8, nsample=5),
            lambda out: dict(b=2, c=4, n=30, npoints=8, nsample=5),
        ),
        (
            grouping.gather_points_forward,
            grouping.gather_points_backward,
            gather_points,
            (torch.randint(0, 30, (2, 8), generator=_gen(33), dtype=torch.int32),),
            lambda out: dict(b=2, c=4, n=30, npoints=8),
            lambda out: dict(b=2, c=4, n=30, npoints=8),
        ),
    ]
    for forward, backward, face, index, fwd_sizes, bwd_sizes in cases:
        index = tuple(t.to(device) for t in index)
        leaf = feats.clone().requires_grad_()
        want = face(leaf, *index)
        out = torch.full_like(want, 9.0).detach()
        ptr = out.data_ptr()
        forward(feats, *index, out, **fwd_sizes(out))
        assert out.data_ptr() == ptr and torch.equal(out, want.detach()), face
        grad_out = torch.randn(want.shape, generator=_gen(34), dtype=want.dtype).to(device)
        want.backward(grad_out)
        grad = torch.ones_like(feats)
        backward(grad_out, *index, grad, **bwd_sizes(out))
        torch.testing.assert_close(grad, leaf.grad + 1, msg=str(face))


def test_stacked_group_points_forward_and_backward() -> None:
    feats = _features("cpu", 35, 50, 3)
    idx = torch.randint(0, 25, (12, 4), generator=_gen(36), dtype=torch.int32)
    fcnt, icnt = torch.tensor([25, 25], dtype=torch.int32), torch.tensor([6, 6], dtype=torch.int32)
    leaf = feats.clone().requires_grad_()
    want = grouping_operation(leaf, idx, fcnt, icnt)
    out = torch.zeros(12, 3, 4, dtype=torch.float64)
    grouping.stack_group_points_forward(feats, fcnt, idx, icnt, out, b=2, c=3, m=12, nsample=4)
    assert torch.equal(out, want.detach())
    grad_out = torch.randn(want.shape, generator=_gen(37), dtype=torch.float64)
    want.backward(grad_out)
    grad = torch.zeros_like(feats)
    grouping.stack_group_points_backward(
        grad_out, idx, icnt, fcnt, grad, b=2, c=3, m=12, n=50, nsample=4
    )
    torch.testing.assert_close(grad, leaf.grad)


@pytest.mark.parametrize("aggregate", [0, 1, 2])
def test_assign_score_withk_forward_and_backward(aggregate: int) -> None:
    scores = torch.rand(2, 6, 4, 3, generator=_gen(38), dtype=torch.float64)
    pf, cf = _features("cpu", 39, 2, 20, 3, 5), _features("cpu", 40, 2, 20, 3, 5)
    knn_idx = torch.randint(0, 20, (2, 6, 4), generator=_gen(41))
    leaves = [t.clone().requires_grad_() for t in (scores, pf, cf)]
    name = ("sum", "avg", "max")[aggregate]
    want = assign_score_withk(*leaves, knn_idx, name)
    out = torch.zeros(2, 5, 6, 4, dtype=torch.float64)
    sizes = dict(B=2, N0=20, N1=6, M=3, K=4, O=5, aggregate=aggregate)
    assign_score.assign_score_withk_forward(pf, cf, scores, knn_idx, out, **sizes)
    assert torch.equal(out, want.detach())
    grad_out = torch.randn(want.shape, generator=_gen(42), dtype=torch.float64)
    want.backward(grad_out)
    grads = [torch.ones_like(t) for t in (pf, cf, scores)]
    assign_score.assign_score_withk_backward(grad_out, pf, cf, scores, knn_idx, *grads, **sizes)
    for got, leaf in zip(grads, (leaves[1], leaves[2], leaves[0])):
        torch.testing.assert_close(got, leaf.grad + 1)
