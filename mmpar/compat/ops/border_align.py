"""Border align (BorderDet): mmcv 1.7.2's ``mmcv.ops.border_align`` in plain torch.

The input ``(N, 4C, H, W)`` holds four groups of ``C`` channels, one per border of a box:
``[0, C)`` top, ``[C, 2C)`` left, ``[2C, 3C)`` bottom, ``[3C, 4C)`` right. Box ``k`` of
image ``n`` is ``boxes[n, k] = (x1, y1, x2, y2)`` in pixels of the map; with
``P = pool_size``, ``w = x2 - x1``, ``h = y2 - y1`` and ``i = 0 .. P``, each border is
sampled at ``P + 1`` points, walked as mmcv's kernel walks them:

* top: ``(x1 + i * w / P, y1)``, left: ``(x1, y1 + i * h / P)``,
* bottom: ``(x2 - i * w / P, y2)``, right: ``(x2, y2 - i * h / P)``.

Each point is read from channel ``c`` of its border's group by RoIAlign's bilinear rule (0
further than one pixel off the map, ``y < -1``, ``y > H`` and likewise ``x``; clamped onto
the map otherwise), and ``out[n, c, k, border]`` is the largest of the ``P + 1`` reads, the
first of equal ones in walking order. The output is ``(N, C, K, 4)``, borders in
``(top, left, bottom, right)`` order; mmcv's models pass ``K = H * W`` boxes, one a pixel,
but any ``K`` works, as in mmcv. The gradient goes, with the bilinear weights, to the four
pixels of the winning point only; the boxes get none. ``pool_size=0`` reads the start point
alone (mmcv's kernel divides by 0 there, and its backward reads a NaN position).

Differences from mmcv-full, none of which its models meet: mmcv's forward steps the point
along by repeated addition and its backward by one multiplication, a few ulps apart; here
both use ``start + i * step``. NaN follows mmcv's ``val > max`` rule: a NaN read at the start
point is the output (and its gradient goes there), a NaN read further along never wins. A
NaN box coordinate reads 0 (mmcv's kernel converts the NaN to an index, undefined
behaviour). Off the GPU (mmcv has CUDA only) and in float16/bfloat16 (computed in float32
and cast back) the op works too.

The reads are ``embedding_bag`` sums over a channels-last copy of the map, chunked over
boxes so that the samples of one chunk stay under ``2**24`` values; only the winners'
indices are kept for the backward pass, which scatters into the gradient chunk by chunk.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mmpar.compat.ops.backend import (
    ArgumentError,
    check_float_tensors,
    check_int,
    float_compute_dtype,
)
from mmpar.compat.ops.roi.rotated_grid import bilinear_entries, pixel_table, read_rows

__all__ = ["BorderAlign", "border_align"]

_OP = "mmcv.ops.border_align"
# Values (samples x channels, and their taps) that one chunk of boxes may hold at once.
_CHUNK_ELEMENTS = 1 << 24


def _check(input: object, boxes: object) -> None:
    for name, value in (("input", input), ("boxes", boxes)):
        if not isinstance(value, Tensor) or not value.is_floating_point():
            found = value.dtype if isinstance(value, Tensor) else type(value).__name__
            raise TypeError(f"{_OP}: {name} must be a floating-point tensor, found {found}")
    if input.dim() != 4:
        raise ValueError(f"{_OP}: input must be (N, 4C, H, W), found {tuple(input.shape)}")
    if input.shape[1] % 4:
        raise ArgumentError(
            f"{_OP}: input's channels must be divisible by 4 (top, left, bottom, right "
            f"groups), found {input.shape[1]}"
        )
    if boxes.dim() != 3 or boxes.shape[2] != 4:
        raise ArgumentError(
            f"{_OP}: boxes must be (N, K, 4) as (x1, y1, x2, y2) (K = H*W in mmcv's models), "
            f"found {tuple(boxes.shape)}"
        )
    if boxes.shape[0] != input.shape[0]:
        raise ValueError(
            f"{_OP}: boxes must have input's batch size {input.shape[0]} as dim 0, "
            f"found {tuple(boxes.shape)}"
        )
    check_float_tensors(_OP, input.device, "input's", boxes=boxes)
    if boxes.dtype != input.dtype:
        raise TypeError(f"{_OP}: boxes must have input's dtype {input.dtype}, found {boxes.dtype}")


def _walks(boxes: Tensor, pool_size: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(start_x, start_y, step_x, step_y)``, each ``(B, 4)``, from ``(B, 4)`` boxes."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    zero = torch.zeros_like(x1)
    if pool_size == 0:
        step_w = step_h = zero
    else:
        step_w, step_h = (x2 - x1) / pool_size, (y2 - y1) / pool_size
    start_x = torch.stack([x1, x1, x2, x2], -1)
    start_y = torch.stack([y1, y1, y2, y2], -1)
    step_x = torch.stack([step_w, zero, -step_w, zero], -1)
    step_y = torch.stack([zero, step_h, zero, -step_h], -1)
    return start_x, start_y, step_x, step_y


def _points(start: Tensor, step: Tensor, index: Tensor) -> Tensor:
    # The start itself at index 0, even where an infinite step times 0 would be NaN.
    return torch.where(index == 0, start, start + step * index)


def _images(batch: Tensor) -> Tensor:
    """``(B, 4, 1)`` long: the image of the map viewed as ``(4N, C, H, W)`` that each border
    of each box reads, from the boxes' ``(B,)`` batch indices."""
    return (batch[:, None] * 4 + torch.arange(4, device=batch.device))[..., None]


