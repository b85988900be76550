"""TinyDet: a small CenterNet-style detector that trains in seconds on a CPU."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mmpar.models.center_head import decode, focal_loss, make_targets, regression_losses, valid_mask
from mmpar.models.norm import build_norm
from mmpar.registry import MODELS
from mmpar.utils.checks import is_int

__all__ = ["TinyDet", "parse_losses"]

_PRIOR_PROB = 0.1  # initial heatmap probability: keeps the focal loss stable at the start


def _conv(cin: int, cout: int, stride: int, norm_cfg: Optional[Mapping[str, Any]]) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=norm_cfg is None),
        build_norm(norm_cfg, cout),
        nn.ReLU(inplace=True),
    )


def _head(cin: int, mid: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, mid, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(mid, cout, 1)
    )


def parse_losses(losses: Mapping[str, torch.Tensor]) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Sum the entries whose name contains ``loss``; report each as a float.

    Returns:
        ``(total loss tensor, OrderedDict name -> value, with "loss" last)``.

    Raises:
        TypeError: a value is not a tensor (naming the key).
    """
    log_vars: Dict[str, float] = OrderedDict()
    for name, value in losses.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"losses[{name!r}]: expected a tensor, got {type(value).__name__}")
        log_vars[name] = float(value.detach().mean())
    total = sum(value.mean() for name, value in losses.items() if "loss" in name)
    log_vars["loss"] = float(total.detach())  # type: ignore[union-attr]
    return total, log_vars  # type: ignore[return-value]


