"""mmcv 1.7.2's own wrapper modules (the installed files) on mmpar's ``mmcv._ext``.

Run by tests/compat/test_mmcv_ext.py in a fresh interpreter after ``patch_mmcv()``:
each wrapper's autograd function calls the raw entry points exactly as research code
that vendors a copy of it does. Results and gradients are compared with mmpar's ops;
the names of those that differ are printed as ``mismatches: [...]``.
"""

import importlib.util
import os
import sys

import mmcv
import mmcv.ops as ours
import torch
from mmcv.cnn import CONV_LAYERS, UPSAMPLE_LAYERS

# The wrappers register layers (DCN, CARAFE) that mmpar's ops registered already.
for registry in (CONV_LAYERS, UPSAMPLE_LAYERS):
    registry._register_module = (
        lambda register: (
            lambda module, module_name=None, force=False: register(module, module_name, True)
        )
    )(registry._register_module)
root = os.path.join(os.path.dirname(mmcv.__file__), "ops")


def wrapper(name):
    spec = importlib.util.spec_from_file_location(
        "mmcv.ops." + name, os.path.join(root, name + ".py")
    )
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "mmcv.ops"
    spec.loader.exec_module(module)
    return module


bad = []


def same(what, got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    if not all(torch.allclose(a, b, atol=1e-6) and a.dtype == b.dtype for a, b in zip(got, want)):
        bad.append(what)


def grads(out, inputs):
    """Gradients of ``out`` for a fixed, non-uniform output gradient."""
    return torch.autograd.grad(out, inputs, torch.linspace(-1, 1, out.numel()).view(out.shape))


g = torch.Generator().manual_seed(0)
pts = torch.rand(300, 4, generator=g) * 10
v = wrapper("voxelize")
for mp, mv in ((5, 50), (-1, -1)):
    same(
        "voxelize",
        v.voxelization(pts, [1.0, 1.0, 2.0], [0, 0, 0, 10, 10, 10], mp, mv),
        ours.voxelization(pts, [1.0, 1.0, 2.0], [0, 0, 0, 10, 10, 10], mp, mv),
    )
s = wrapper("scatter_points")
feats = torch.randn(200, 3, generator=g, requires_grad=True)
coors = torch.randint(-1, 4, (200, 3), generator=g).int()
for r in ("sum", "mean", "max"):
    a, b = s.dynamic_scatter(feats, coors, r), ours.dynamic_scatter(feats, coors, r)
    same("scatter " + r, a, b)
    same("scatter grad " + r, grads(a[0], feats), grads(b[0], feats))
i = wrapper("iou3d")
boxes = torch.rand(30, 7, generator=g) * torch.tensor([10, 10, 2, 3, 3, 2, 3.0]) + torch.tensor(
    [0, 0, 0, 0.5, 0.5, 0.5, 0]
)
scores = torch.rand(30, generator=g)
same("boxes_iou3d", i.boxes_iou3d(boxes, boxes[:5]), ours.boxes_iou3d(boxes, boxes[:5]))
same("nms3d", i.nms3d(boxes, scores, 0.1), ours.nms3d(boxes, scores, 0.1))
same("nms3d_normal", i.nms3d_normal(boxes, scores, 0.1), ours.nms3d_normal(boxes, scores, 0.1))
cloud = torch.rand(2, 100, 3, generator=g) * torch.tensor([10, 10, 2.0])
same(
    "points_in_boxes_cpu",
    wrapper("points_in_boxes").points_in_boxes_cpu(cloud, boxes[None, :8].repeat(2, 1, 1)),
    ours.points_in_boxes_cpu(cloud, boxes[None, :8].repeat(2, 1, 1)),
)
ra = wrapper("roiaware_pool3d")
pf = torch.randn(100, 4, generator=g, requires_grad=True)
for mode in ("max", "avg"):
    a, b = (
        ra.RoIAwarePool3d(3, 8, mode)(boxes[:6], cloud[0], pf),
        ours.RoIAwarePool3d(3, 8, mode)(boxes[:6], cloud[0], pf),
    )
    same("roiaware " + mode, a, b)
    same("roiaware grad " + mode, grads(a, pf), grads(b, pf))
rp = wrapper("roipoint_pool3d")
same(
    "roipoint",
    rp.RoIPointPool3d(16)(cloud, cloud, boxes[None, :4].repeat(2, 1, 1)),
    ours.RoIPointPool3d(16)(cloud, cloud, boxes[None, :4].repeat(2, 1, 1)),
)
centers = cloud[:, :20].contiguous()
same(
    "ball_query",
    wrapper("ball_query").ball_query(0, 2, 8, cloud, centers),
    ours.ball_query(0, 2, 8, cloud, centers),
)
same("three_nn", wrapper("three_nn").three_nn(centers, cloud), ours.three_nn(centers, cloud))
f = torch.randn(2, 6, 100, generator=g, requires_grad=True)
idx3 = ours.three_nn(centers, cloud)[1]
w3 = torch.rand(2, 20, 3, generator=g)
idx = torch.randint(0, 100, (2, 20, 8), generator=g).int()
idx2 = torch.randint(0, 100, (2, 20), generator=g).int()
for name, fn, args in (
    ("three_interpolate", "three_interpolate", (idx3, w3)),
    ("group_points", "grouping_operation", (idx,)),
    ("gather_points", "gather_points", (idx2,)),
):
    a, b = getattr(wrapper(name), fn)(f, *args), getattr(ours, fn)(f, *args)
    same(name, a, b)
    same(name + " grad", grads(a, f), grads(b, f))
sc = torch.rand(2, 20, 4, 3, generator=g, requires_grad=True)
pfe = torch.randn(2, 100, 3, 5, generator=g, requires_grad=True)
cfe = torch.randn(2, 100, 3, 5, generator=g, requires_grad=True)
kidx = torch.randint(0, 100, (2, 20, 4), generator=g)
asw = wrapper("assign_score_withk")
for agg in ("sum", "avg", "max"):
    a, b = (
        asw.assign_score_withk(sc, pfe, cfe, kidx, agg),
        ours.assign_score_withk(sc, pfe, cfe, kidx, agg),
    )
    same("assign " + agg, a, b)
    same("assign grad " + agg, grads(a, (sc, pfe, cfe)), grads(b, (sc, pfe, cfe)))
mdc = wrapper("modulated_deform_conv")
sys.modules["mmcv.ops.modulated_deform_conv"] = mdc  # mmcv's deform_conv imports it
dc = wrapper("deform_conv")
x = torch.randn(2, 4, 7, 7, generator=g, requires_grad=True)
off = torch.randn(2, 36, 4, 4, generator=g, requires_grad=True)
mask = torch.rand(2, 18, 4, 4, generator=g, requires_grad=True)
w = torch.randn(6, 2, 3, 3, generator=g, requires_grad=True)
bias = torch.randn(6, generator=g, requires_grad=True)
a, b = dc.deform_conv2d(x, off, w, 2, 1, 1, 2, 2), ours.deform_conv2d(x, off, w, 2, 1, 1, 2, 2)
same("deform_conv", a, b)
same("deform_conv grad", grads(a, (x, off, w)), grads(b, (x, off, w)))
a = mdc.modulated_deform_conv2d(x, off, mask, w, bias, 2, 1, 1, 2, 2)
b = ours.modulated_deform_conv2d(x, off, mask, w, bias, 2, 1, 1, 2, 2)
same("modulated_deform_conv", a, b)
same(
    "modulated_deform_conv grad",
    grads(a, (x, off, mask, w, bias)),
    grads(b, (x, off, mask, w, bias)),
)
fm = torch.randn(2, 3, 16, 16, generator=g, requires_grad=True)
rois = torch.tensor([[0, 1.0, 1, 9, 9], [1, 2, 3, 14, 12]])
a, b = (
    wrapper("roi_align").roi_align(fm, rois, (3, 4), 0.5, 2),
    ours.roi_align(fm, rois, (3, 4), 0.5, 2),
)
same("roi_align", a, b)
same("roi_align grad", grads(a, fm), grads(b, fm))
n = wrapper("nms")
bx = torch.rand(20, 4, generator=g) * 10
bx[:, 2:] += bx[:, :2] + 1
sc2 = torch.rand(20, generator=g)
same("nms", n.nms(bx, sc2, 0.3), ours.nms(bx, sc2, 0.3))
same(
    "soft_nms",
    n.soft_nms(bx, sc2, 0.3, 0.5, 0.01, "gaussian"),
    ours.soft_nms(bx, sc2, 0.3, 0.5, 0.01, "gaussian"),
)
dets = torch.cat((bx, sc2[:, None]), 1)
same("nms_match", n.nms_match(dets, 0.3), ours.nms_match(dets, 0.3))
rb = torch.cat((bx[:, :2], bx[:, 2:] - bx[:, :2], torch.rand(20, 1, generator=g)), 1)
same("nms_rotated", n.nms_rotated(rb, sc2, 0.2), ours.nms_rotated(rb, sc2, 0.2))
quads = bx[:, [0, 1, 2, 1, 2, 3, 0, 3]]
same("nms_quadri", n.nms_quadri(quads, sc2, 0.2), ours.nms_quadri(quads, sc2, 0.2))
same("bbox_overlaps", wrapper("bbox").bbox_overlaps(bx, bx[:5]), ours.bbox_overlaps(bx, bx[:5]))
same(
    "box_iou_rotated",
    wrapper("box_iou_rotated").box_iou_rotated(rb, rb[:5]),
    ours.box_iou_rotated(rb, rb[:5]),
)
same(
    "box_iou_quadri",
    wrapper("box_iou_quadri").box_iou_quadri(quads, quads[:5]),
    ours.box_iou_quadri(quads, quads[:5]),
)
up = wrapper("carafe")
feats = torch.randn(2, 4, 5, 6, generator=g, requires_grad=True)
masks = torch.rand(2, 18, 10, 12, generator=g, requires_grad=True)
for fn in ("carafe", "carafe_naive"):
    a, b = getattr(up, fn)(feats, masks, 3, 2, 2), ours.carafe(feats, masks, 3, 2, 2)
    same(fn, a, b)  # mmcv's CARAFE backward asserts CUDA tensors
fl = wrapper("focal_loss")
logits = torch.randn(6, 4, generator=g, requires_grad=True)
labels = torch.tensor([0, 3, 1, 4, 2, 1])
a, b = (
    fl.sigmoid_focal_loss(logits, labels, 2.0, 0.25),
    ours.sigmoid_focal_loss(logits, labels, 2.0, 0.25),
)
same("sigmoid_focal_loss", a, b)
same("sigmoid_focal_loss grad", grads(a, logits), grads(b, logits))
a, b = (
    fl.softmax_focal_loss(logits, labels[:, None].clamp(max=3)[:, 0], 2.0, 0.25),
    ours.softmax_focal_loss(logits, labels.clamp(max=3), 2.0, 0.25),
)
same("softmax_focal_loss", a, b)
same("softmax_focal_loss grad", grads(a, logits), grads(b, logits))
print("mismatches:", bad)
