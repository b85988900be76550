"""mmdet3d 0.17's compiled extension functions (mmpar.compat.mmdet3d017) against the
mmpar ops they map to, and against 0.17's box conventions written from its kernels.

Runs without mmdet3d: the functions are called as mmdet3d 0.17's Python wrappers call
them (sizes, tensors, preallocated outputs), and what they write in place is checked.
"""

from __future__ import annotations

import importlib
import math
import sys

import pytest
import torch

from mmpar.compat.mmdet3d017 import EXTENSIONS, mend_mmdet3d017
from mmpar.compat.mmdet3d017.mount import stand_in
from mmpar.compat.ops import sparse_ops
from mmpar.compat.ops.assign_score_withk import assign_score_withk
from mmpar.compat.ops.ball_query import ball_query
from mmpar.compat.ops.furthest_point_sample import furthest_point_sample
from mmpar.compat.ops.gather_points import gather_points
from mmpar.compat.ops.group_points import grouping_operation
from mmpar.compat.ops.knn import knn
from mmpar.compat.ops.roiaware_pool3d import RoIAwarePool3dFunction
from mmpar.compat.ops.scatter_points import dynamic_scatter
from mmpar.compat.ops.three_interpolate import three_interpolate
from mmpar.compat.ops.three_nn import three_nn
from mmpar.compat.ops.voxelize import voxelization
from tests.compat.ops._reference import DEVICES, clipped_area

#: Every pybind name of mmdet3d 0.17.1's 11 modules (read from its .cpp/.cc files).
PYBIND_NAMES = {
    "mmdet3d.ops.spconv.sparse_conv_ext": {
        *(f"get_indice_pairs_{n}d" for n in (2, 3, 4)),
        *(f"get_indice_pairs_grid_{n}d" for n in (2, 3)),
        *(
            f"{f}_{t}"
            for f in (
                "indice_conv",
                "indice_conv_backward",
                "fused_indice_conv",
                "indice_maxpool",
                "indice_maxpool_backward",
            )
            for t in ("fp32", "half")
        ),
    },
    "mmdet3d.ops.iou3d.iou3d_cuda": {
        "boxes_overlap_bev_gpu",
        "boxes_iou_bev_gpu",
        "nms_gpu",
        "nms_normal_gpu",
    },
    "mmdet3d.ops.voxel.voxel_layer": {
        "hard_voxelize",
        "dynamic_voxelize",
        "dynamic_point_to_voxel_forward",
        "dynamic_point_to_voxel_backward",
    },
    "mmdet3d.ops.roiaware_pool3d.roiaware_pool3d_ext": {
        "forward",
        "backward",
        "points_in_boxes_gpu",
        "points_in_boxes_batch",
        "points_in_boxes_cpu",
    },
    "mmdet3d.ops.ball_query.ball_query_ext": {"ball_query_wrapper"},
    "mmdet3d.ops.knn.knn_ext": {"knn_wrapper"},
    "mmdet3d.ops.paconv.assign_score_withk_ext": {
        "assign_score_withk_forward_wrapper",
        "assign_score_withk_backward_wrapper",
    },
    "mmdet3d.ops.group_points.group_points_ext": {"forward", "backward"},
    "mmdet3d.ops.interpolate.interpolate_ext": {
        "three_nn_wrapper",
        "three_interpolate_wrapper",
        "three_interpolate_grad_wrapper",
    },
    "mmdet3d.ops.furthest_point_sample.furthest_point_sample_ext": {
        "furthest_point_sampling_wrapper",
        "furthest_point_sampling_with_dist_wrapper",
    },
    "mmdet3d.ops.gather_points.gather_points_ext": {
        "gather_points_wrapper",
        "gather_points_grad_wrapper",
    },
}


def ext(name: str):
    return stand_in(f"mmdet3d.ops.{name}")


def test_every_module_and_name():
    assert set(EXTENSIONS) == set(PYBIND_NAMES)
    for name, names in PYBIND_NAMES.items():
        module = stand_in(name)
        assert {k for k in vars(module) if not k.startswith("_")} == names, name
        with pytest.raises(AttributeError):
            module.not_an_entry_point


