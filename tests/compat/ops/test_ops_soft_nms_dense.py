"""soft_nms's rounds on dense clusters, against the kernel step by step; their parts.

The rounds (:mod:`mmpar.compat.ops.suppression.soft_nms_rounds`) take, in one round, every box
above the boxes it overlaps and the unready boxes overlapping those, and weight a
box overlapped by several of them in the order of their scores (layers); equal
scores meeting at one box fall back to the stricter two-overlap rule. The pairs
come from :class:`~mmpar.compat.ops.suppression.soft_nms_pairs.PairStore`, found box by box
and cut into epochs by a guess of their count (:func:`crowding`). Each result is
compared, to the bit, with :func:`soft_nms_steps` (itself checked against a
literal replay of mmcv's kernel in ``test_ops_soft_nms.py``).
"""

from __future__ import annotations

from typing import Tuple

import pytest
import torch

from mmpar.compat.ops.suppression import box_pairs, soft_nms_level, soft_nms_rounds
from mmpar.compat.ops.suppression.soft_nms_kernel import (
    SoftNMSParams,
    box_areas,
    pair_iou,
    soft_nms_steps,
)
from mmpar.compat.ops.suppression.soft_nms_pairs import PairStore, crowding
from tests.compat.ops._nms_reference import ref_soft_nms

pytest.importorskip("torchvision")


def clusters(n: int, seed: int, objects: int = 4) -> Tuple[torch.Tensor, torch.Tensor]:
    """``n`` boxes: 80% jittered copies of a few large objects, 20% anywhere."""
    g = torch.Generator().manual_seed(seed)
    extent = torch.rand(objects, 2, generator=g) * 60 + 30
    centre = torch.rand(objects, 2, generator=g) * 300
    near = int(n * 0.8)
    pick = torch.randint(0, objects, (near,), generator=g)
    ctr = centre[pick] + torch.randn(near, 2, generator=g) * extent[pick] * 0.15
    wh = extent[pick] * torch.exp(torch.randn(near, 2, generator=g) * 0.15)
    ctr = torch.cat([ctr, torch.rand(n - near, 2, generator=g) * 300])
    wh = torch.cat([wh, torch.rand(n - near, 2, generator=g) * 40 + 5])
    return torch.cat([ctr - wh / 2, ctr + wh / 2], 1), torch.rand(n, generator=g)


def assert_kernel(boxes: torch.Tensor, scores: torch.Tensor, params: SoftNMSParams) -> None:
    inds, kept = soft_nms_rounds.soft_nms_keep(boxes, scores, params)
    want_inds, want_kept = soft_nms_steps(boxes, scores, params)
    assert torch.equal(inds, want_inds)
    assert torch.equal(kept.nan_to_num(-7.0), want_kept.nan_to_num(-7.0))


@pytest.mark.parametrize(
    "method, thr, min_score",
    [("linear", 0.3, 1e-3), ("gaussian", 0.3, 1e-3), ("naive", 0.5, 0.0), ("linear", 0.5, 0.2)],
)
@pytest.mark.parametrize("small_epochs", [False, True])
@pytest.mark.parametrize("sweep", [True, False])  # the index of a few boxes, or of many
def test_dense_clusters_are_the_kernel(
    method: str, thr: float, min_score: float, small_epochs: bool, sweep: bool, monkeypatch
) -> None:  # noqa: ANN001
    if not sweep:
        monkeypatch.setattr(box_pairs, "_SWEEP", 0)
    if small_epochs:  # many epochs, cut by the guessed pairs
        monkeypatch.setattr(soft_nms_rounds, "_EPOCH_PAIRS", 300)
        monkeypatch.setattr(soft_nms_rounds, "_EPOCH_MIN", 4)
    for seed in range(1 if small_epochs else 2):
        boxes, scores = clusters(300, seed)
        assert_kernel(boxes, scores, SoftNMSParams(thr, 0.5, min_score, method, seed))


