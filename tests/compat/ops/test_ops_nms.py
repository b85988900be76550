"""mmpar.compat.ops.nms (nms, batched_nms, nms_match) against plain-loop references.

Ties: mmcv sorts the scores with an unstable sort, so its order among equal
scores is unspecified. mmpar pins it, and these tests assert it: ``nms``,
``nms_match`` and ``batched_nms`` visit equal scores in input order (lower index
first) on every device. soft_nms: ``test_ops_soft_nms.py``; bad input and
non-finite values: ``test_ops_nms_inputs.py``.
"""

from __future__ import annotations

import warnings
from typing import List, Tuple

import numpy as np
import pytest
import torch

from mmpar.compat.ops.backend import UnsupportedOpError
from mmpar.compat.ops.nms import batched_nms, nms, nms_match, soft_nms
from tests.compat.ops._nms_reference import (
    MMCV_BOXES,
    MMCV_SCORES,
    random_boxes,
    ref_nms,
    ref_nms_match,
    ref_soft_nms,
)
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

pytest.importorskip("torchvision")


# ---------------------------------------------------------------- nms


@pytest.mark.parametrize("device", DEVICES)
def test_nms_mmcv_case(device: str) -> None:
    boxes, scores = torch.from_numpy(MMCV_BOXES), torch.from_numpy(MMCV_SCORES)
    dets, inds = nms(boxes.to(device), scores.to(device), iou_threshold=0.3, offset=0)
    assert inds.device.type == device and inds.dtype == torch.long
    assert inds.tolist() == [1, 0, 3]
    expected = [[3, 6, 9, 11, 0.9], [6, 3, 8, 7, 0.6], [1, 4, 13, 7, 0.2]]
    torch.testing.assert_close(dets.cpu(), torch.tensor(expected))