class _BorderAlign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, feat: Tensor, boxes: Tensor, pool_size: int) -> Tensor:  # type: ignore[override]
        n, channels4, height, width = feat.shape
        c, k = channels4 // 4, boxes.shape[1]
        flat = boxes.reshape(n * k, 4)
        out = feat.new_zeros(n * k, 4, c)
        # uint8 holds any winner's index for mmcv's models' pool sizes (BorderDet: 10).
        index_dtype = torch.uint8 if pool_size < 256 else torch.int32
        winners = torch.zeros(out.shape, dtype=index_dtype, device=feat.device)
        ctx.pool_size, ctx.feat_shape, ctx.boxes_per_image = pool_size, feat.shape, k
        ctx.save_for_backward(flat, winners)
        if out.numel() == 0 or height * width == 0:
            return out.view(n, k, 4, c).permute(0, 3, 1, 2).contiguous()
        table = pixel_table(feat.reshape(4 * n, c, height, width))
        image_of = torch.arange(n, device=feat.device).repeat_interleave(k)
        steps = torch.arange(pool_size + 1, device=feat.device, dtype=feat.dtype)
        # Per box: (P + 1) * 4 samples of C values, and their four taps (row and weight).
        size = max(1, _CHUNK_ELEMENTS // (4 * (pool_size + 1) * (c + 12)))
        for lo in range(0, n * k, size):
            part = flat[lo : lo + size]
            start_x, start_y, step_x, step_y = _walks(part, pool_size)
            xs = _points(start_x[..., None], step_x[..., None], steps)
            ys = _points(start_y[..., None], step_y[..., None], steps)
            image = _images(image_of[lo : lo + size])
            rows, weights = bilinear_entries(ys, xs, image, height, width)
            reads = read_rows(table, rows.view(-1, 4), weights.view(-1, 4))
            reads = reads.view(part.shape[0], 4, pool_size + 1, c)
            # mmcv keeps a value only if it beats the best so far: a later NaN never wins.
            later = reads[:, :, 1:]
            later.masked_fill_(later.isnan(), float("-inf"))
            best, where = reads.max(dim=2)  # the first of equal values
            out[lo : lo + size] = best
            winners[lo : lo + size] = where.to(index_dtype)
        return out.view(n, k, 4, c).permute(0, 3, 1, 2).contiguous()

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        flat, winners = ctx.saved_tensors
        pool_size = ctx.pool_size
        n, channels4, height, width = ctx.feat_shape
        c, k = channels4 // 4, ctx.boxes_per_image
        grad_rows = grad_out.new_zeros((4 * n * height * width + 1) * c)
        if winners.numel() and height * width:
            grads = grad_out.permute(0, 2, 3, 1).reshape(n * k, 4, c)
            image_of = torch.arange(n, device=flat.device).repeat_interleave(k)
            channel = torch.arange(c, device=flat.device)
            size = max(1, _CHUNK_ELEMENTS // (4 * c * 4 * 3))
            for lo in range(0, n * k, size):
                part = flat[lo : lo + size]
                start_x, start_y, step_x, step_y = _walks(part, pool_size)
                index = winners[lo : lo + size].to(flat.dtype)
                xs = _points(start_x[..., None], step_x[..., None], index)
                ys = _points(start_y[..., None], step_y[..., None], index)
                image = _images(image_of[lo : lo + size])
                rows, weights = bilinear_entries(ys, xs, image, height, width)
                # Off-map points point at the spare last row: whatever they add is dropped.
                rows = rows.remainder(4 * n * height * width + 1)
                target = rows * c + channel[:, None]
                values = grads[lo : lo + size, ..., None] * weights
                grad_rows.index_add_(0, target.flatten(), values.flatten())
        grad_table = grad_rows[: 4 * n * height * width * c].view(4 * n, height, width, c)
        grad_feat = grad_table.permute(0, 3, 1, 2).reshape(n, channels4, height, width)
        return grad_feat, None, None


def border_align(input: Tensor, boxes: Tensor, pool_size: int) -> Tensor:
    """Max-pool each box's four borders from their channel groups (BorderDet's BorderAlign).

    Args:
        input: ``(N, 4C, H, W)`` float features: channels ``[0, C)``, ``[C, 2C)``,
            ``[2C, 3C)``, ``[3C, 4C)`` are read on the top, left, bottom and right borders.
        boxes: ``(N, K, 4)`` boxes ``(x1, y1, x2, y2)`` in pixels of ``input``, ``input``'s
            dtype and device; mmcv's models pass ``K = H * W``, one box a pixel.
        pool_size: Intervals per border, an int ``>= 0``: ``pool_size + 1`` points are read,
            both ends included.

    Returns:
        ``(N, C, K, 4)`` in ``input``'s dtype (float16/bfloat16 computed in float32), the
        last dim ``(top, left, bottom, right)``. Differentiable in ``input``; ``boxes``
        get no gradient.

    Raises:
        TypeError: ``input`` or ``boxes`` not a floating-point tensor, of other dtypes, or
            ``pool_size`` not an int.
        ValueError: ``input`` not 4-D, ``boxes`` of another batch size or device, or
            ``pool_size`` negative. Channels not divisible by 4 and ``boxes`` not
            ``(N, K, 4)`` raise :class:`~mmpar.compat.ops.backend.ArgumentError` (also an
            ``AssertionError``, as mmcv asserts them).
    """
    _check(input, boxes)
    pool_size = check_int(_OP, "pool_size", pool_size, 0)
    dtype = float_compute_dtype(input.dtype)
    out = _BorderAlign.apply(input.to(dtype), boxes.detach().to(dtype), pool_size)
    return out.to(input.dtype)


class BorderAlign(nn.Module):
    """:func:`border_align` as a module (mmcv's ``BorderAlign``).

    Args:
        pool_size: Intervals per border, an int ``>= 0`` (``pool_size + 1`` points each).
    """

    def __init__(self, pool_size: int) -> None:
        super().__init__()
        self.pool_size = check_int("mmcv.ops.BorderAlign", "pool_size", pool_size, 0)

    def forward(self, input: Tensor, boxes: Tensor) -> Tensor:
        """``(N, 4C, H, W)`` features, ``(N, K, 4)`` boxes -> ``(N, C, K, 4)``."""
        return border_align(input, boxes, self.pool_size)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(pool_size={self.pool_size})"