def test_dense_clusters_with_ties_nan_and_float64() -> None:
    boxes, scores = clusters(300, 5)
    scores = (scores * 8).floor() / 8  # many equal scores in each cluster
    scores[7] = float("nan")
    boxes[11, 2] = float("nan")
    boxes[12] = boxes[13]  # a duplicate box
    for method in ("linear", "gaussian", "naive"):
        params = SoftNMSParams(0.3, 0.5, 1e-3, method, 0)
        assert_kernel(boxes, scores, params)
        assert_kernel(boxes.double(), scores.double(), params)
    inds, kept = soft_nms_rounds.soft_nms_keep(
        boxes, scores, SoftNMSParams(0.3, 0.5, 1e-3, "gaussian", 0)
    )
    ref_inds, ref_kept = ref_soft_nms(boxes.numpy(), scores.numpy(), 0.3, 0.5, 1e-3, "gaussian")
    assert inds.tolist() == ref_inds


def test_equal_scores_meeting_at_one_box_fall_back_to_two_overlaps(monkeypatch) -> None:  # noqa: ANN001
    # Boxes 1 and 2 (equal scores, disjoint) both overlap box 3: their weights on it
    # come in the kernel's slot order. Box 0, far away, is step 0; the rest pad to > 32.
    boxes = [[0.0, 0, 10, 10], [100, 0, 110, 10], [106, 0, 116, 10], [103, 0, 113, 10]]
    boxes += [[200.0 + 20 * k, 200, 210 + 20 * k, 210] for k in range(40)]
    scores = torch.tensor([0.99, 0.8, 0.8, 0.7] + [0.5 - k / 100 for k in range(40)])
    boxes = torch.tensor(boxes)
    calls = []
    two_hops = soft_nms_rounds._Rounds.ready_two_hops

    def counted(self, *args):  # noqa: ANN001, ANN202
        calls.append(1)
        return two_hops(self, *args)

    monkeypatch.setattr(soft_nms_rounds._Rounds, "ready_two_hops", counted)
    for method in ("linear", "gaussian"):
        params = SoftNMSParams(0.1, 0.5, 1e-3, method, 0)
        assert_kernel(boxes, scores, params)
        ref = ref_soft_nms(boxes.numpy(), scores.numpy(), 0.1, 0.5, 1e-3, method)
        assert soft_nms_rounds.soft_nms_keep(boxes, scores, params)[0].tolist() == ref[0]
    assert calls


def test_layers_weight_one_box_in_the_order_of_the_scores() -> None:
    # Boxes 1, 2, 3 (disjoint) all overlap box 4 and are all taken in one round:
    # box 4 gets their three weights, in the order 0.9, 0.8, 0.7.
    boxes = [[0.0, 0, 10, 10], [100, 0, 110, 10], [106, 0, 116, 10], [112, 0, 122, 10]]
    boxes += [[104, 0, 118, 10]]
    boxes += [[200.0 + 20 * k, 200, 210 + 20 * k, 210] for k in range(40)]
    scores = torch.tensor([0.99, 0.9, 0.8, 0.7, 0.6] + [0.5 - k / 100 for k in range(40)])
    boxes = torch.tensor(boxes)
    for method in ("linear", "gaussian"):
        for min_score in (1e-3, 0.4):  # box 4 dropped after its first weight, or not
            assert_kernel(boxes, scores, SoftNMSParams(0.1, 0.5, min_score, method, 0))


CASES = [("linear", 0.3, 0), ("gaussian", 0.3, 0), ("naive", 0.6, 0), ("linear", 0.05, 1)]
CASES += [("linear", 0.9, 0), ("naive", 0.5, 1)]


