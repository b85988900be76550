"""CenterNet-style targets, losses and decoding: objects as peaks of per-class heatmaps.

An object whose box has centre ``(cx, cy)`` (input pixels) is a peak at
``(cx / stride, cy / stride)`` of its class's heatmap. The heatmap target is a
Gaussian around the integer peak cell ``(ix, iy)`` with sigmas proportional to
the box size; the size head predicts ``(w, h) / stride`` and the offset head the
sub-cell part ``(cx / stride - ix, cy / stride - iy)`` at the peak cell.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F

__all__ = ["CenterTargets", "make_targets", "focal_loss", "valid_mask", "decode"]

_EPS = 1e-6


class CenterTargets:
    """Targets of a batch on the output grid.

    Attributes:
        heatmap: ``(N, C, h, w)`` in [0, 1], 1 at object centres.
        index: ``(M,)`` flat index ``n * h * w + iy * w + ix`` of each object's cell.
        size: ``(M, 2)`` box ``(w, h) / stride``.
        offset: ``(M, 2)`` sub-cell centre offset in [0, 1).
    """

    def __init__(
        self, heatmap: torch.Tensor, index: torch.Tensor, size: torch.Tensor, offset: torch.Tensor
    ) -> None:
        self.heatmap, self.index, self.size, self.offset = heatmap, index, size, offset


def _gaussian(
    h: int, w: int, cx: int, cy: int, sx: float, sy: float, device: torch.device
) -> torch.Tensor:
    ys = torch.arange(h, device=device, dtype=torch.float32)[:, None]
    xs = torch.arange(w, device=device, dtype=torch.float32)[None, :]
    return torch.exp(-((xs - cx) ** 2) / (2 * sx * sx) - ((ys - cy) ** 2) / (2 * sy * sy))


def make_targets(
    gt_bboxes: Sequence[torch.Tensor],
    gt_labels: Sequence[torch.Tensor],
    num_classes: int,
    out_hw: Tuple[int, int],
    stride: int,
) -> CenterTargets:
    """Encode per-image boxes as heatmap, size and offset targets.

    Args:
        gt_bboxes: Per image, ``(K, 4)`` x1y1x2y2 boxes in input pixels.
        gt_labels: Per image, ``(K,)`` labels in ``[0, num_classes)``.
        num_classes: Number of classes C.
        out_hw: ``(h, w)`` of the output grid.
        stride: Input pixels per output cell.

    Returns:
        The targets; where two objects overlap, the heatmap keeps the maximum.

    Raises:
        ValueError: a label outside ``[0, num_classes)`` (naming the image).
    """
    h, w = out_hw
    device = gt_bboxes[0].device if len(gt_bboxes) else torch.device("cpu")
    heatmap = torch.zeros(len(gt_bboxes), num_classes, h, w, device=device)
    index, size, offset = [], [], []
    for n, (boxes, labels) in enumerate(zip(gt_bboxes, gt_labels)):
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
            raise ValueError(
                f"gt_labels[{n}]: expected labels in [0, {num_classes}), got {labels.tolist()}"
            )
        for box, label in zip(boxes.float() / stride, labels.tolist()):
            bw, bh = float(box[2] - box[0]), float(box[3] - box[1])
            cx, cy = float(box[0] + box[2]) / 2, float(box[1] + box[3]) / 2
            ix, iy = min(int(cx), w - 1), min(int(cy), h - 1)
            peak = _gaussian(h, w, ix, iy, max(bw / 6, 0.5), max(bh / 6, 0.5), device)
            heatmap[n, label] = torch.maximum(heatmap[n, label], peak)
            index.append(n * h * w + iy * w + ix)
            size.append([bw, bh])
            offset.append([cx - ix, cy - iy])
    return CenterTargets(
        heatmap,
        torch.tensor(index, dtype=torch.int64, device=device),
        torch.tensor(size, dtype=torch.float32, device=device).reshape(-1, 2),
        torch.tensor(offset, dtype=torch.float32, device=device).reshape(-1, 2),
    )


def valid_mask(
    img_metas: Sequence[Dict], out_hw: Tuple[int, int], stride: int, device: torch.device
) -> torch.Tensor:
    """``(N, 1, h, w)`` float mask: 1 on cells whose centre lies in the image, 0 on padding.

    Uses each meta's ``img_shape`` ``(h, w, c)``: the image before batch padding.
    """
    h, w = out_hw
    mask = torch.zeros(len(img_metas), 1, h, w, device=device)
    for n, meta in enumerate(img_metas):
        img_h, img_w = meta["img_shape"][:2]
        mask[n, :, : -(-int(img_h) // stride), : -(-int(img_w) // stride)] = 1
    return mask


def focal_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    alpha: float = 2.0,
    beta: float = 4.0,
) -> torch.Tensor:
    """CenterNet's penalty-reduced pixel-wise focal loss, over the cells where ``mask`` is 1.

    Args:
        logits: ``(N, C, h, w)`` heatmap logits.
        target: ``(N, C, h, w)`` Gaussian targets, exactly 1 at centres.
        mask: ``(N, 1, h, w)`` cells to count.

    Returns:
        Scalar: the summed loss divided by the number of centres (at least 1).
    """
    prob = logits.sigmoid().clamp(_EPS, 1 - _EPS)
    pos = (target >= 1 - _EPS).float()
    pos_loss = -torch.log(prob) * (1 - prob) ** alpha * pos
    neg_loss = -torch.log(1 - prob) * prob**alpha * (1 - target) ** beta * (1 - pos)
    return ((pos_loss + neg_loss) * mask).sum() / pos.sum().clamp(min=1)


def _gather_cells(maps: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``(N, 2, h, w)`` maps read at flat cell indices: ``(M, 2)``."""
    n, c, h, w = maps.shape
    return maps.permute(0, 2, 3, 1).reshape(n * h * w, c)[index]