def test_nms_docstring_example_numpy() -> None:
    boxes = np.array(
        [
            [49.1, 32.4, 51.0, 35.9],
            [49.3, 32.9, 51.0, 35.3],
            [49.2, 31.8, 51.0, 35.4],
            [35.1, 11.5, 39.1, 15.7],
            [35.6, 11.8, 39.3, 14.2],
            [35.3, 11.5, 39.9, 14.5],
            [35.2, 11.7, 39.7, 15.7],
        ],
        dtype=np.float32,
    )
    scores = np.array([0.9, 0.9, 0.5, 0.5, 0.5, 0.4, 0.3], dtype=np.float32)
    dets, inds = nms(boxes, scores, 0.6)
    assert isinstance(dets, np.ndarray) and isinstance(inds, np.ndarray)
    assert dets.dtype == np.float32 and inds.dtype == np.int64
    assert len(inds) == len(dets) == 3
    # Ties 0.9/0.9 and 0.5/0.5/0.5: input order decides.
    assert inds.tolist() == ref_nms(boxes.tolist(), scores.tolist(), 0.6) == [0, 3, 4]
    np.testing.assert_array_equal(dets, np.concatenate([boxes[inds], scores[inds, None]], 1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("thr", [0.0, 0.3, 0.7])
def test_nms_matches_reference(device: str, thr: float) -> None:
    boxes, scores = random_boxes(120, seed=int(thr * 10))
    dets, inds = nms(boxes.to(device), scores.to(device), thr)
    assert inds.cpu().tolist() == ref_nms(boxes.tolist(), scores.tolist(), thr)
    torch.testing.assert_close(
        dets.cpu(), torch.cat([boxes[inds.cpu()], scores[inds.cpu(), None]], 1)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_nms_ties_keep_input_order(device: str) -> None:
    # 200 boxes with 3 score values: enough that torch's unstable sort reorders ties.
    boxes, _ = random_boxes(200, seed=1, size=100.0)
    scores = torch.randint(0, 3, (200,), generator=torch.Generator().manual_seed(2)).float()
    unstable = torch.sort(scores, descending=True).indices
    assert not torch.equal(unstable, torch.sort(scores, descending=True, stable=True).indices)
    _, inds = nms(boxes.to(device), scores.to(device), 0.5)
    assert inds.cpu().tolist() == ref_nms(boxes.tolist(), scores.tolist(), 0.5)
    # Identical boxes with the same score: the first one is kept.
    box = [[0.0, 0.0, 4.0, 4.0]] * 3 + [[10.0, 10.0, 12.0, 12.0]]
    _, inds = nms(torch.tensor(box, device=device), torch.tensor([0.5] * 4, device=device), 0.5)
    assert inds.tolist() == [0, 3]


def test_nms_threshold_is_strict() -> None:
    # IoU exactly 0.5: kept at iou_threshold=0.5 (suppressed only above it).
    boxes = torch.tensor([[0.0, 0.0, 4.0, 1.0], [0.0, 0.0, 2.0, 1.0]])
    scores = torch.tensor([0.9, 0.8])
    assert nms(boxes, scores, 0.5)[1].tolist() == [0, 1]
    assert nms(boxes, scores, 0.49)[1].tolist() == [0]


@pytest.mark.parametrize("device", DEVICES)
def test_nms_empty(device: str) -> None:
    dets, inds = nms(torch.zeros(0, 4, device=device), torch.zeros(0, device=device), 0.5)
    assert dets.shape == (0, 5) and inds.shape == (0,) and inds.dtype == torch.long
    assert dets.device.type == inds.device.type == device
    dets, inds = nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), 0.5)
    assert dets.shape == (0, 5) and inds.shape == (0,)
    # Every score filtered out.
    dets, inds = nms(torch.ones(2, 4).cumsum(1), torch.tensor([0.1, 0.2]), 0.5, score_threshold=0.5)
    assert dets.shape == (0, 5) and inds.numel() == 0


def test_nms_score_threshold_and_max_num() -> None:
    boxes, scores = random_boxes(80, seed=3)
    full = ref_nms(boxes.tolist(), scores.tolist(), 0.4)
    assert nms(boxes, scores, 0.4, max_num=5)[1].tolist() == full[:5]
    assert nms(boxes, scores, 0.4, max_num=0)[1].tolist() == full
    valid = [i for i in range(80) if scores[i] > 0.6]  # strictly above
    sub = ref_nms(boxes[valid].tolist(), scores[valid].tolist(), 0.4)
    _, inds = nms(boxes, scores, 0.4, score_threshold=0.6, max_num=4)
    assert inds.tolist() == [valid[k] for k in sub][:4]
    # A score equal to the threshold is filtered out.
    two = torch.tensor([[0.0, 0, 1, 1], [5, 5, 6, 6]])
    assert nms(two, torch.tensor([0.5, 0.7]), 0.5, score_threshold=0.5)[1].tolist() == [1]


def test_nms_numpy_and_float64() -> None:
    boxes, scores = random_boxes(40, seed=4)
    dets64, inds64 = nms(boxes.double().numpy(), scores.double().numpy(), 0.5)
    assert dets64.dtype == np.float64 and inds64.dtype == np.int64
    assert inds64.tolist() == ref_nms(boxes.tolist(), scores.tolist(), 0.5)
    dets, inds = nms(boxes.double(), scores.double(), 0.5)
    assert dets.dtype == torch.float64 and inds.tolist() == inds64.tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_nms_half(device: str, dtype: torch.dtype) -> None:
    boxes, scores = random_boxes(60, seed=5)
    boxes, scores = boxes.to(dtype), scores.to(dtype)
    dets, inds = nms(boxes.to(device), scores.to(device), 0.5)
    assert dets.dtype == dtype
    # Decided in float32 on the rounded inputs.
    ref = ref_nms(boxes.float().tolist(), scores.float().tolist(), 0.5)
    assert inds.cpu().tolist() == ref
    assert torch.equal(dets.cpu(), torch.cat([boxes[ref], scores[ref, None]], 1))


def test_nms_gradients_flow_through_dets() -> None:
    boxes, scores = random_boxes(12, seed=6)
    boxes = boxes.double().requires_grad_()
    scores = scores.double().requires_grad_()
    assert torch.autograd.gradcheck(lambda b, s: nms(b, s, 0.5)[0], (boxes, scores))


def test_nms_deprecated_iou_thr() -> None:
    boxes, scores = torch.from_numpy(MMCV_BOXES), torch.from_numpy(MMCV_SCORES)
    with pytest.warns(DeprecationWarning, match='"iou_thr" is deprecated in `nms`'):
        _, inds = nms(boxes, scores, iou_thr=0.3)
    assert inds.tolist() == [1, 0, 3]
    with pytest.warns(DeprecationWarning, match="soft_nms"):
        soft_nms(boxes, scores, iou_thr=0.3)
    with pytest.raises(TypeError, match="both iou_thr"):
        nms(boxes, scores, iou_thr=0.3, iou_threshold=0.3)


def test_nms_refusals_and_bad_input() -> None:
    boxes, scores = torch.from_numpy(MMCV_BOXES), torch.from_numpy(MMCV_SCORES)
    with pytest.raises(UnsupportedOpError, match=r"mmcv\.ops\.nms: offset=1 .*only offset=0"):
        nms(boxes, scores, 0.3, offset=1)
    with pytest.raises(ValueError, match="offset must be 0 or 1, got 2"):
        nms(boxes, scores, 0.3, offset=2)
    with pytest.raises(ValueError, match=r"boxes must have shape \(N, 4\), got \(4, 5\)"):
        nms(torch.zeros(4, 5), scores, 0.3)
    with pytest.raises(ValueError, match=r"scores must have shape \(N,\) = \(4,\), got \(3,\)"):
        nms(boxes, scores[:3], 0.3)
    with pytest.raises(
        TypeError, match="boxes must be a torch.Tensor or a numpy.ndarray, got list"
    ):
        nms(boxes.tolist(), scores, 0.3)
    with pytest.raises(TypeError, match="scores must be floating point, got torch.int64"):
        nms(boxes, torch.arange(4), 0.3)


# ---------------------------------------------------------------- batched_nms


def ref_batched_nms(
    boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, thr: float
) -> List[int]:
    """NMS per class, merged by score; equal scores in input order."""
    keep: List[int] = []
    for cls in sorted(set(idxs.tolist())):
        members = [i for i in range(len(idxs)) if idxs[i] == cls]
        kept = ref_nms(boxes[members].tolist(), scores[members].tolist(), thr)
        keep += [members[k] for k in kept]
    return sorted(keep, key=lambda i: (-scores[i].item(), i))


def class_boxes(n: int, seed: int, classes: int = 4) -> Tuple[torch.Tensor, ...]:
    boxes, scores = random_boxes(n, seed)
    idxs = torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(seed))
    return boxes, scores, idxs