@pytest.mark.parametrize("method, thr, offset", CASES)
def test_pair_store_finds_every_pair_from_the_top_to_undecided_boxes(
    method: str, thr: float, offset: int
) -> None:
    boxes, _ = clusters(120, 3)
    if thr >= 0.5:  # near copies: pairs at high thresholds
        boxes[60:] = boxes[:60] + torch.randn(60, 4, generator=torch.Generator().manual_seed(1))
    boxes[::7, 2] += 40  # long thin boxes too
    params = SoftNMSParams(thr, 0.5, 1e-3, method, offset)
    areas = box_areas(boxes, offset)
    store = PairStore(boxes, areas, params)
    ovr = pair_iou(boxes[:, None], areas[:, None], boxes[None], areas[None], offset)
    near = (ovr > 0) if method == "gaussian" else (ovr > 0) & (ovr >= thr)
    near.fill_diagonal_(False)
    g = torch.Generator().manual_seed(0)
    und = torch.ones(120, dtype=torch.bool)
    # A box's pairs are found once, to the boxes undecided then (decided ones stay so).
    found_with = torch.zeros(120, 120, dtype=torch.bool)
    for _ in range(4):  # growing store, boxes decided between calls
        top = und & (torch.rand(120, generator=g) < 0.3)
        new = top & ~found_with.any(1)
        found_with[new] = und
        src, dst, w = store.of(top, und)
        got = sorted(zip(src.tolist(), dst.tolist()))
        want = [(i, j) for i in range(120) for j in range(120) if top[i] and und[j] and near[i, j]]
        assert got == want
        assert torch.equal(w, params.weights(ovr[src, dst]))
        est = store.degrees(torch.nonzero(top).squeeze(1))
        assert torch.equal(est, (near & found_with)[top].sum(1).double())  # exact once found
        und &= torch.rand(120, generator=g) < 0.8


