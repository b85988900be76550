"""Precise RoI Pooling: mmcv 1.7.2's ``mmcv.ops.prroi_pool`` in plain torch, any device.

Definition. A roi ``(b, x1, y1, x2, y2)`` is scaled to ``X1 = x1 * s`` ... (``s`` the
``spatial_scale``) on the ``(H, W)`` map of image ``b`` and cut into ``PH x PW`` equal bins
of ``bh = max(Y2 - Y1, 0) / PH`` by ``bw = max(X2 - X1, 0) / PW``: bin ``(p, q)`` spans
``[Y1 + p * bh, Y1 + p * bh + bh] x [X1 + q * bw, X1 + q * bw + bw]``. The map is read as its
bilinear interpolant ``f(y, x) = sum_ij F[i, j] * tri(y - i) * tri(x - j)`` with
``tri(t) = max(1 - |t|, 0)``: pixels outside the map are 0, so ``f`` fades to 0 within one
pixel of the border. A bin's value is the integral of ``f`` over the bin divided by its
area ``bh * bw``; a bin of zero area (an empty or inverted roi) is 0.

The integral is separable: ``out[k, c, p, q] = sum_ij A[k, p, i] F[b, c, i, j] B[k, q, j] /
(bh * bw)``, where ``A[k, p, i]`` is the integral of ``tri(y - i)`` over the bin's rows (a
closed form) and ``B`` likewise over its columns. Only the window of pixels a roi can touch
(rows ``floor(Y1) .. ceil(Y2)``, clipped to the map) is read, so a roi costs at most the
map, however large the box. The rois are pooled in chunks of similar windows, whose size
is read on the host (one device sync a call, as roi_align_rotated's adaptive grids).

Gradients are mmcv's kernel's: the input gets ``A^T (g / area) B``; an edge of a bin gets
the derivative of the integral (``+-`` the integral of ``f`` along that edge) and of the
area, and the rois' ``x1 .. y2`` get those edges' sums through ``s``; the batch index
gets 0, and so does every coordinate of a roi with zero area. They are computed in closed
form by the backward (no second-order gradients, as mmcv).

Beyond mmcv (float32 only, CUDA only): float64 on any device, float16/bfloat16 computed in
float32; ``rois`` must have ``input``'s dtype. Bad batch indices and non-finite rois are
refused on the CPU and pool 0 elsewhere (see :mod:`~mmpar.compat.ops.roi.roi_inputs`). A NaN or
inf pixel makes NaN every bin (of its channel) of the rois whose window holds it. The
products are matrix products: where TF32 matmuls are allowed
(``torch.backends.cuda.matmul.allow_tf32``), float32 pooling runs in TF32 too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from mmpar.compat.ops.backend import float_compute_dtype
from mmpar.compat.ops.roi.roi_inputs import (
    Size,
    check_roi_inputs,
    kernel_rois,
    size_pair,
    spatial_scale_value,
)
from mmpar.compat.ops.roi.roi_sampling import size_groups

__all__ = ["PrRoIPool", "prroi_pool"]

_OP = "prroi_pool"
# Elements of the window tensor of one chunk of rois: on the CPU small enough to stay in
# cache (faster than larger chunks), elsewhere large enough that launches do not dominate.
_CHUNK_ELEMENTS = {"cpu": 1 << 20}
_DEVICE_CHUNK_ELEMENTS = 1 << 24


def _tri_integral(lo: Tensor, hi: Tensor) -> Tensor:
    """The integral of ``tri`` over ``[lo, hi]`` (``lo <= hi``), elementwise.

    Written as ``(b - a) * (1 - (|a| + |b|) / 2) - min(a * b, 0)`` on ``[a, b]``, the
    interval clipped to ``[-1, 1]``: proportional to the interval's length, so a bin much
    thinner than a pixel loses no digits to a difference of two antiderivatives.
    """
    a, b = lo.clamp(-1.0, 1.0), hi.clamp(-1.0, 1.0)
    return (b - a) * (1.0 - 0.5 * (a.abs() + b.abs())) - (a * b).clamp(max=0.0)


def _tri(t: Tensor) -> Tensor:
    return (1.0 - t.abs()).clamp(min=0.0)


class _Chunk:
    """One chunk of rois: their bins' edges, windows and 1-D weights.

    Shapes, for ``k`` rois and a window of ``LH x LW`` pixels: edges ``(k, PH)`` /
    ``(k, PW)``; ``rows (k, LH)``, ``cols (k, LW)`` the window's pixels; ``wy (k, PH, LH)``
    and ``wx (k, PW, LW)`` the weights (0 off the map and for rois of zero area).
    """

    def __init__(
        self,
        boxes: Tensor,
        out_size: tuple[int, int],
        scale: float,
        map_size: tuple[int, int],
        window: tuple[int, int],
    ) -> None:
        height, width = map_size
        x1, y1, x2, y2 = (boxes[:, 1:] * scale).unbind(1)
        self.bh = (y2 - y1).clamp(min=0.0) / out_size[0]
        self.bw = (x2 - x1).clamp(min=0.0) / out_size[1]
        area = self.bh * self.bw
        self.valid = torch.isfinite(area) & (area > 0)
        self.inv_area = torch.where(self.valid, 1.0 / torch.where(self.valid, area, 1.0), 0.0)
        self.y_lo, self.y_hi, self.rows, y_in = self._axis(
            y1, self.bh, out_size[0], window[0], height
        )
        self.x_lo, self.x_hi, self.cols, x_in = self._axis(
            x1, self.bw, out_size[1], window[1], width
        )
        self.y_in, self.x_in = y_in, x_in
        self.wy = self._weights(self.y_lo, self.y_hi, self.rows, y_in)
        self.wx = self._weights(self.x_lo, self.x_hi, self.cols, x_in)
        image_rows = boxes[:, 0].long()[:, None] * height + self.rows.clamp(max=height - 1)
        # (k, LH, LW): each window pixel's row in the map's (N * H * W, C) table
        self.index = image_rows[:, :, None] * width + self.cols.clamp(max=width - 1)[:, None, :]

    def _axis(
        self, start: Tensor, size: Tensor, bins: int, length: int, limit: int
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Bin edges ``(k, P)`` (the kernel's expressions), the window's pixels ``(k, L)``
        and whether each is on the map and pools (``(k, L)`` bool)."""
        steps = torch.arange(bins, device=start.device, dtype=start.dtype)
        lo = start[:, None] + size[:, None] * steps
        hi = lo + size[:, None]
        first = torch.where(self.valid, start.floor().clamp(0, limit - 1), 0.0).long()
        pixels = first[:, None] + torch.arange(length, device=start.device)
        return lo, hi, pixels, (pixels < limit) & self.valid[:, None]

    @staticmethod
    def _weights(lo: Tensor, hi: Tensor, pixels: Tensor, inside: Tensor) -> Tensor:
        pix = pixels.to(lo.dtype)[:, None, :]
        weight = _tri_integral(lo[:, :, None] - pix, hi[:, :, None] - pix)
        return torch.where(inside[:, None, :], weight, 0.0)

    def reads(self) -> Tensor:
        """``(k, PH, PW)`` bool: whether each bin reads a pixel (0 * NaN stays out of it)."""
        return (self.wy != 0).any(-1)[:, :, None] & (self.wx != 0).any(-1)[:, None, :]

    def edge_tri(self, edges: Tensor, pixels: Tensor, inside: Tensor) -> Tensor:
        """``(k, P, L)`` ``tri(edge - pixel)``: ``f``'s interpolation weights on an edge."""
        value = _tri(edges[:, :, None] - pixels.to(edges.dtype)[:, None, :])
        return torch.where(inside[:, None, :], value, 0.0)