@pytest.mark.parametrize("device", DEVICES)
def test_batched_nms_offset_trick_and_class_loop_agree(device: str) -> None:
    boxes, scores, idxs = class_boxes(100, seed=10)
    scores[::7] = 0.5  # ties across and within classes
    ref = ref_batched_nms(boxes, scores, idxs, 0.5)
    on = [t.to(device) for t in (boxes, scores, idxs)]
    dets, keep = batched_nms(*on, dict(iou_threshold=0.5))
    seq_dets, seq_keep = batched_nms(*on, dict(iou_threshold=0.5, split_thr=10))
    assert keep.tolist() == seq_keep.tolist() == ref
    assert torch.equal(dets, seq_dets)
    torch.testing.assert_close(dets.cpu(), torch.cat([boxes[ref], scores[ref, None]], 1))


def test_batched_nms_split_thr_boundary() -> None:
    # mmcv splits from split_thr boxes on (N < split_thr: one NMS): both agree.
    boxes, scores, idxs = class_boxes(30, seed=11)
    cfg = dict(type="nms", iou_threshold=0.4, split_thr=30)
    assert batched_nms(boxes, scores, idxs, cfg)[1].tolist() == ref_batched_nms(
        boxes, scores, idxs, 0.4
    )
    assert cfg == dict(type="nms", iou_threshold=0.4, split_thr=30)  # not consumed


