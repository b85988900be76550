"""mmcv's in-box test over every (box, point) pair of a batch, in chunks (not an mmcv module).

Points ``(B, N, 3)`` and boxes ``(B, T, 7)``: each box is tested against the ``N``
points of its batch element, with :func:`~mmpar.compat.ops.boxes3d.frame.in_box`.
The boxes are taken as ``B * T`` rows (row ``b * T + t``), a run of rows at a time,
so that about :data:`CHUNK_PAIRS` pairs (and a few float tensors of that size) are
in memory at once, whatever ``T * N``.
"""

from __future__ import annotations

from typing import Iterator, Tuple

import torch
from torch import Tensor

from mmpar.compat.ops.boxes3d.frame import in_box

__all__ = ["CHUNK_PAIRS", "inside_mask_rows", "inside_pairs"]

#: (box, point) pairs tested at once.
CHUNK_PAIRS = 1 << 20


def inside_mask_rows(points: Tensor, boxes: Tensor) -> Iterator[Tuple[int, Tensor]]:
    """The in-box masks of runs of box rows.

    Args:
        points: ``(B, N, 3)`` float.
        boxes: ``(B, T, 7)`` float, same dtype and device.

    Yields:
        ``(start, mask)``: ``mask`` ``(k, N)`` bool, row ``i`` the test of box row
        ``start + i`` (box ``(start + i) % T`` of batch element ``(start + i) // T``)
        against that element's points. The runs cover the ``B * T`` rows in order.
    """
    batch, n = points.shape[:2]
    per_batch = boxes.shape[1]
    rows = boxes.reshape(batch * per_batch, 7)
    step = max(1, CHUNK_PAIRS // max(n, 1))
    for start in range(0, rows.shape[0], step):
        stop = min(start + step, rows.shape[0])
        first, last = start // per_batch, (stop - 1) // per_batch
        if first == last:  # one batch element: its points broadcast, no copy
            pts = points[first][None]
        else:
            owner = torch.arange(start, stop, device=points.device) // per_batch
            pts = points.index_select(0, owner)
        yield start, in_box(pts, rows[start:stop, None])


def inside_pairs(points: Tensor, boxes: Tensor) -> Tuple[Tensor, Tensor]:
    """Every (box row, point) pair where the point is in the box, in (row, point) order.

    Args:
        points: ``(B, N, 3)`` float.
        boxes: ``(B, T, 7)`` float, same dtype and device.

    Returns:
        ``(row, point)``: ``(P,)`` long each, ``row`` in ``[0, B * T)`` (as in
        :func:`inside_mask_rows`) and ``point`` in ``[0, N)``, sorted by row, then point.
    """
    found_rows, found_points = [], []
    for start, mask in inside_mask_rows(points, boxes):
        row, point = mask.nonzero(as_tuple=True)
        found_rows.append(row + start)
        found_points.append(point)
    if not found_rows:
        empty = torch.zeros(0, dtype=torch.long, device=points.device)
        return empty, empty
    return torch.cat(found_rows), torch.cat(found_points)