def test_finder_answers_the_imports(tmp_path, monkeypatch):
    # A bare mmdet3d package tree: the finder supplies the compiled modules inside it.
    for name in EXTENSIONS:
        folder = tmp_path.joinpath(*name.split(".")[:-1])
        folder.mkdir(parents=True, exist_ok=True)
        for parent in [folder, *folder.parents]:
            if parent == tmp_path:
                break
            (parent / "__init__.py").touch()
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == "mmdet3d" or n.startswith("mmdet3d.")]:
        monkeypatch.delitem(sys.modules, name)
    mend_mmdet3d017()
    mend_mmdet3d017()  # idempotent
    module = importlib.import_module("mmdet3d.ops.iou3d.iou3d_cuda")
    assert module.__mmpar_ops__ and callable(module.nms_gpu)
    from mmdet3d.ops.spconv import sparse_conv_ext  # noqa: F401 - the way 0.17 imports it

    for name in [n for n in sys.modules if n == "mmdet3d" or n.startswith("mmdet3d.")]:
        monkeypatch.delitem(sys.modules, name)


def _fake_mmdet3d(tmp_path, monkeypatch, files):
    """A made-up ``mmdet3d`` package holding ``files`` (dotted name -> source)."""
    for name, source in files.items():
        parts = name.split(".")
        folder = tmp_path.joinpath(*parts[:-1])
        folder.mkdir(parents=True, exist_ok=True)
        for parent in [folder, *folder.parents]:
            if parent == tmp_path:
                break
            (parent / "__init__.py").touch()
        (folder / f"{parts[-1]}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == "mmdet3d" or n.startswith("mmdet3d.")]:
        monkeypatch.delitem(sys.modules, name)
    mend_mmdet3d017()


def test_numba_errors_is_numba_core_errors():
    pytest.importorskip("numba")
    mend_mmdet3d017()
    from numba.core.errors import NumbaPerformanceWarning as moved
    from numba.errors import NumbaPerformanceWarning

    assert NumbaPerformanceWarning is moved


def test_sparse_convolutions_registered_by_mmcv_give_way(tmp_path, monkeypatch):
    registry = pytest.importorskip("mmcv.cnn.bricks.registry")
    layers = registry.CONV_LAYERS._module_dict
    monkeypatch.setitem(layers, "SubMConv3d", type("SubMConv3d", (), {}))  # mmcv's (>= 1.4.6)
    source = (
        "from mmcv.cnn.bricks.registry import CONV_LAYERS\n"
        "@CONV_LAYERS.register_module()\n"
        "class SubMConv3d:\n    pass\n"
    )
    _fake_mmdet3d(tmp_path, monkeypatch, {"mmdet3d.ops.spconv.conv": source})
    module = importlib.import_module("mmdet3d.ops.spconv.conv")  # no "already registered"
    assert layers["SubMConv3d"] is module.SubMConv3d
    for name in [n for n in sys.modules if n == "mmdet3d" or n.startswith("mmdet3d.")]:
        monkeypatch.delitem(sys.modules, name)


def test_cuda_bound_wrappers_run_on_the_cpu(tmp_path, monkeypatch):
    # 0.17's wrapper allocates with torch.cuda.IntTensor: on the CPU, mmpar's op answers.
    source = (
        "def ball_query(min_radius, max_radius, sample_num, xyz, center_xyz):\n"
        "    raise RuntimeError('torch.cuda.IntTensor')\n"
    )
    _fake_mmdet3d(tmp_path, monkeypatch, {"mmdet3d.ops.ball_query.ball_query": source})
    module = importlib.import_module("mmdet3d.ops.ball_query.ball_query")
    xyz = torch.rand(1, 20, 3)
    found = module.ball_query(0.0, 0.5, 4, xyz, xyz[:, :5].contiguous())
    assert torch.equal(found, ball_query(0.0, 0.5, 4, xyz, xyz[:, :5].contiguous()))
    for name in [n for n in sys.modules if n == "mmdet3d" or n.startswith("mmdet3d.")]:
        monkeypatch.delitem(sys.modules, name)


# ------------------------------------------------------------------ spconv


def _sites(n: int, shape, batch: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    volume = batch * math.prod(shape)
    flat = torch.randperm(volume, generator=g)[:n]
    coords = []
    for size in reversed(shape):
        coords.append(flat % size)
        flat = flat // size
    return torch.stack([flat, *reversed(coords)], 1).int()


@pytest.mark.parametrize("subm", [0, 1])
def test_get_indice_pairs_3d_is_mmcv_sparse_ops(subm):
    f = ext("spconv.sparse_conv_ext")
    indices = _sites(40, [6, 7, 5], 2)
    spatial = [6, 7, 5]
    out_shape = (
        spatial
        if subm
        else sparse_ops.get_conv_output_size(spatial, [3] * 3, [2] * 3, [1] * 3, [1] * 3)
    )
    args = (indices, 2, out_shape, spatial, [3] * 3, [2] * 3, [1] * 3, [1] * 3, [0] * 3, subm, 0)
    found = f.get_indice_pairs_3d(*args)
    assert isinstance(found, list) and len(found) == 3
    want = sparse_ops.get_indice_pairs(indices, 2, spatial, 3, 2, 1, 1, 0, bool(subm), False)
    for a, b in zip(found, want):
        assert torch.equal(a, b)
    grid = torch.full((2 * math.prod(out_shape),), -1, dtype=torch.int32)
    for a, b in zip(f.get_indice_pairs_grid_3d(indices, grid, *args[1:]), want):
        assert torch.equal(a, b)


def test_get_indice_pairs_checks_dimensions_and_out_shape():
    f = ext("spconv.sparse_conv_ext")
    indices = _sites(10, [4, 4, 4], 1)
    with pytest.raises(ValueError, match=r"get_indice_pairs_2d: indices must have shape \(N, 3\)"):
        f.get_indice_pairs_2d(
            indices, 1, [4, 4], [4, 4], [3, 3], [1, 1], [0, 0], [1, 1], [0, 0], 0, 0
        )
    with pytest.raises(ValueError, match=r"out_shape \[9, 9, 9\] is not the convolution's"):
        f.get_indice_pairs_3d(
            indices, 1, [9] * 3, [4] * 3, [3] * 3, [1] * 3, [0] * 3, [1] * 3, [0] * 3, 0, 0
        )


def test_indice_conv_family_is_mmcv_sparse_ops():
    f = ext("spconv.sparse_conv_ext")
    g = torch.Generator().manual_seed(1)
    indices = _sites(30, [5, 5, 5], 1)
    outids, pairs, num = f.get_indice_pairs_3d(
        indices, 1, [3] * 3, [5] * 3, [3] * 3, [2] * 3, [1] * 3, [1] * 3, [0] * 3, 0, 0
    )
    feats = torch.randn(30, 4, generator=g)
    filters = torch.randn(3, 3, 3, 4, 6, generator=g)
    bias = torch.randn(6, generator=g)
    m = outids.shape[0]
    out = f.indice_conv_fp32(feats, filters, pairs, num, m, 0, 0)
    assert torch.equal(out, sparse_ops.indice_conv(feats, filters, pairs, num, m, False, False))
    fused = f.fused_indice_conv_fp32(feats, filters, bias, pairs, num, m, 0, 0)
    torch.testing.assert_close(fused, out + bias)
    out_bp = torch.randn(m, 6, generator=g)
    grads = f.indice_conv_backward_fp32(feats, filters, out_bp, pairs, num, 0, 0)
    want = sparse_ops.indice_conv_backward(feats, filters, out_bp, pairs, num, False, False)
    assert isinstance(grads, list) and all(torch.equal(a, b) for a, b in zip(grads, want))
    pooled = f.indice_maxpool_fp32(feats, pairs, num, m)
    assert torch.equal(pooled, sparse_ops.indice_maxpool(feats, pairs, num, m))
    back = f.indice_maxpool_backward_fp32(feats, pooled, out_bp[:, :4], pairs, num)
    assert torch.equal(
        back, sparse_ops.indice_maxpool_backward(feats, pooled, out_bp[:, :4], pairs, num)
    )
    half = f.indice_conv_half(feats.half(), filters.half(), pairs, num, m, 0, 0)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.float(), out, atol=5e-2, rtol=1e-2)
    with pytest.raises(
        TypeError, match=r"indice_conv_fp32: features must be torch.float32, found torch.float16"
    ):
        f.indice_conv_fp32(feats.half(), filters, pairs, num, m, 0, 0)
    with pytest.raises(TypeError, match=r"indice_maxpool_half: features must be torch.float16"):
        f.indice_maxpool_half(feats, pairs, num, m)


# ------------------------------------------------------------------ iou3d


def _corners017(box):
    """0.17's ``box_overlap`` corners: ``[x1, x2] x [y1, y2]`` turned about the centre
    by its ``rotate_around_center`` (``x cos + y sin``, ``-x sin + y cos``)."""
    x1, y1, x2, y2, r = (float(v) for v in box)
    cx, cy, c, s = (x1 + x2) / 2, (y1 + y2) / 2, math.cos(r), math.sin(r)
    out = []
    for x, y in ((x1, y1), (x2, y1), (x2, y2), (x1, y2)):
        dx, dy = x - cx, y - cy
        out.append((dx * c + dy * s + cx, -dx * s + dy * c + cy))
    return out


def _boxes5(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centre = torch.rand(n, 2, generator=g) * 6
    size = torch.rand(n, 2, generator=g) * 3 + 0.5
    angle = (torch.rand(n, 1, generator=g) - 0.5) * 6
    return torch.cat([centre - size / 2, centre + size / 2, angle], 1)


@pytest.mark.parametrize("device", DEVICES)
def test_bev_overlap_and_iou_against_017_geometry(device):
    f = ext("iou3d.iou3d_cuda")
    a, b = _boxes5(7, 2).to(device), _boxes5(5, 3).to(device)
    overlap = torch.zeros(7, 5, device=device)
    iou = torch.zeros(7, 5, device=device)
    assert f.boxes_overlap_bev_gpu(a, b, overlap) == 1
    assert f.boxes_iou_bev_gpu(a, b, iou) == 1
    for i in range(7):
        for j in range(5):
            inter = clipped_area(_corners017(a[i]), _corners017(b[j]))
            areas = float(
                (a[i, 2] - a[i, 0]) * (a[i, 3] - a[i, 1])
                + (b[j, 2] - b[j, 0]) * (b[j, 3] - b[j, 1])
            )
            assert overlap[i, j].item() == pytest.approx(inter, abs=1e-4)
            assert iou[i, j].item() == pytest.approx(inter / max(areas - inter, 1e-8), abs=1e-4)


def _greedy(boxes, thresh, iou):
    keep = []
    for i in range(len(boxes)):
        if all(iou(boxes[k], boxes[i]) <= thresh for k in keep):
            keep.append(i)
    return keep


def _iou017(p, q):
    inter = clipped_area(_corners017(p), _corners017(q))
    union = float((p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1])) - inter
    return inter / max(union, 1e-8)


def _iou_normal(p, q):
    w = max(min(p[2], q[2]) - max(p[0], q[0]), 0)
    h = max(min(p[3], q[3]) - max(p[1], q[1]), 0)
    union = float((p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1])) - w * h
    return float(w * h) / max(union, 1e-8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn, iou", [("nms_gpu", _iou017), ("nms_normal_gpu", _iou_normal)])
def test_nms_writes_keep_in_index_order(device, fn, iou):
    boxes = _boxes5(30, 4).to(device)
    keep = torch.zeros(30, dtype=torch.long)  # on the CPU, as 0.17's wrapper allocates it
    num = getattr(ext("iou3d.iou3d_cuda"), fn)(boxes, keep, 0.1, 0)
    want = _greedy(boxes.cpu().tolist(), 0.1, iou)
    assert num == len(want) and keep[:num].tolist() == want
    assert not keep[num:].any()
    empty = torch.zeros(0, dtype=torch.long)
    assert getattr(ext("iou3d.iou3d_cuda"), fn)(boxes[:0], empty, 0.1, 0) == 0


# ------------------------------------------------------------------ points in boxes, roiaware


def _in_box017(p, box):
    """0.17's ``check_pt_in_box3d`` (``(x, y, z, w, l, h, rz)``, bottom centre)."""
    x, y, z = p
    cx, cy, cz, w, l, h, rz = box  # noqa: E741
    cz += h / 2
    if abs(z - cz) > h / 2:
        return 0
    a = rz + math.pi / 2
    lx = (x - cx) * math.cos(a) - (y - cy) * math.sin(a)
    ly = (x - cx) * math.sin(a) + (y - cy) * math.cos(a)
    return int(-l / 2 < lx < l / 2 and -w / 2 < ly < w / 2)


def _lidar_scene(seed: int):
    g = torch.Generator().manual_seed(seed)
    boxes = torch.cat(
        [
            torch.rand(2, 4, 3, generator=g) * 4,
            torch.rand(2, 4, 3, generator=g) * 2 + 0.5,
            torch.rand(2, 4, 1, generator=g) * 6,
        ],
        2,
    )
    points = torch.rand(2, 60, 3, generator=g) * 5
    return points, boxes


@pytest.mark.parametrize("device", DEVICES)
def test_points_in_boxes_against_017_test(device):
    f = ext("roiaware_pool3d.roiaware_pool3d_ext")
    points, boxes = (t.to(device) for t in _lidar_scene(5))
    part = torch.full((2, 60), -1, dtype=torch.int32, device=device)
    every = torch.zeros(2, 60, 4, dtype=torch.int32, device=device)
    assert f.points_in_boxes_gpu(boxes, points, part) == 1
    assert f.points_in_boxes_batch(boxes, points, every) == 1
    cpu = torch.zeros(4, 60, dtype=torch.int32)
    assert f.points_in_boxes_cpu(boxes[0].cpu(), points[0].cpu(), cpu) == 1
    for bi in range(2):
        for m in range(60):
            inside = [_in_box017(points[bi, m].tolist(), boxes[bi, t].tolist()) for t in range(4)]
            assert every[bi, m].tolist() == inside
            assert part[bi, m].item() == (inside.index(1) if 1 in inside else -1)
            if bi == 0:
                assert cpu[:, m].tolist() == inside
    assert every.sum() > 0


def test_mmdet3d_017_points_in_boxes_numbers():
    # mmdet3d 0.17.1's tests/test_models/test_common_modules/test_roiaware_pool3d.py.
    boxes = torch.tensor(
        [[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.3], [-10.0, 23.0, 16.0, 10, 20, 20, 0.5]]]
    )
    pts = torch.tensor(
        [
            [
                [1, 2, 3.3],
                [1.2, 2.5, 3.0],
                [0.8, 2.1, 3.5],
                [1.6, 2.6, 3.6],
                [0.8, 1.2, 3.9],
                [-9.2, 21.0, 18.2],
                [3.8, 7.9, 6.3],
                [4.7, 3.5, -12.2],
                [3.8, 7.6, -2],
                [-10.6, -12.9, -20],
                [-16, -18, 9],
                [-21.3, -52, -5],
                [0, 0, 0],
                [6, 7, 8],
                [-2, -3, -4],
                [6, 4, 9],
            ]
        ]
    )
    part = torch.full((1, 16), -1, dtype=torch.int32)
    ext("roiaware_pool3d.roiaware_pool3d_ext").points_in_boxes_gpu(boxes, pts, part)
    assert part.tolist() == [[0, 0, 0, 0, 0, 1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1]]


