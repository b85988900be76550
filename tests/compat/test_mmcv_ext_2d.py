"""mmcv-full 1.7.2's 2D entry points of ``mmcv._ext`` (deformable convolution, RoI Align,
NMS and box overlaps, CARAFE, focal losses) against mmpar's ops: forward, and backward
written or added in place into the caller's tensors as the kernels write them.
"""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.mmcv_ext import (
    boxes2d,
    conv,
    losses,
    roi,
    upsample,
)
from mmpar.compat.ops.backend import UnsupportedOpError
from mmpar.compat.ops.bbox import bbox_overlaps
from mmpar.compat.ops.box_iou_quadri import box_iou_quadri
from mmpar.compat.ops.carafe import carafe
from mmpar.compat.ops.deform_conv import deform_conv2d
from mmpar.compat.ops.focal_loss import sigmoid_focal_loss, softmax_focal_loss
from mmpar.compat.ops.modulated_deform_conv import modulated_deform_conv2d
from mmpar.compat.ops.nms import nms_match, nms_quadri, nms_rotated, soft_nms
from mmpar.compat.ops.roi_align import roi_align
from tests.compat._mmcv_env import requires_torchvision
from tests.compat.ops._reference import DEVICES

pytestmark = [requires_torchvision]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _features(device: str, seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed), dtype=torch.float64).to(device)


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
