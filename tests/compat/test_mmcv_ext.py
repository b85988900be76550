"""``mmcv._ext``'s raw entry points on mmpar's ops, as research code loads and calls them.

The entry points are checked against mmpar's own ops (forward, and backward written in
place into the caller's tensors); the mount is checked in fresh interpreters, through
mmcv's own ``ext_loader.load_ext``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from mmpar.compat import mmcv_ext
from mmpar.compat.mmcv_ext import (
    assign_score,
    attention,
    boxes2d,
    boxes3d,
    conv,
    grouping,
    losses,
    points,
    roi,
    upsample,
    voxel,
)
from mmpar.compat.ops.assign_score_withk import assign_score_withk
from mmpar.compat.ops.backend import UnsupportedOpError
from mmpar.compat.ops.ball_query import ball_query
from mmpar.compat.ops.bbox import bbox_overlaps
from mmpar.compat.ops.box_iou_quadri import box_iou_quadri
from mmpar.compat.ops.box_iou_rotated import box_iou_rotated
from mmpar.compat.ops.carafe import carafe
from mmpar.compat.ops.deform_conv import deform_conv2d
from mmpar.compat.ops.focal_loss import sigmoid_focal_loss, softmax_focal_loss
from mmpar.compat.ops.furthest_point_sample import (
    furthest_point_sample,
    furthest_point_sample_with_dist,
)
from mmpar.compat.ops.gather_points import gather_points
from mmpar.compat.ops.group_points import grouping_operation
from mmpar.compat.ops.iou3d import boxes_overlap_bev, nms3d, nms3d_normal
from mmpar.compat.ops.knn import knn
from mmpar.compat.ops.modulated_deform_conv import modulated_deform_conv2d
from mmpar.compat.ops.multi_scale_deform_attn import multi_scale_deformable_attn_pytorch
from mmpar.compat.ops.nms import nms, nms_match, nms_quadri, nms_rotated, soft_nms
from mmpar.compat.ops.points_in_boxes import (
    points_in_boxes_all,
    points_in_boxes_cpu,
    points_in_boxes_part,
)
from mmpar.compat.ops.roi_align import roi_align
from mmpar.compat.ops.roiaware_pool3d import RoIAwarePool3dFunction
from mmpar.compat.ops.roipoint_pool3d import RoIPointPool3dFunction
from mmpar.compat.ops.scatter_points import dynamic_scatter
from mmpar.compat.ops.three_interpolate import three_interpolate
from mmpar.compat.ops.three_nn import three_nn
from mmpar.compat.ops.voxelize import voxelization
from tests.compat._mmcv_env import REPO_ROOT, child_env, requires_mmcv, requires_torchvision
from tests.compat.ops._reference import DEVICES

pytestmark = [requires_torchvision]

SHAPES = [(6, 4), (3, 2)]


def _msda_inputs(device: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    bs, heads, dims, queries, points = 2, 2, 3, 5, 2
    shapes = torch.tensor(SHAPES, device=device)
    starts = torch.cat([shapes.new_zeros(1), (shapes[:, 0] * shapes[:, 1]).cumsum(0)[:-1]])
    keys = sum(h * w for h, w in SHAPES)
    value = torch.randn(bs, keys, heads, dims, generator=gen, dtype=dtype)
    # Some locations off the map and on its border: the zero padding's gradients too.
    locs = torch.rand(bs, queries, heads, len(SHAPES), points, 2, generator=gen, dtype=dtype)
    locs = locs * 1.2 - 0.1
    weights = torch.rand(bs, queries, heads, len(SHAPES), points, generator=gen, dtype=dtype)
    return tuple(t.to(device) for t in (value, shapes, starts, locs, weights))


@pytest.mark.parametrize("device", DEVICES)
def test_ms_deform_attn_forward_is_the_ops_forward(device: str) -> None:
    value, shapes, starts, locs, weights = _msda_inputs(device)
    out = attention.ms_deform_attn_forward(value, shapes, starts, locs, weights, im2col_step=64)
    expected = multi_scale_deformable_attn_pytorch(value, shapes, locs, weights)
    assert out.shape == (2, 5, 6) and not out.requires_grad
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_ms_deform_attn_backward_adds_autograds_gradients_in_place(device: str) -> None:
    value, shapes, starts, locs, weights = _msda_inputs(device, seed=1)
    grad_out = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(2)).to(device)
    leaves = [t.clone().requires_grad_() for t in (value, locs, weights)]
    multi_scale_deformable_attn_pytorch(leaves[0], shapes, *leaves[1:]).backward(grad_out)
    # Start from ones, not zeros: the kernel adds into what it is given.
    targets = [torch.ones_like(t) for t in (value, locs, weights)]
    pointers = [t.data_ptr() for t in targets]
    result = attention.ms_deform_attn_backward(
        value, shapes, starts, locs, weights, grad_out, *targets, im2col_step=64
    )
    assert result is None
    assert [t.data_ptr() for t in targets] == pointers
    for target, leaf in zip(targets, leaves):
        torch.testing.assert_close(target, leaf.grad + 1, rtol=1e-5, atol=1e-6)
    assert value.grad is None and not value.requires_grad


class _ResearchStyleFunction(torch.autograd.Function):
    """The autograd function BEVFormer-style code writes around the two entry points."""

    @staticmethod
    def forward(ctx, value, shapes, starts, locs, weights, im2col_step):  # type: ignore[override]
        ctx.im2col_step = im2col_step
        ctx.save_for_backward(value, shapes, starts, locs, weights)
        return attention.ms_deform_attn_forward(
            value, shapes, starts, locs, weights, im2col_step=im2col_step
        )

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        value, shapes, starts, locs, weights = ctx.saved_tensors
        grads = [torch.zeros_like(t) for t in (value, locs, weights)]
        attention.ms_deform_attn_backward(
            value,
            shapes,
            starts,
            locs,
            weights,
            grad_output.contiguous(),
            *grads,
            im2col_step=ctx.im2col_step,
        )
        return grads[0], None, None, grads[1], grads[2], None


def test_a_research_autograd_function_on_the_entry_points_passes_gradcheck() -> None:
    value, shapes, starts, locs, weights = _msda_inputs("cpu", dtype=torch.float64, seed=3)
    # Away from pixel centres: bilinear sampling is not differentiable across them.
    locs = (locs * 16).round() / 16 + 1 / 64
    inputs = [t.requires_grad_() for t in (value, locs, weights)]
    assert torch.autograd.gradcheck(
        lambda v, loc, w: _ResearchStyleFunction.apply(v, shapes, starts, loc, w, 64),
        inputs,
        eps=1e-6,
        atol=1e-5,
    )


def test_nms_entry_point_returns_the_kept_indices() -> None:
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 9, 10.0]])
    scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
    keep = boxes2d.nms(boxes, scores, iou_threshold=0.5, offset=0)
    assert keep.tolist() == nms(boxes, scores, 0.5)[1].tolist() == [3, 2]


@pytest.mark.parametrize("aligned", [False, True])
def test_box_iou_rotated_entry_point_writes_into_ious(aligned: bool) -> None:
    gen = torch.Generator().manual_seed(4)
    boxes1 = torch.rand(4, 5, generator=gen) * torch.tensor([10, 10, 4, 4, 3.0]) + 0.5
    boxes2 = torch.rand(4, 5, generator=gen) * torch.tensor([10, 10, 4, 4, 3.0]) + 0.5
    for flag, mode in ((0, "iou"), (1, "iof")):
        ious = torch.full((4 if aligned else 16,), -1.0)
        boxes2d.box_iou_rotated(boxes1, boxes2, ious, mode_flag=flag, aligned=aligned)
        expected = box_iou_rotated(boxes1, boxes2, mode=mode, aligned=aligned)
        torch.testing.assert_close(ious, expected.reshape(-1))
    with pytest.raises(ValueError, match="mode_flag must be 0 or 1, got 2"):
        boxes2d.box_iou_rotated(boxes1, boxes2, ious, mode_flag=2, aligned=aligned)


def _run(code: str) -> subprocess.CompletedProcess:
    env = child_env()
    for name in ("MMPAR_MMCV_OPS", "MMPAR_MMCV_OPS_ANNOUNCED"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
    )


@requires_mmcv
def test_load_ext_gives_mmpars_entry_points_to_mmcvs_own_wrappers() -> None:
    """mmcv 1.7.2's wrappers on mmpar's entry points give mmpar's ops' results and
    gradients; a name mmpar does not supply is one line naming it."""
    proc = _run(
        """
        from mmpar.compat import patch_mmcv, supply_mmcv_ops
        patch_mmcv()
        from mmcv.utils import ext_loader
        ext = ext_loader.load_ext("_ext", ["ms_deform_attn_forward", "ms_deform_attn_backward"])
        from mmpar.compat import mmcv_ext
        assert ext.ms_deform_attn_forward is mmcv_ext.ENTRY_POINTS["ms_deform_attn_forward"]
        # Deciding again probes mmcv's own library, not mmpar's stand-in.
        assert supply_mmcv_ops() == "mmpar"
        import mmcv._ext
        assert mmcv._ext.__mmpar_ops__
        try:
            ext_loader.load_ext("_ext", ["ms_deform_attn_forward", "bev_pool_forward"])
        except ImportError as err:
            print(type(err).__name__, "|", err)
        source = open(WRAPPERS).read()
        exec(compile(source, WRAPPERS, "exec"), {"__name__": "mmcv_ext_wrappers"})
        """.replace("WRAPPERS", repr(str(Path(__file__).with_name("_mmcv_ext_wrappers.py"))))
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    missing, mismatches = proc.stdout.strip().split("\n")
    assert missing.startswith(
        "MissingOpError | mmcv._ext.bev_pool_forward is not one of mmpar's ops"
    )
    assert mismatches == "mismatches: []"


@requires_mmcv
def test_ops_mmcv_leaves_mmcv_ext_to_mmcv() -> None:
    proc = _run(
        """
        from mmpar.compat import supply_mmcv_ops
        supply_mmcv_ops("mmpar")
        import mmcv._ext
        assert mmcv._ext.__mmpar_ops__
        supply_mmcv_ops("mmcv")
        try:
            import mmcv._ext
        except ImportError as err:
            print("mmcv's own:", type(err).__name__)
        else:
            print("still", getattr(mmcv._ext, "__mmpar_ops__", False))
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith("mmcv's own: ModuleNotFoundError")