def _roiaware(device, mode):
    f = ext("roiaware_pool3d.roiaware_pool3d_ext")
    g = torch.Generator().manual_seed(6)
    rois = torch.tensor([[1.0, 2.0, 0.0, 3.0, 4.0, 2.0, 0.4], [2.0, 1.0, 0.5, 2.0, 2.0, 1.0, -1.0]])
    pts = torch.rand(300, 3, generator=g) * torch.tensor([4.0, 5.0, 2.5])
    feats = torch.randn(300, 5, generator=g)
    rois, pts, feats = rois.to(device), pts.to(device), feats.to(device)
    pooled = feats.new_zeros(2, 3, 2, 2, 5)
    argmax = torch.zeros(2, 3, 2, 2, 5, dtype=torch.int32, device=device)
    idx = torch.zeros(2, 3, 2, 2, 9, dtype=torch.int32, device=device)
    assert f.forward(rois, pts, feats, argmax, idx, pooled, mode) == 1
    return f, rois, pts, feats, pooled, argmax, idx


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", [0, 1])
def test_roiaware_forward_backward_is_mmcv_pooling(device, mode):
    f, rois, pts, feats, pooled, argmax, idx = _roiaware(device, mode)
    from mmpar.compat.mmdet3d017.boxes_ext import lidar_boxes_to_mmcv

    x = feats.clone().requires_grad_()
    want = RoIAwarePool3dFunction.apply(lidar_boxes_to_mmcv(rois), pts, x, (3, 2, 2), 9, mode)
    torch.testing.assert_close(pooled, want.detach())
    grad_out = torch.randn_like(pooled)
    (want_grad,) = torch.autograd.grad(want, x, grad_out)
    grad_in = torch.zeros_like(feats)
    assert f.backward(idx, argmax, grad_out, grad_in, mode) == 1
    torch.testing.assert_close(grad_in, want_grad)
    # The layout: the count first, then that many points, each in its roi (0.17's test).
    flat = idx.view(-1, 9)
    assert flat[:, 0].max() <= 8 and flat[:, 0].sum() > 0
    for v in range(flat.shape[0]):
        members = flat[v, 1 : 1 + flat[v, 0]].tolist()
        assert members == sorted(members)
        roi = rois[v // 12].tolist()
        assert all(_in_box017(pts[p].tolist(), roi) for p in members)


# ------------------------------------------------------------------ voxel_layer


@pytest.mark.parametrize("device", DEVICES)
def test_hard_and_dynamic_voxelize_write_mmcv_voxelization(device):
    f = ext("voxel.voxel_layer")
    g = torch.Generator().manual_seed(7)
    points = (torch.rand(500, 4, generator=g) * 10 - 1).to(device)
    size, rng = [0.5, 0.5, 0.5], [0, 0, 0, 8, 8, 8]
    voxels = points.new_zeros(100, 5, 4)
    coors = torch.zeros(100, 3, dtype=torch.int32, device=device)
    num = torch.zeros(100, dtype=torch.int32, device=device)
    v = f.hard_voxelize(points, voxels, coors, num, size, rng, 5, 100, 3, True)
    want = voxelization(points, size, rng, 5, 100)
    assert v == want[0].shape[0] == 100
    assert (
        torch.equal(voxels[:v], want[0])
        and torch.equal(coors[:v], want[1])
        and torch.equal(num[:v], want[2])
    )
    few = points.new_zeros(4000, 5, 4)
    c2 = torch.zeros(4000, 3, dtype=torch.int32, device=device)
    n2 = torch.zeros(4000, dtype=torch.int32, device=device)
    v2 = f.hard_voxelize(points, few, c2, n2, size, rng, 5, 4000)
    assert v2 < 4000 and not few[v2:].any() and not c2[v2:].any()
    dyn = torch.zeros(500, 3, dtype=torch.int32, device=device)
    assert f.dynamic_voxelize(points, dyn, size, rng, 3) is None
    assert torch.equal(dyn, voxelization(points, size, rng, -1, -1))
    with pytest.raises(ValueError, match="hard_voxelize: NDim must be 3"):
        f.hard_voxelize(points, voxels, coors, num, size, rng, 5, 100, 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_dynamic_point_to_voxel_forward_backward(device, reduce):
    f = ext("voxel.voxel_layer")
    g = torch.Generator().manual_seed(8)
    feats = torch.randn(200, 3, generator=g).to(device)
    coors = torch.randint(-1, 4, (200, 3), generator=g, dtype=torch.int32).to(device)
    out, out_coors, p2v, count = f.dynamic_point_to_voxel_forward(feats, coors, reduce)
    want, want_coors = dynamic_scatter(feats, coors, reduce)
    assert torch.equal(out, want) and torch.equal(out_coors, want_coors)
    assert p2v.dtype == count.dtype == torch.int32
    kept = (coors >= 0).all(1)
    assert (p2v[~kept] == -1).all()
    assert torch.equal(out_coors[p2v[kept].long()], coors[kept])
    assert torch.equal(count, torch.bincount(p2v[kept].long(), minlength=out.shape[0]).int())
    x = feats.clone().requires_grad_()
    grad_out = torch.randn_like(out)
    (want_grad,) = torch.autograd.grad(dynamic_scatter(x, coors, reduce)[0], x, grad_out)
    grad = torch.zeros_like(feats)
    f.dynamic_point_to_voxel_backward(grad, grad_out, feats, out, p2v, count, reduce)
    torch.testing.assert_close(grad, want_grad)


# ------------------------------------------------------------------ point ops


@pytest.mark.parametrize("device", DEVICES)
def test_ball_query_and_knn_wrappers(device):
    g = torch.Generator().manual_seed(9)
    xyz = torch.rand(2, 40, 3, generator=g).to(device)
    centre = xyz[:, :8].contiguous()
    idx = torch.zeros(2, 8, 5, dtype=torch.int32, device=device)
    assert (
        ext("ball_query.ball_query_ext").ball_query_wrapper(2, 40, 8, 0.0, 0.3, 5, centre, xyz, idx)
        == 1
    )
    assert torch.equal(idx, ball_query(0.0, 0.3, 5, xyz, centre))
    idx = torch.zeros(2, 8, 4, dtype=torch.int32, device=device)
    dist2 = torch.zeros(2, 8, 4, device=device)
    assert ext("knn.knn_ext").knn_wrapper(2, 40, 8, 4, xyz, centre, idx, dist2) is None
    assert torch.equal(idx, knn(4, xyz, centre).transpose(1, 2))
    brute = ((centre[:, :, None] - xyz[:, None]) ** 2).sum(-1).sort(-1).values[..., :4]
    torch.testing.assert_close(dist2, brute)
    with pytest.raises(
        ValueError, match=r"knn_wrapper: size arguments differ from the tensors: n=41"
    ):
        ext("knn.knn_ext").knn_wrapper(2, 41, 8, 4, xyz, centre, idx, dist2)


@pytest.mark.parametrize("device", DEVICES)
def test_three_nn_and_interpolate_wrappers(device):
    f = ext("interpolate.interpolate_ext")
    g = torch.Generator().manual_seed(10)
    unknown, known = (
        torch.rand(2, 9, 3, generator=g).to(device),
        torch.rand(2, 6, 3, generator=g).to(device),
    )
    dist2 = torch.zeros(2, 9, 3, device=device)
    idx = torch.zeros(2, 9, 3, dtype=torch.int32, device=device)
    f.three_nn_wrapper(2, 9, 6, unknown, known, dist2, idx)
    want_d, want_i = three_nn(unknown, known)
    assert torch.equal(idx, want_i)
    torch.testing.assert_close(dist2.sqrt(), want_d)
    feats = torch.randn(2, 4, 6, generator=g).to(device)
    weight = torch.rand(2, 9, 3, generator=g).to(device)
    out = torch.zeros(2, 4, 9, device=device)
    f.three_interpolate_wrapper(2, 4, 6, 9, feats, idx, weight, out)
    x = feats.clone().requires_grad_()
    want = three_interpolate(x, idx, weight)
    torch.testing.assert_close(out, want.detach())
    grad_out = torch.randn_like(out)
    grad = torch.ones(2, 4, 6, device=device)  # the kernel adds into what it is given
    f.three_interpolate_grad_wrapper(2, 4, 9, 6, grad_out, idx, weight, grad)
    torch.testing.assert_close(grad - 1, torch.autograd.grad(want, x, grad_out)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_group_and_gather_points_wrappers(device):
    g = torch.Generator().manual_seed(11)
    feats = torch.randn(2, 3, 10, generator=g).to(device)
    idx = torch.randint(0, 10, (2, 4, 5), generator=g, dtype=torch.int32).to(device)
    gp = ext("group_points.group_points_ext")
    out = torch.empty(2, 3, 4, 5, device=device)
    assert gp.forward(2, 3, 10, 4, 5, feats, idx, out) == 1
    x = feats.clone().requires_grad_()
    want = grouping_operation(x, idx)
    assert torch.equal(out, want.detach())
    grad_out = torch.randn_like(out)
    grad = torch.zeros_like(feats)
    assert gp.backward(2, 3, 10, 4, 5, grad_out, idx, grad) == 1
    torch.testing.assert_close(grad, torch.autograd.grad(want, x, grad_out)[0])
    gt = ext("gather_points.gather_points_ext")
    pick = idx[:, :, 0].contiguous()
    out = torch.empty(2, 3, 4, device=device)
    assert gt.gather_points_wrapper(2, 3, 10, 4, feats, pick, out) == 1
    want = gather_points(x, pick)
    assert torch.equal(out, want.detach())
    grad_out = torch.randn_like(out)
    grad = torch.zeros_like(feats)
    assert gt.gather_points_grad_wrapper(2, 3, 10, 4, grad_out, pick, grad) == 1
    torch.testing.assert_close(grad, torch.autograd.grad(want, x, grad_out)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_furthest_point_sampling_wrappers(device):
    f = ext("furthest_point_sample.furthest_point_sample_ext")
    g = torch.Generator().manual_seed(12)
    points = torch.rand(2, 30, 3, generator=g).to(device)
    temp = torch.full((2, 30), 1e10, device=device)
    idx = torch.zeros(2, 7, dtype=torch.int32, device=device)
    assert f.furthest_point_sampling_wrapper(2, 30, 7, points, temp, idx) == 1
    assert torch.equal(idx, furthest_point_sample(points, 7))
    dist = torch.cdist(points, points)
    idx2 = torch.zeros(2, 7, dtype=torch.int32, device=device)
    assert f.furthest_point_sampling_with_dist_wrapper(2, 30, 7, dist, temp, idx2) == 1
    assert torch.equal(idx2, idx)  # Euclidean distances sample as the points do


@pytest.mark.parametrize("device", DEVICES)
def test_assign_score_withk_wrappers(device):
    f = ext("paconv.assign_score_withk_ext")
    g = torch.Generator().manual_seed(13)
    b, n0, n1, m, k, o = 2, 8, 5, 3, 4, 6
    scores = torch.rand(b, n1, k, m, generator=g).to(device)
    points = torch.randn(b, n0, m, o, generator=g).to(device)
    centers = torch.randn(b, n0, m, o, generator=g).to(device)
    knn_idx = torch.randint(0, n0, (b, n1, k), generator=g).to(device)
    out = torch.zeros(b, o, n1, k, device=device)
    f.assign_score_withk_forward_wrapper(
        b, n0, n1, m, k, o, 0, points, centers, scores, knn_idx, out
    )
    inputs = [t.clone().requires_grad_() for t in (scores, points, centers)]
    want = assign_score_withk(*inputs, knn_idx, "sum")
    torch.testing.assert_close(out, want.detach())
    grad_out = torch.randn_like(out)
    grads = [torch.zeros_like(t) for t in (points, centers, scores)]
    f.assign_score_withk_backward_wrapper(
        b, n0, n1, m, k, o, 0, grad_out, points, centers, scores, knn_idx, *grads
    )
    want_s, want_p, want_c = torch.autograd.grad(want, inputs, grad_out)
    for found, expected in zip(grads, (want_p, want_c, want_s)):
        torch.testing.assert_close(found, expected)
    with pytest.raises(ValueError, match="aggregate must be 0 .sum., 1 .avg. or 2 .max., found 3"):
        f.assign_score_withk_forward_wrapper(
            b, n0, n1, m, k, o, 3, points, centers, scores, knn_idx, out
        )