def _windows(
    boxes: Tensor, scale: float, out_size: tuple[int, int], map_size: tuple[int, int], channels: int
) -> list[tuple[Tensor, int, int]]:
    """The rois in chunks: ``[(indices, LH, LW)]``, each window at least ``PH x PW``."""
    x1, y1, x2, y2 = (boxes[:, 1:] * scale).unbind(1)

    def count(lo: Tensor, hi: Tensor, limit: int, bins: int) -> Tensor:
        first = lo.floor().clamp(0, limit - 1)
        last = hi.ceil().clamp(-1, limit - 1)
        cells = (last - first + 1).nan_to_num(0.0).clamp(0, limit)
        return cells.long().clamp(min=bins)

    cells_h = count(y1, y2, map_size[0], out_size[0])
    cells_w = count(x1, x2, map_size[1], out_size[1])
    budget = _CHUNK_ELEMENTS.get(boxes.device.type, _DEVICE_CHUNK_ELEMENTS)
    return size_groups(cells_h, cells_w, max(channels, 1), budget)


def _window(table: Tensor, chunk: _Chunk) -> Tensor:
    """``(k, LH, LW * C)`` the chunk's windows of the map, from its ``(N * H * W, C)`` table."""
    rows = table.index_select(0, chunk.index.flatten())
    return rows.view(*chunk.index.shape[:2], -1)