# --- The 3D ops' entry points, against mmpar's ops -------------------------------------


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


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


def _features(device: str, seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed), dtype=torch.float64).to(device)


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


# --- Deformable convolution, RoI Align and the 2D boxes --------------------------------


def _dcn_inputs(device: str) -> tuple:
    x = _features(device, 43, 2, 4, 7, 7)
    offset = _features(device, 44, 2, 2 * 2 * 9, 4, 4)
    mask = torch.rand(2, 2 * 9, 4, 4, generator=_gen(45), dtype=torch.float64).to(device)
    weight = _features(device, 46, 6, 2, 3, 3)
    return x, offset, mask, weight


# mmcv's per-axis arguments for stride 2, padding 1, dilation 1, groups 2, deform groups 2.
_DCN_AXES = dict(
    kW=3, kH=3, dW=2, dH=2, padW=1, padH=1, dilationW=1, dilationH=1, group=2, deformable_group=2
)
_MDCN_AXES = dict(
    kernel_h=3,
    kernel_w=3,
    stride_h=2,
    stride_w=2,
    pad_h=1,
    pad_w=1,
    dilation_h=1,
    dilation_w=1,
    group=2,
    deformable_group=2,
)


@pytest.mark.parametrize("device", DEVICES)
def test_deform_conv_entry_points(device: str) -> None:
    x, offset, _, weight = _dcn_inputs(device)
    leaves = [t.clone().requires_grad_() for t in (x, offset, weight)]
    want = deform_conv2d(leaves[0], leaves[1], leaves[2], 2, 1, 1, 2, 2)
    out = x.new_empty(want.shape)
    empty = x.new_empty(0)
    conv.deform_conv_forward(x, weight, offset, out, empty, empty, **_DCN_AXES, im2col_step=2)
    assert torch.equal(out, want.detach())
    grad_out = _features(device, 47, *want.shape)
    want.backward(grad_out)
    grad_x, grad_off, grad_w = (torch.ones_like(t) for t in (x, offset, weight))
    conv.deform_conv_backward_input(
        x, offset, grad_out, grad_x, grad_off, weight, empty, **_DCN_AXES, im2col_step=2
    )
    conv.deform_conv_backward_parameters(
        x, offset, grad_out, grad_w, empty, empty, **_DCN_AXES, scale=0.5, im2col_step=2
    )
    torch.testing.assert_close(grad_x, leaves[0].grad + 1)  # added, as col2im's atomic adds
    torch.testing.assert_close(grad_off, leaves[1].grad)  # written, as col2im_coord
    torch.testing.assert_close(grad_w, 0.5 * leaves[2].grad + 1)  # addmm_ with scale
    with pytest.raises(ValueError, match=r"^mmcv\._ext\.deform_conv_forward: size arguments "):
        conv.deform_conv_forward(
            x, weight, offset, out, empty, empty, **{**_DCN_AXES, "kW": 5}, im2col_step=2
        )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_modulated_deform_conv_entry_points(device: str, with_bias: bool) -> None:
    x, offset, mask, weight = _dcn_inputs(device)
    bias = _features(device, 48, 6) if with_bias else x.new_empty(0)
    leaves = [t.clone().requires_grad_() for t in (x, offset, mask, weight, bias)]
    want = modulated_deform_conv2d(*leaves[:4], leaves[4] if with_bias else None, 2, 1, 1, 2, 2)
    out = x.new_empty(want.shape)
    empty = x.new_empty(0)
    conv.modulated_deform_conv_forward(
        x, weight, bias, empty, offset, mask, out, empty, **_MDCN_AXES, with_bias=with_bias
    )
    assert torch.equal(out, want.detach())
    grad_out = _features(device, 49, *want.shape)
    want.backward(grad_out)
    grads = [torch.ones_like(t) for t in (x, weight, bias, offset, mask)]
    conv.modulated_deform_conv_backward(
        x,
        weight,
        bias,
        empty,
        offset,
        mask,
        empty,
        *grads,
        grad_out,
        **_MDCN_AXES,
        with_bias=with_bias,
    )
    grad_x, grad_w, grad_b, grad_off, grad_mask = grads
    torch.testing.assert_close(grad_x, leaves[0].grad + 1)
    torch.testing.assert_close(grad_off, leaves[1].grad)
    torch.testing.assert_close(grad_mask, leaves[2].grad)
    torch.testing.assert_close(grad_w, leaves[3].grad + 1)
    if with_bias:
        torch.testing.assert_close(grad_b, leaves[4].grad + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_roi_align_entry_points_and_max_mode(device: str) -> None:
    feat = _features(device, 50, 2, 3, 16, 16)
    rois = torch.tensor([[0, 1.0, 1, 9, 9], [1, 2, 3, 14, 12]], dtype=torch.float64).to(device)
    leaf = feat.clone().requires_grad_()
    want = roi_align(leaf, rois, (3, 4), 0.5, 2, "avg", True)
    out = feat.new_zeros(want.shape)
    empty = feat.new_zeros(0)
    args = dict(
        aligned_height=3,
        aligned_width=4,
        spatial_scale=0.5,
        sampling_ratio=2,
        pool_mode=1,
        aligned=True,
    )
    roi.roi_align_forward(feat, rois, out, empty, empty, **args)
    assert torch.equal(out, want.detach())
    grad_out = _features(device, 51, *want.shape)
    want.backward(grad_out)
    grad = torch.ones_like(feat)
    roi.roi_align_backward(grad_out, rois, empty, empty, grad, **args)
    torch.testing.assert_close(grad, leaf.grad + 1)
    with pytest.raises(UnsupportedOpError, match=r"^mmcv\._ext\.roi_align_forward: pool_mode "):
        roi.roi_align_forward(feat, rois, out, out, out, **{**args, "pool_mode": 0})


def _xyxy(n: int, seed: int) -> torch.Tensor:
    boxes = torch.rand(n, 4, generator=_gen(seed)) * 10
    boxes[:, 2:] += boxes[:, :2] + 1
    return boxes


def test_soft_nms_and_nms_match_entry_points() -> None:
    boxes, scores = _xyxy(20, 52), torch.rand(20, generator=_gen(53))
    for method, name in enumerate(("naive", "linear", "gaussian")):
        dets = torch.full((20, 5), -1.0)
        inds = boxes2d.softnms(
            boxes,
            scores,
            dets,
            iou_threshold=0.3,
            sigma=0.5,
            min_score=0.05,
            method=method,
            offset=0,
        )
        want_dets, want_inds = soft_nms(boxes, scores, 0.3, 0.5, 0.05, name)
        assert torch.equal(inds, want_inds) and torch.equal(dets[: len(inds)], want_dets)
        assert (dets[len(inds) :] == -1).all()
    dets = torch.cat((boxes, scores[:, None]), 1)
    assert boxes2d.nms_match(dets, 0.3) == [g.tolist() for g in nms_match(dets, 0.3)]


def test_rotated_and_quadrilateral_nms_and_overlaps_entry_points() -> None:
    boxes, scores = _xyxy(16, 54), torch.rand(16, generator=_gen(55))
    rotated = torch.cat((boxes[:, :2], boxes[:, 2:] - boxes[:, :2], torch.rand(16, 1)), 1)
    order = scores.sort(0, descending=True)[1]
    labels = torch.randint(0, 3, (16,), generator=_gen(56))
    keep = boxes2d.nms_rotated(rotated, scores, order, rotated[order], labels.new_empty(0), 0.2, 0)
    assert torch.equal(keep, nms_rotated(rotated, scores, 0.2)[1])
    with_labels = torch.cat((rotated, labels[:, None].float()), 1)
    keep = boxes2d.nms_rotated(with_labels, scores, order, with_labels[order], labels, 0.2, 1)
    assert torch.equal(keep, nms_rotated(rotated, scores, 0.2, labels)[1])
    quads = boxes[:, [0, 1, 2, 1, 2, 3, 0, 3]]
    keep = boxes2d.nms_quadri(quads, scores, order, quads[order], 0.2, 0)
    assert torch.equal(keep, nms_quadri(quads, scores, 0.2)[1])
    for flag, mode in ((0, "iou"), (1, "iof")):
        ious = torch.zeros(16 * 5)
        boxes2d.box_iou_quadri(quads, quads[:5], ious, mode_flag=flag, aligned=False)
        assert torch.equal(ious, box_iou_quadri(quads, quads[:5], mode).reshape(-1))
        ious = torch.zeros(16, 16)
        boxes2d.bbox_overlaps(boxes, boxes.flip(0), ious, mode=flag, aligned=False, offset=0)
        assert torch.equal(ious, bbox_overlaps(boxes, boxes.flip(0), mode))


def test_every_entry_point_is_mmcv_fulls_name() -> None:
    names = set(mmcv_ext.ENTRY_POINTS)
    assert len(names) == 54
    assert {
        "hard_voxelize_forward",
        "iou3d_nms3d_forward",
        "modulated_deform_conv_backward",
        "ms_deform_attn_forward",
        "roi_align_backward",
        "knn_forward",
    } <= names


def test_the_module_answers_private_names_with_attribute_error() -> None:
    """``hasattr`` probes of every loaded module (mmcv.device.npu looks for
    ``_check_balance``) get False; a public name not supplied is the given error."""
    module = mmcv_ext.ext_module(lambda name: ImportError(f"{name} is missing"))
    assert not hasattr(module, "_check_balance") and hasattr(module, "knn_forward")
    with pytest.raises(ImportError, match=r"^mmcv\._ext\.bev_pool_forward is missing$"):
        hasattr(module, "bev_pool_forward")


def test_carafe_entry_points_forward_and_backward() -> None:
    feats = _features("cpu", 57, 2, 4, 5, 6)
    masks = torch.rand(2, 9 * 2, 10, 12, generator=_gen(58), dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (feats, masks)]
    want = carafe(*leaves, 3, 2, 2)
    grad_out = _features("cpu", 59, *want.shape)
    want.backward(grad_out)
    out = torch.zeros_like(want).detach()
    upsample.carafe_naive_forward(feats, masks, out, 3, 2, 2)
    assert torch.equal(out, want.detach())
    grads = [torch.ones_like(feats), torch.ones_like(masks)]
    upsample.carafe_naive_backward(grad_out, feats, masks, *grads, 3, 2, 2)
    for got, leaf in zip(grads, leaves):
        torch.testing.assert_close(got, leaf.grad + 1)  # the naive kernel's atomic adds
    bufs = [torch.zeros_like(t) for t in (feats, out, masks)]  # rfeatures, routput, rmasks
    out.zero_()
    upsample.carafe_forward(feats, masks, *bufs, out, 3, 2, 2)
    assert torch.equal(out, want.detach())
    assert torch.equal(bufs[0].view(2, 5, 6, 4), feats.permute(0, 2, 3, 1))  # channels last
    scratch = [torch.zeros(1)] * 4
    grads = [torch.ones_like(feats), torch.ones_like(masks)]
    upsample.carafe_backward(grad_out, bufs[0], masks, *scratch, *grads, 3, 2, 2)
    for got, leaf in zip(grads, leaves):
        torch.testing.assert_close(got, leaf.grad)  # written


@pytest.mark.parametrize("with_weight", [False, True])
def test_sigmoid_focal_loss_entry_points(with_weight: bool) -> None:
    logits = _features("cpu", 60, 6, 4)
    target = torch.tensor([0, 3, 1, 4, 2, 1])  # 4: background, negative for every class
    weight = torch.rand(4, generator=_gen(61), dtype=torch.float64) if with_weight else None
    leaf = logits.clone().requires_grad_()
    want = sigmoid_focal_loss(leaf, target, 2.0, 0.25, weight, "none")
    out = torch.zeros_like(logits)
    given = logits.new_empty(0) if weight is None else weight
    losses.sigmoid_focal_loss_forward(logits, target, given, out, gamma=2.0, alpha=0.25)
    # With weights, mmpar's op gives the background row NaN (mmcv reads past the weights).
    torch.testing.assert_close(out, want.detach(), rtol=0, atol=0, equal_nan=True)
    want.sum().backward()
    grad = torch.full_like(logits, 3.0)
    losses.sigmoid_focal_loss_backward(logits, target, given, grad, gamma=2.0, alpha=0.25)
    torch.testing.assert_close(grad, leaf.grad, equal_nan=True)


def test_softmax_focal_loss_entry_points_take_probabilities() -> None:
    logits = _features("cpu", 62, 6, 4)
    target = torch.tensor([0, 3, 1, 2, 2, 1])
    leaf = logits.clone().requires_grad_()
    want = softmax_focal_loss(leaf, target, 2.0, 0.25, None, "none")
    probs = logits.softmax(1)
    out = torch.zeros(6, dtype=torch.float64)
    empty = logits.new_empty(0)
    losses.softmax_focal_loss_forward(probs, target, empty, out, gamma=2.0, alpha=0.25)
    torch.testing.assert_close(out, want.detach())
    want.sum().backward()
    grad = torch.full_like(logits, 3.0)
    losses.softmax_focal_loss_backward(probs, target, empty, out, grad, gamma=2.0, alpha=0.25)
    torch.testing.assert_close(grad, leaf.grad)
