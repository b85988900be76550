"""The form mmdet's test results must have (per-class boxes, masks, panoptic maps)."""

from __future__ import annotations

from typing import Any, Tuple

from mmpar_zoo.codebase import StageError, form
from mmpar_zoo.needs import Needs


def check_result(output: Any, needs: Needs, data: Any) -> None:
    """Check the test output has mmdet's form: one entry per image (here one).

    An entry is per-class boxes (a list of ``(k, 5)`` arrays, one per class;
    ``(k, 6)`` for rotated boxes),
    ``(bbox, segm)`` with one list of ``ori_shape`` masks per class, a panoptic
    dict (``pan_results`` of ``ori_shape``, maybe ``ins_results``), or, for a
    region proposal network, one ``(k, 5)`` array.

    Args:
        output: What the model returned for the test batch.
        needs: What the model takes (its classes).
        data: The test batch (its ``img_metas`` give ``ori_shape``).

    Raises:
        StageError: naming what differs.
    """
    if not isinstance(output, list) or len(output) != 1:
        raise StageError(f"expected a list of 1 result (one image), got {form(output)}")
    ori = tuple(data["img_metas"][0].data[0][0]["ori_shape"][:2])
    entry = output[0]
    if isinstance(entry, dict):
        if "pan_results" not in entry:
            raise StageError(f"a dict result without 'pan_results': keys {sorted(entry)}")
        if tuple(entry["pan_results"].shape) != ori:
            raise StageError(f"pan_results of shape {entry['pan_results'].shape}, expected {ori}")
        if "ins_results" in entry:
            _check_instances(entry["ins_results"], needs, ori)
    elif isinstance(entry, tuple):
        _check_instances(entry, needs, ori)
    elif _is_boxes(entry, _width(needs)):
        return  # a region proposal network's proposals
    else:
        _check_boxes(entry, needs.things, _width(needs))


def _width(needs: Needs) -> int:
    """Columns of a result's boxes: the box's, then the score."""
    return 6 if needs.rotated else 5


def _is_boxes(value: Any, width: int) -> bool:
    return hasattr(value, "shape") and len(value.shape) == 2 and value.shape[1] == width


def _check_boxes(bbox: Any, classes: int, width: int = 5) -> None:
    if not isinstance(bbox, list) or len(bbox) != classes:
        raise StageError(f"expected per-class boxes, a list of {classes}, got {form(bbox)}")
    bad = [i for i, b in enumerate(bbox) if not _is_boxes(b, width)]
    if bad:
        raise StageError(
            f"class {bad[0]}'s boxes are not a (k, {width}) array: {form(bbox[bad[0]])}"
        )


def _check_instances(entry: Any, needs: Needs, ori: Tuple[int, int]) -> None:
    if len(entry) != 2:
        raise StageError(f"expected (bbox, segm), got {form(entry)}")
    bbox, segm = entry
    if isinstance(segm, tuple):  # (masks, mask scores)
        segm = segm[0]
    _check_boxes(bbox, needs.things)
    if not isinstance(segm, list) or len(segm) != needs.things:
        raise StageError(f"expected per-class masks, a list of {needs.things}, got {form(segm)}")
    for c, (boxes, masks) in enumerate(zip(bbox, segm)):
        if len(masks) != len(boxes):
            raise StageError(f"class {c}: {len(boxes)} boxes but {len(masks)} masks")
        shapes = {tuple(m.shape) for m in masks} - {ori}
        if shapes:
            raise StageError(f"class {c}: masks of shape {shapes.pop()}, expected {ori}")