@pytest.mark.parametrize("split_thr", [10000, 10])
def test_batched_nms_max_num_and_score_threshold(split_thr: int) -> None:
    boxes, scores, idxs = class_boxes(100, seed=12)
    cfg = dict(iou_threshold=0.5, max_num=7, score_threshold=0.3, split_thr=split_thr)
    dets, keep = batched_nms(boxes, scores, idxs, cfg)
    valid = torch.nonzero(scores > 0.3).view(-1)
    ref = ref_batched_nms(boxes[valid], scores[valid], idxs[valid], 0.5)
    assert keep.tolist() == valid[ref].tolist()[:7]
    assert dets.shape == (7, 5)


def test_batched_nms_class_agnostic() -> None:
    boxes, scores, idxs = class_boxes(80, seed=13)
    ref = ref_nms(boxes.tolist(), scores.tolist(), 0.5)
    cfg = dict(iou_threshold=0.5)
    assert batched_nms(boxes, scores, idxs, cfg, class_agnostic=True)[1].tolist() == ref
    # nms_cfg's class_agnostic overrides the argument, both ways.
    agnostic = dict(cfg, class_agnostic=True)
    assert batched_nms(boxes, scores, idxs, agnostic)[1].tolist() == ref
    per_class = dict(cfg, class_agnostic=False)
    got = batched_nms(boxes, scores, idxs, per_class, class_agnostic=True)[1].tolist()
    assert got == ref_batched_nms(boxes, scores, idxs, 0.5) != ref


def test_batched_nms_split_branch_is_per_class_even_when_class_agnostic() -> None:
    # mmcv's split_thr branch groups by idxs whatever class_agnostic says; so does mmpar.
    boxes, scores, idxs = class_boxes(80, seed=13)
    cfg = dict(iou_threshold=0.5, split_thr=10, class_agnostic=True)
    assert batched_nms(boxes, scores, idxs, cfg)[1].tolist() == ref_batched_nms(
        boxes, scores, idxs, 0.5
    )
    one_class = torch.zeros_like(idxs)
    ref = ref_nms(boxes.tolist(), scores.tolist(), 0.5)
    assert batched_nms(boxes, scores, one_class, cfg)[1].tolist() == ref


def test_batched_nms_soft_nms_both_paths() -> None:
    boxes, scores, idxs = class_boxes(60, seed=14)
    cfg = dict(type="soft_nms", iou_threshold=0.3, min_score=0.05)
    dets, keep = batched_nms(boxes, scores, idxs, cfg)
    seq_dets, seq_keep = batched_nms(boxes, scores, idxs, dict(cfg, split_thr=5))
    assert torch.equal(keep, seq_keep)
    torch.testing.assert_close(dets, seq_dets)
    assert torch.equal(dets[:, :4], boxes[keep])
    assert (dets[:, 4] <= scores[keep]).all() and (dets[:, 4][1:] <= dets[:, 4][:-1]).all()
    # The lowered scores are soft-NMS's, class by class.
    for cls in idxs.unique():
        members = torch.nonzero(idxs == cls).view(-1)
        ref_inds, ref_scores = ref_soft_nms(
            boxes[members].numpy(), scores[members].numpy(), 0.3, 0.5, 0.05, "linear"
        )
        in_cls = torch.isin(keep, members)
        assert sorted(keep[in_cls].tolist()) == sorted(members[ref_inds].tolist())
        got = dict(zip(keep[in_cls].tolist(), dets[in_cls, 4].tolist()))
        for k, s in zip(members[ref_inds].tolist(), ref_scores):
            assert got[k] == pytest.approx(s, rel=1e-5)


def test_batched_nms_none_cfg_sorts_all() -> None:
    boxes, scores, idxs = class_boxes(20, seed=15)
    dets, inds = batched_nms(boxes, scores, idxs, None)
    assert inds.tolist() == sorted(range(20), key=lambda i: -scores[i].item())
    assert torch.equal(dets, torch.cat([boxes[inds], scores[inds, None]], 1))
    rotated = torch.rand(5, 5)  # rotated boxes are fine when nothing is suppressed
    assert batched_nms(rotated, scores[:5], idxs[:5], None)[0].shape == (5, 6)