def _pool(chunk: _Chunk, window: Tensor) -> Tensor:
    """``(k, PH, PW, C)``: each bin's integral divided by its area."""
    k, ph = chunk.wy.shape[:2]
    along_y = torch.bmm(chunk.wy, window).view(k, ph, chunk.wx.shape[2], -1)  # (k, PH, LW, C)
    pooled = torch.matmul(chunk.wx[:, None], along_y) * chunk.inv_area[:, None, None, None]
    return torch.where(chunk.reads()[..., None], pooled, 0.0)


def _input_grad(chunk: _Chunk, grad: Tensor) -> Tensor:
    """``(k, LH, LW * C)``: the gradient of the windows for ``grad`` ``(k, PH, PW, C)``."""
    g = grad * chunk.inv_area[:, None, None, None]
    along_x = torch.matmul(chunk.wx.transpose(1, 2)[:, None], g)  # (k, PH, LW, C)
    return torch.bmm(chunk.wy.transpose(1, 2), along_x.flatten(2))


def _rois_grad(chunk: _Chunk, window: Tensor, grad: Tensor, scale: float) -> Tensor:
    """``(k, 5)``: the kernel's gradient of the rois for ``grad`` ``(k, PH, PW, C)``."""
    k, ph, pw = grad.shape[:3]
    lw = chunk.wx.shape[2]
    g = grad * chunk.inv_area[:, None, None, None]
    # Rows of f: integrated over each bin's height, and read on its top and bottom edges.
    row_weights = torch.cat(
        [
            chunk.wy,
            chunk.edge_tri(chunk.y_lo, chunk.rows, chunk.y_in),
            chunk.edge_tri(chunk.y_hi, chunk.rows, chunk.y_in),
        ],
        1,
    )
    rows = torch.bmm(row_weights, window).view(k, 3, ph, lw, -1)
    # (k, 3, PH, PW, LW): per bin, g against those rows' columns, summed over channels.
    per_col = torch.matmul(g[:, None], rows.transpose(-1, -2))
    tri_x1 = chunk.edge_tri(chunk.x_lo, chunk.cols, chunk.x_in)[:, None]
    tri_x2 = chunk.edge_tri(chunk.x_hi, chunk.cols, chunk.x_in)[:, None]
    wx = chunk.wx[:, None]
    # sum_c g * (integral of f along each edge): the kernel's grad_x1_y ... grad_x_y2.
    on_x1, on_x2 = (per_col[:, 0] * tri_x1).sum(-1), (per_col[:, 0] * tri_x2).sum(-1)
    on_y1, on_y2 = (per_col[:, 1] * wx).sum(-1), (per_col[:, 2] * wx).sum(-1)
    # sum_c g * value: what moving an edge does through the bin's area.
    mean = (per_col[:, 0] * wx).sum(-1) * chunk.inv_area[:, None, None]
    bh, bw = chunk.bh[:, None, None], chunk.bw[:, None, None]
    d_x1, d_x2 = bh * mean - on_x1, on_x2 - bh * mean
    d_y1, d_y2 = bw * mean - on_y1, on_y2 - bw * mean
    fy = torch.arange(ph + 1, device=g.device, dtype=g.dtype)[:, None] / ph
    fx = torch.arange(pw + 1, device=g.device, dtype=g.dtype) / pw
    # Edge q of the bins sits at X1 + (X2 - X1) * q / PW (and likewise for rows).
    grad_x1 = (d_x1 * (1 - fx[:-1]) + d_x2 * (1 - fx[1:])).sum((1, 2))
    grad_x2 = (d_x1 * fx[:-1] + d_x2 * fx[1:]).sum((1, 2))
    grad_y1 = (d_y1 * (1 - fy[:-1]) + d_y2 * (1 - fy[1:])).sum((1, 2))
    grad_y2 = (d_y1 * fy[:-1] + d_y2 * fy[1:]).sum((1, 2))
    coords = torch.stack([grad_x1, grad_y1, grad_x2, grad_y2], 1) * scale
    return torch.cat([torch.zeros_like(coords[:, :1]), coords], 1)