@pytest.mark.parametrize("thr", [0.1, 0.3, 0.5, 0.8])
def test_pair_store_bound_keeps_every_pair_of_any_shape(thr: float) -> None:
    # The index looks only where boxes shrunk by (1 - t) / (1 + t) meet: a bound on IoU >= t.
    g = torch.Generator().manual_seed(int(thr * 10))
    n = 300
    xy = torch.rand(n, 2, generator=g) * 60
    wh = torch.exp(torch.rand(n, 2, generator=g) * 4) + 1  # 2-56 px, any aspect
    boxes = torch.cat([xy, xy + wh], 1)
    boxes[n // 2 :] = boxes[: n // 2] + torch.randn(n // 2, 4, generator=g)  # near pairs
    areas = box_areas(boxes, 0)
    params = SoftNMSParams(thr, 0.5, 1e-3, "linear", 0)
    store = PairStore(boxes, areas, params)
    ovr = pair_iou(boxes[:, None], areas[:, None], boxes[None], areas[None], 0)
    near = (ovr > 0) & (ovr >= thr)
    near.fill_diagonal_(False)
    all_ = torch.ones(n, dtype=torch.bool)
    src, dst, _ = store.of(all_, all_)
    got = torch.zeros(n, n, dtype=torch.bool)
    got[src, dst] = True
    assert torch.equal(got, near) and src.numel() == int(near.sum())


def test_crowding_counts_the_centres_near_each_box() -> None:
    cx = torch.tensor([10.0, 11, 12, 10.5, 90])
    cy = torch.tensor([10.0, 11, 10, 12, 90])
    h = torch.full((5,), 2.0, dtype=torch.float64)
    count = crowding(cx.double(), cy.double(), h, h)
    assert count[4] == 1 and bool((count[:4] >= 4).all())
    one = crowding(*(torch.ones(1, dtype=torch.float64) for _ in range(4)))
    assert one.tolist() == [1.0]


def test_equal_scores_above_distinct_ones_replay_the_slots_down_to_them(monkeypatch) -> None:  # noqa: ANN001
    # Equal scores in the top half only: the kernel's slots decide their order, and
    # the boxes below the lowest of them need no replay (they come in score order).
    boxes, scores = clusters(400, 3)
    scores = torch.linspace(0.05, 0.95, 400)[
        torch.randperm(400, generator=torch.Generator().manual_seed(2))
    ]
    high = torch.nonzero(scores > 0.6).squeeze(1)
    scores[high] = 0.6 + (scores[high] * 16).floor() / 64  # few values, each many times
    replayed = []
    take = soft_nms_rounds.SlotReplay.take

    def counted(self, box):  # noqa: ANN001, ANN202
        replayed.append(box)
        return take(self, box)

    monkeypatch.setattr(soft_nms_rounds.SlotReplay, "take", counted)
    for method in ("linear", "gaussian"):
        params = SoftNMSParams(0.3, 0.5, 1e-3, method, 0)
        assert_kernel(boxes, scores, params)
        replayed.clear()
        inds, kept = soft_nms_rounds.soft_nms_keep(boxes, scores, params)
        values, counts = torch.unique(kept[1:], return_counts=True)
        lowest_tie = float(values[counts > 1].min())
        down_to_it = inds[1:][kept[1:] >= lowest_tie]  # the step-0 box is not replayed
        assert sorted(replayed) == sorted(down_to_it.tolist())
        assert 0 < len(replayed) < inds.numel() // 2


def test_pair_store_indexes_only_undecided_boxes_once_most_are_decided() -> None:
    boxes, _ = clusters(200, 4)
    params = SoftNMSParams(0.3, 0.5, 1e-3, "linear", 0)
    areas = box_areas(boxes, 0)
    store = PairStore(boxes, areas, params)
    ovr = pair_iou(boxes[:, None], areas[:, None], boxes[None], areas[None], 0)
    near = (ovr > 0) & (ovr >= 0.3)
    near.fill_diagonal_(False)
    und = torch.rand(200, generator=torch.Generator().manual_seed(0)) < 0.3  # 70% decided
    top = und & (torch.arange(200) % 2 == 0)
    src, dst, _ = store.of(top, und)
    assert store.indexed.numel() == int(und[store.proper].sum())  # re-indexed
    want = [(i, j) for i in range(200) for j in range(200) if top[i] and und[j] and near[i, j]]
    assert sorted(zip(src.tolist(), dst.tolist())) == want


@pytest.mark.parametrize("batch", [16, 1])  # pairs found a few at a time, or one by one
@pytest.mark.parametrize("kind", ["all equal", "few levels", "copies"])
def test_levels_of_equal_scores_are_the_kernel(kind: str, batch: int, monkeypatch) -> None:  # noqa: ANN001
    # Equal scores that block the top are taken in the kernel's slot order, each
    # lowering (or dropping) the boxes it overlaps, their pairs found as they near
    # their turn: a box may come before the ones whose pairs were found.
    monkeypatch.setattr(soft_nms_level, "_BATCH", batch)
    monkeypatch.setattr(soft_nms_level, "_BATCH_MIN", batch)
    for seed in range(3):
        boxes, scores = clusters(150 + 150 * seed, seed)
        if kind == "all equal":
            scores = torch.full_like(scores, (0.5, 1.0, 0.0)[seed])
        elif kind == "few levels":
            scores = (scores * 4).floor() / 8 + 0.1
        else:  # a third of the boxes copied, scores too
            k = boxes.shape[0] // 3
            boxes[-k:], scores[-k:] = boxes[:k], scores[:k]
        for method, thr, min_score in (("linear", 0.3, 1e-3), ("gaussian", 0.5, 0.05)):
            params = SoftNMSParams(thr, 0.5, min_score, method, seed % 2)
            assert_kernel(boxes, scores, params)
            assert_kernel(boxes.double(), scores.double(), params)
        assert_kernel(boxes, scores, SoftNMSParams(0.5, 0.5, 0.3, "naive", 0))


def test_a_level_of_equal_scores_finds_its_pairs_in_a_few_calls(monkeypatch) -> None:  # noqa: ANN001
    # 600 boxes of one score: each used to find its pairs alone (one call per box).
    boxes, scores = clusters(600, 1)
    boxes[:, 0::2] += torch.arange(600)[:, None] * 40.0  # mostly apart
    scores = torch.full((600,), 0.5)
    calls = []
    of = PairStore.of

    def counted(self, *args):  # noqa: ANN001, ANN202
        calls.append(1)
        return of(self, *args)

    monkeypatch.setattr(PairStore, "of", counted)
    params = SoftNMSParams(0.3, 0.5, 1e-3, "linear", 0)
    assert_kernel(boxes, scores, params)
    assert len(calls) <= 20