@pytest.mark.parametrize("device", DEVICES)
def test_batched_nms_empty(device: str) -> None:
    empty = torch.zeros(0, 4, device=device)
    for cfg in (dict(iou_threshold=0.5), dict(iou_threshold=0.5, split_thr=0)):
        dets, keep = batched_nms(
            empty,
            torch.zeros(0, device=device),
            torch.zeros(0, dtype=torch.long, device=device),
            cfg,
        )
        assert dets.shape == (0, 5) and keep.shape == (0,) and keep.dtype == torch.long


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_batched_nms_half_many_classes(dtype: torch.dtype) -> None:
    # 80 classes of boxes up to ~1000: the class offsets pass float16's 65504.
    boxes, scores, _ = class_boxes(100, seed=16)
    boxes = boxes * 20
    idxs = torch.arange(100) % 80
    b, s = boxes.to(dtype), scores.to(dtype)
    dets, keep = batched_nms(b, s, idxs, dict(iou_threshold=0.5))
    assert dets.dtype == dtype and dets.isfinite().all()
    assert keep.tolist() == ref_batched_nms(b.float(), s.float(), idxs, 0.5)


def test_batched_nms_gradients() -> None:
    boxes, scores, idxs = class_boxes(20, seed=17)
    boxes = boxes.double().requires_grad_()
    scores = scores.double().requires_grad_()
    for split_thr in (10000, 5):
        assert torch.autograd.gradcheck(
            lambda b, s: batched_nms(b, s, idxs, dict(iou_threshold=0.5, split_thr=split_thr))[0],
            (boxes, scores),
        )


def test_batched_nms_deprecated_key_and_refusals() -> None:
    boxes, scores, idxs = class_boxes(20, seed=18)
    with pytest.warns(DeprecationWarning, match="iou_thr"):
        _, keep = batched_nms(boxes, scores, idxs, dict(type="nms", iou_thr=0.5))
    assert keep.tolist() == ref_batched_nms(boxes, scores, idxs, 0.5)
    with pytest.raises(ValueError, match=r"shape \(N, 8\) for nms_cfg type 'nms_quadri'"):
        batched_nms(boxes, scores, idxs, dict(type="nms_quadri", iou_threshold=0.5))
    with pytest.raises(ValueError, match=r"shape \(N, 4\) for this nms_cfg type, got \(4, 5\)"):
        batched_nms(torch.rand(4, 5), scores[:4], idxs[:4], dict(iou_threshold=0.5))
    with pytest.raises(ValueError, match="'nms_rotated' or 'nms_quadri', got 'hard_nms'"):
        batched_nms(boxes, scores, idxs, dict(type="hard_nms", iou_threshold=0.5))
    with pytest.raises(ValueError, match=r"idxs must have shape \(N,\) = \(20,\), got \(19,\)"):
        batched_nms(boxes, scores, idxs[:19], dict(iou_threshold=0.5))
    with pytest.raises(TypeError, match="batched_nms: boxes must be a torch.Tensor, got ndarray"):
        batched_nms(boxes.numpy(), scores, idxs, dict(iou_threshold=0.5))