class _PrRoIPoolFunction(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, feat: Tensor, boxes: Tensor, out_size: tuple[int, int], scale: float
    ) -> Tensor:
        n, c, h, w = feat.shape
        chunks = _windows(boxes, scale, out_size, (h, w), c)
        table = feat.permute(0, 2, 3, 1).reshape(n * h * w, c)
        out = feat.new_zeros(boxes.shape[0], *out_size, c)
        for idx, top_h, top_w in chunks:
            chunk = _Chunk(boxes[idx], out_size, scale, (h, w), (top_h, top_w))
            out[idx] = _pool(chunk, _window(table, chunk))
        ctx.save_for_backward(feat, boxes)
        ctx.chunks, ctx.out_size, ctx.scale = chunks, out_size, scale
        return out.permute(0, 3, 1, 2).contiguous()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        feat, boxes = ctx.saved_tensors
        n, c, h, w = feat.shape
        need_feat, need_rois = ctx.needs_input_grad[:2]
        table = feat.permute(0, 2, 3, 1).reshape(n * h * w, c) if need_rois else None
        grad_table = feat.new_zeros(n * h * w, c) if need_feat else None
        grad_rois = torch.zeros_like(boxes) if need_rois else None
        grad_last = grad_out.permute(0, 2, 3, 1)  # (K, PH, PW, C)
        for idx, top_h, top_w in ctx.chunks:
            chunk = _Chunk(boxes[idx], ctx.out_size, ctx.scale, (h, w), (top_h, top_w))
            grad = grad_last[idx]
            if grad_table is not None:
                g_window = _input_grad(chunk, grad).view(chunk.index.numel(), c)
                grad_table.index_add_(0, chunk.index.flatten(), g_window)
            if grad_rois is not None and table is not None:
                roi_grad = _rois_grad(chunk, _window(table, chunk), grad, ctx.scale)
                # A roi of zero area, or off the map, reads nothing: no gradient, even
                # where its clamped window holds a NaN.
                reads = chunk.valid & chunk.reads().flatten(1).any(1)
                grad_rois[idx] = torch.where(reads[:, None], roi_grad, 0.0)
        grad_feat = None
        if grad_table is not None:
            grad_feat = grad_table.view(n, h, w, c).permute(0, 3, 1, 2).contiguous()
        return grad_feat, grad_rois, None, None


def prroi_pool(
    input: Tensor, rois: Tensor, output_size: Size, spatial_scale: float = 1.0
) -> Tensor:
    """Precise RoI Pooling: each bin is the average of the bilinear map over the bin.

    Args:
        input: ``(N, C, H, W)`` float feature maps.
        rois: ``(K, 5)`` ``batch_idx, x1, y1, x2, y2`` in image coordinates, of ``input``'s
            dtype; ``K`` may be 0.
        output_size: ``(PH, PW)``, or one int for both.
        spatial_scale: Factor from box to ``input`` coordinates (e.g. 1/16), positive.

    Returns:
        ``(K, C, PH, PW)`` in ``input``'s dtype (float16/bfloat16 computed in float32).
        Differentiable in ``input`` and in ``rois``' coordinates (the batch index gets 0).
        A NaN or inf pixel makes NaN, in its channel, every bin of each roi whose window
        (rows ``floor(Y1) .. ceil(Y2)``, columns likewise) holds it, not only the bins that
        read it (mmcv's kernel: only those).

    Raises:
        TypeError: ``input`` or ``rois`` not a float tensor, of different dtypes;
            ``output_size`` or ``spatial_scale`` of a wrong type.
        ValueError: A wrong shape (``rois``'s is also an ``AssertionError``, as mmcv
            asserts), device, size or scale; a batch index outside ``[0, N)`` or a
            non-finite roi on the CPU (elsewhere, without a device sync, such a roi pools 0).
    """
    out_size = size_pair(_OP, output_size)
    scale = spatial_scale_value(_OP, spatial_scale)
    check_roi_inputs(_OP, input, rois)
    if rois.dtype != input.dtype:
        raise TypeError(
            f"mmcv.ops.{_OP}: rois must have input's dtype {input.dtype}, got {rois.dtype}"
        )
    dtype = float_compute_dtype(input.dtype)
    boxes, _ = kernel_rois(rois.to(dtype), input.shape[0], scale)
    out = _PrRoIPoolFunction.apply(input.to(dtype), boxes, out_size, scale)
    return out.to(input.dtype)


class PrRoIPool(nn.Module):
    """:func:`prroi_pool` as a module (mmcv's ``PrRoIPool``).

    Args:
        output_size: ``(PH, PW)``, or one int.
        spatial_scale: Factor from box to feature coordinates, positive.
    """

    def __init__(self, output_size: Size, spatial_scale: float = 1.0) -> None:
        super().__init__()
        self.output_size = size_pair("PrRoIPool", output_size)
        self.spatial_scale = spatial_scale_value("PrRoIPool", spatial_scale)

    def forward(self, features: Tensor, rois: Tensor) -> Tensor:
        """``(N, C, H, W)`` maps, ``(K, 5)`` rois -> ``(K, C, PH, PW)``."""
        return prroi_pool(features, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, "
            f"spatial_scale={self.spatial_scale})"
        )