@MODELS.register_module()
class TinyDet(nn.Module):
    """A CenterNet-style detector: a small conv backbone to stride 8, one upsampling
    step back to stride 4, and three heads at stride 4: per-class heatmaps (focal
    loss), box sizes and centre offsets (L1).

    Detections are the 3x3 local maxima of the heatmaps, top ``max_per_img`` per
    image (see :mod:`mmpar.models.center_head`). Padded cells (outside each
    image's ``img_shape``) count in no loss and never yield detections.

    Args:
        num_classes: Number of object classes.
        width: Channels of the stride-4 features (stride 8 has twice as many).
        norm_cfg: Normalization after each backbone conv, e.g. ``dict(type="BN")``,
            ``dict(type="SyncBN")`` or None.
        loss_weights: Weights of ``heatmap``, ``size`` and ``offset`` losses.
        max_per_img: Detections per image at test time.
        score_thr: Detections scoring below it are dropped at test time.

    Raises:
        ValueError: ``num_classes`` or ``width`` < 1.
    """

    stride = 4
    #: What ``compile = True`` compiles (see :mod:`mmpar.runner.compile`): the part that
    #: sees only the image tensor, not the per-image box lists.
    compile_targets = ("extract",)

    def __init__(
        self,
        num_classes: int = 3,
        width: int = 32,
        norm_cfg: Optional[Mapping[str, Any]] = dict(type="BN"),
        loss_weights: Mapping[str, float] = dict(heatmap=1.0, size=0.1, offset=1.0),
        max_per_img: int = 50,
        score_thr: float = 0.01,
    ) -> None:
        super().__init__()
        for name, value in (
            ("num_classes", num_classes),
            ("width", width),
            ("max_per_img", max_per_img),
        ):
            if not is_int(value) or value < 1:
                raise ValueError(f"TinyDet: {name} must be an int >= 1, got {value!r}")
        self.num_classes = num_classes
        unknown = sorted(set(loss_weights) - {"heatmap", "size", "offset"})
        if unknown:
            raise ValueError(
                f"TinyDet: loss_weights keys must be among heatmap, size, offset, got {unknown}"
            )
        self.loss_weights = {**dict(heatmap=1.0, size=0.1, offset=1.0), **dict(loss_weights)}
        self.max_per_img, self.score_thr = max_per_img, float(score_thr)
        w = width
        self.stem = nn.Sequential(
            _conv(3, w // 2, 2, norm_cfg), _conv(w // 2, w, 2, norm_cfg), _conv(w, w, 1, norm_cfg)
        )
        self.down = nn.Sequential(
            _conv(w, 2 * w, 2, norm_cfg),
            _conv(2 * w, 2 * w, 1, norm_cfg),
            _conv(2 * w, 2 * w, 1, norm_cfg),
        )
        self.lateral = nn.Conv2d(2 * w, w, 1)
        self.fuse = _conv(w, w, 1, norm_cfg)
        self.heatmap_head = _head(w, w, num_classes)
        self.size_head = _head(w, w, 2)
        self.offset_head = _head(w, w, 2)
        nn.init.constant_(
            self.heatmap_head[-1].bias, float(np.log(_PRIOR_PROB / (1 - _PRIOR_PROB)))
        )

    def extract(self, img: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Head outputs for a padded batch ``img`` ``(N, 3, H, W)``, H and W multiples of 8.

        Returns:
            ``(heatmap logits (N, C, H/4, W/4), sizes (N, 2, H/4, W/4), offsets (N, 2, H/4, W/4))``.
        """
        if img.dim() != 4 or img.shape[1] != 3:
            raise ValueError(f"TinyDet: img must be (N, 3, H, W), got shape {tuple(img.shape)}")
        c4 = self.stem(img)
        c8 = self.down(c4)
        up = F.interpolate(self.lateral(c8), size=c4.shape[-2:], mode="nearest")
        feat = self.fuse(c4 + up)
        return self.heatmap_head(feat), self.size_head(feat), self.offset_head(feat)

    def forward(
        self,
        img: torch.Tensor,
        img_metas: Sequence[Dict[str, Any]],
        return_loss: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Losses (``return_loss=True``) or detections (``return_loss=False``).

        Args:
            img: ``(N, 3, H, W)`` padded images.
            img_metas: N dicts with ``img_shape``, ``pad_shape``, ``scale_factor``.
            return_loss: Train or test mode.
            **kwargs: Training: ``gt_bboxes`` (N tensors ``(K, 4)``) and
                ``gt_labels`` (N tensors ``(K,)``). Testing: ``rescale`` (default True).

        Returns:
            See :meth:`forward_train` and :meth:`forward_test`.
        """
        if len(img_metas) != img.shape[0]:
            raise ValueError(f"TinyDet: {img.shape[0]} images but {len(img_metas)} img_metas")
        if return_loss:
            return self.forward_train(img, img_metas, **kwargs)
        return self.forward_test(img, img_metas, **kwargs)

    def forward_train(
        self,
        img: torch.Tensor,
        img_metas: Sequence[Dict[str, Any]],
        gt_bboxes: Sequence[torch.Tensor],
        gt_labels: Sequence[torch.Tensor],
        **kwargs: Any,
    ) -> Dict[str, torch.Tensor]:
        """Returns ``dict(loss_heatmap=..., loss_size=..., loss_offset=...)``, each a scalar.

        Raises:
            ValueError: the number of box or label tensors differs from the batch size.
        """
        for name, value in (("gt_bboxes", gt_bboxes), ("gt_labels", gt_labels)):
            if len(value) != img.shape[0]:
                raise ValueError(
                    f"TinyDet: {name} holds {len(value)} entries for {img.shape[0]} images"
                )
        # Under autocast the heads run in half precision; the losses are computed in float32.
        heat, size, offset = (t.float() for t in self.extract(img))
        with torch.autocast(heat.device.type, enabled=False):
            out_hw = (heat.shape[2], heat.shape[3])
            targets = make_targets(gt_bboxes, gt_labels, self.num_classes, out_hw, self.stride)
            mask = valid_mask(img_metas, out_hw, self.stride, heat.device)
            loss_size, loss_offset = regression_losses(size, offset, targets)
            weights = self.loss_weights
            return OrderedDict(
                loss_heatmap=weights["heatmap"] * focal_loss(heat, targets.heatmap, mask),
                loss_size=weights["size"] * loss_size,
                loss_offset=weights["offset"] * loss_offset,
            )

    @torch.no_grad()
    def forward_test(
        self,
        img: torch.Tensor,
        img_metas: Sequence[Dict[str, Any]],
        rescale: bool = True,
        **kwargs: Any,
    ) -> List[List[np.ndarray]]:
        """Detections per image and class.

        Returns:
            Per image, per class, a float32 array ``(k, 5)`` ``[x1, y1, x2, y2, score]``
            by decreasing score, clipped to the image; in original image pixels when
            ``rescale`` (divided by ``scale_factor``), else in input pixels.
        """
        heat, size, offset = (t.float() for t in self.extract(img))  # decoded in float32
        heat = heat.masked_fill(
            valid_mask(img_metas, heat.shape[2:], self.stride, heat.device) == 0, -1e4
        )
        results = []
        for (boxes, scores, labels), meta in zip(
            decode(heat, size, offset, self.stride, self.max_per_img), img_metas
        ):
            keep = scores >= self.score_thr
            boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
            img_h, img_w = meta["img_shape"][:2]
            boxes[:, 0::2] = boxes[:, 0::2].clamp(0, img_w)
            boxes[:, 1::2] = boxes[:, 1::2].clamp(0, img_h)
            if rescale:
                boxes = boxes / boxes.new_tensor(np.asarray(meta["scale_factor"], dtype=np.float32))
            dets = torch.cat([boxes, scores[:, None]], dim=1).cpu().numpy().astype(np.float32)
            labels_np = labels.cpu().numpy()
            results.append([dets[labels_np == c] for c in range(self.num_classes)])
        return results

    def train_step(
        self, data: Dict[str, Any], optimizer: Optional[torch.optim.Optimizer] = None
    ) -> Dict[str, Any]:
        """One forward pass with losses; the caller runs backward and the optimizer step.

        Args:
            data: A batch unwrapped for one device (``img``, ``img_metas``,
                ``gt_bboxes``, ``gt_labels``).
            optimizer: Unused; kept for the mmcv-style signature.

        Returns:
            ``dict(loss=total tensor, log_vars=dict name -> float, num_samples=N)``.
        """
        loss, log_vars = parse_losses(self(**data))
        return dict(loss=loss, log_vars=log_vars, num_samples=len(data["img_metas"]))

    def val_step(
        self, data: Dict[str, Any], optimizer: Optional[torch.optim.Optimizer] = None
    ) -> Dict[str, Any]:
        """Like :meth:`train_step`, under ``torch.no_grad()``."""
        with torch.no_grad():
            return self.train_step(data, optimizer)