def regression_losses(
    size_pred: torch.Tensor, offset_pred: torch.Tensor, targets: CenterTargets
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean L1 losses of the size and offset heads at the object centres (0 without objects)."""
    if targets.index.numel() == 0:
        zero = (size_pred.sum() + offset_pred.sum()) * 0
        return zero, zero
    size = F.l1_loss(_gather_cells(size_pred, targets.index), targets.size)
    offset = F.l1_loss(_gather_cells(offset_pred, targets.index), targets.offset)
    return size, offset


def decode(
    heat_logits: torch.Tensor,
    size_pred: torch.Tensor,
    offset_pred: torch.Tensor,
    stride: int,
    max_per_img: int = 50,
) -> List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Turn head outputs into boxes: local maxima (3x3) of the heatmaps, top ``max_per_img``.

    Args:
        heat_logits: ``(N, C, h, w)``; size_pred, offset_pred: ``(N, 2, h, w)``.
        stride: Input pixels per output cell.
        max_per_img: Detections kept per image.

    Returns:
        Per image ``(boxes (k, 4) x1y1x2y2 in input pixels, scores (k,), labels (k,))``,
        by decreasing score.
    """
    heat = heat_logits.sigmoid()
    peaks = heat * (F.max_pool2d(heat, 3, stride=1, padding=1) == heat).float()
    n, c, h, w = heat.shape
    k = min(max_per_img, c * h * w)
    scores, flat = peaks.reshape(n, -1).topk(k)
    labels, cell = flat // (h * w), flat % (h * w)
    out = []
    for i in range(n):
        sz = size_pred[i].reshape(2, -1)[:, cell[i]].t()
        off = offset_pred[i].reshape(2, -1)[:, cell[i]].t()
        cx = (cell[i] % w).float() + off[:, 0]
        cy = (cell[i] // w).float() + off[:, 1]
        half_w, half_h = sz[:, 0].clamp(min=0) / 2, sz[:, 1].clamp(min=0) / 2
        boxes = torch.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], dim=1) * stride
        out.append((boxes, scores[i], labels[i]))
    return out