def test_batched_nms_mmcv_config_dict() -> None:
    mmcv = pytest.importorskip("mmcv")
    boxes, scores, idxs = class_boxes(30, seed=19)
    cfg = mmcv.ConfigDict(type="nms", iou_threshold=0.5, split_thr=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, keep = batched_nms(boxes, scores, idxs, cfg)
    assert keep.tolist() == ref_batched_nms(boxes, scores, idxs, 0.5)
    assert cfg.split_thr == 8


# ---------------------------------------------------------------- nms_match


def test_nms_match_mmcv_case() -> None:
    dets = np.array(
        [
            [49.1, 32.4, 51.0, 35.9, 0.9],
            [49.3, 32.9, 51.0, 35.3, 0.9],
            [35.3, 11.5, 39.9, 14.5, 0.4],
            [35.2, 11.7, 39.7, 15.7, 0.3],
        ],
        dtype=np.float32,
    )
    groups = nms_match(dets, 0.6)
    assert all(isinstance(g, np.ndarray) and g.dtype == int for g in groups)
    assert [g.tolist() for g in groups] == [[0, 1], [2, 3]]
    keep = nms(dets[:, :4], dets[:, 4], 0.6)[1]
    assert [g[0] for g in groups] == keep.tolist()
    tensor_groups = nms_match(torch.from_numpy(dets), 0.6)
    assert all(g.dtype == torch.long for g in tensor_groups)
    assert [g.tolist() for g in tensor_groups] == [[0, 1], [2, 3]]


@pytest.mark.parametrize("thr", [0.0, 0.3, 0.6])
def test_nms_match_matches_reference(thr: float) -> None:
    boxes, scores = random_boxes(80, seed=20)
    scores[::5] = 0.5  # ties
    dets = torch.cat([boxes, scores[:, None]], 1)
    groups = nms_match(dets, thr)
    assert [g.tolist() for g in groups] == ref_nms_match(dets.tolist(), thr)
    assert sorted(i for g in groups for i in g.tolist()) == list(range(80))


def test_nms_match_threshold_is_inclusive() -> None:
    # IoU exactly 0.5 joins the group at 0.5 (nms keeps such a box).
    dets = torch.tensor([[0.0, 0, 4, 1, 0.9], [0, 0, 2, 1, 0.8]])
    assert [g.tolist() for g in nms_match(dets, 0.5)] == [[0, 1]]
    assert [g.tolist() for g in nms_match(dets, 0.51)] == [[0], [1]]


@pytest.mark.parametrize("device", DEVICES)
def test_nms_match_devices_and_empty(device: str) -> None:
    dets = torch.cat(random_boxes(30, seed=21)[0:1] + (torch.rand(30, 1),), 1)
    groups = nms_match(dets.to(device).requires_grad_(), 0.4)
    assert all(g.device.type == device for g in groups)
    assert [g.tolist() for g in groups] == ref_nms_match(dets.tolist(), 0.4)
    assert nms_match(np.array([]), 0.5) == []
    assert nms_match(torch.zeros(0, 5, device=device), 0.5) == []


def test_nms_match_bad_input() -> None:
    with pytest.raises(ValueError, match=r"dets must have shape \(N, 5\), got \(2, 3\)"):
        nms_match(np.zeros((2, 3)), 0.5)
    with pytest.raises(TypeError, match="got list"):
        nms_match([[0, 0, 1, 1, 0.5]], 0.5)


# ---------------------------------------------------------------- mmcv's signatures


def mmcv_signatures(module: str) -> dict:
    """``{function: [(parameter, default or None)]}`` of mmcv's ``mmcv/ops/<module>.py``."""
    import ast
    from pathlib import Path

    mmcv = pytest.importorskip("mmcv")
    tree = ast.parse((Path(mmcv.__file__).parent / "ops" / f"{module}.py").read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            args = node.args.args
            defaults = [None] * (len(args) - len(node.args.defaults)) + [
                ast.literal_eval(d) for d in node.args.defaults
            ]
            found[node.name] = [(a.arg, d) for a, d in zip(args, defaults)]
    return found


def test_signatures_match_mmcv() -> None:
    import inspect
    import sys

    ours = sys.modules["mmpar.compat.ops.nms"]  # the package's ``nms`` is the function

    theirs = mmcv_signatures("nms")
    assert set(theirs) == set(ours.__all__)
    for name in ours.__all__:
        params = inspect.signature(getattr(ours, name)).parameters.values()
        got = [(p.name, None if p.default is p.empty else p.default) for p in params]
        assert got == theirs[name], name


def test_nms_match_zero_dim_dets() -> None:
    with pytest.raises(AssertionError, match=r"nms_match: dets must have shape \(N, 5\), got \(\)"):
        nms_match(torch.tensor(1.0), 0.5)
