"""Point sampling for PointRend: mmcv 1.7.2's ``mmcv.ops.point_sample`` in plain torch.

Points are ``(x, y)`` in ``[0, 1] x [0, 1]`` relative to a map (or to a roi);
:func:`point_sample` reads a map at such points with :func:`torch.nn.functional.grid_sample`
(bilinear, zeros outside), and :class:`SimpleRoIAlign` pools rois by sampling each bin's
centre once.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mmpar.compat.ops.roi.roi_inputs import check_roi_inputs, size_pair, spatial_scale_value

__all__ = [
    "SimpleRoIAlign",
    "abs_img_point_to_rel_img_point",
    "bilinear_grid_sample",
    "denormalize",
    "generate_grid",
    "get_shape_from_feature_map",
    "normalize",
    "point_sample",
    "rel_roi_point_to_abs_img_point",
    "rel_roi_point_to_rel_img_point",
]


def _check_points(op: str, name: str, points: Any, dims: Sequence[int]) -> None:
    """Raise unless ``points`` is a float tensor of one of ``dims`` whose last size is 2."""
    if not isinstance(points, Tensor) or not points.is_floating_point():
        found = points.dtype if isinstance(points, Tensor) else type(points).__name__
        raise TypeError(f"mmcv.ops.{op}: {name} must be a floating-point tensor, got {found}")
    if points.dim() not in dims or points.shape[-1] != 2:
        raise ValueError(
            f"mmcv.ops.{op}: {name} must have {' or '.join(map(str, dims))} dims ending in 2 "
            f"(x, y), got {tuple(points.shape)}"
        )


def bilinear_grid_sample(im: Tensor, grid: Tensor, align_corners: bool = False) -> Tensor:
    """``F.grid_sample(im, grid, "bilinear", "zeros", align_corners)`` written with gathers
    (mmcv's ONNX-exportable form).

    Args:
        im: ``(N, C, H, W)`` float maps.
        grid: ``(N, Hg, Wg, 2)`` float, ``(x, y)`` in ``[-1, 1]`` (outside reads zeros).
        align_corners: -1 and 1 are the centres of the corner pixels (``True``) or their
            outer edges (``False``).

    Returns:
        ``(N, C, Hg, Wg)``, differentiable in ``im`` and ``grid``.
    """
    if im.dim() != 4:
        raise ValueError(
            f"mmcv.ops.bilinear_grid_sample: im must be (N, C, H, W), got {tuple(im.shape)}"
        )
    _check_points("bilinear_grid_sample", "grid", grid, (4,))
    n, c, h, w = im.shape
    if grid.shape[0] != n:
        raise ValueError(
            f"mmcv.ops.bilinear_grid_sample: grid must have im's batch size {n}, "
            f"got {grid.shape[0]}"
        )
    gh, gw = grid.shape[1:3]
    x, y = grid[..., 0].reshape(n, -1), grid[..., 1].reshape(n, -1)
    if align_corners:
        x, y = (x + 1) / 2 * (w - 1), (y + 1) / 2 * (h - 1)
    else:
        x, y = ((x + 1) * w - 1) / 2, ((y + 1) * h - 1) / 2
    x0, y0 = x.floor(), y.floor()
    flat = im.reshape(n, c, h * w)
    out = None
    for xi, wx in ((x0, x0 + 1 - x), (x0 + 1, x - x0)):
        for yi, wy in ((y0, y0 + 1 - y), (y0 + 1, y - y0)):
            inside = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
            index = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).long()
            value = flat.gather(2, index[:, None, :].expand(-1, c, -1))
            term = value * (wx * wy * inside)[:, None, :]
            out = term if out is None else out + term
    return out.reshape(n, c, gh, gw)


def normalize(grid: Tensor) -> Tensor:
    """Map coordinates from ``[-1, 1]`` to ``[0, 1]``."""
    return (grid + 1.0) / 2.0


def denormalize(grid: Tensor) -> Tensor:
    """Map coordinates from ``[0, 1]`` to ``[-1, 1]``."""
    return grid * 2.0 - 1.0


def generate_grid(num_grid: int, size: Sequence[int], device: torch.device) -> Tensor:
    """The centres of a regular ``size`` grid of cells over ``[0, 1] x [0, 1]``.

    Args:
        num_grid: How many copies (one per roi).
        size: ``(h, w)`` cells.
        device: Where the result lives.

    Returns:
        ``(num_grid, h * w, 2)`` float32 ``(x, y)``, row-major over the cells (an
        expanded view: one copy in memory).
    """
    h, w = size

    def centres(steps: int) -> Tensor:
        # (2i + 1) / (2 steps), with the float32 rounding of F.affine_grid's grid (mmcv's).
        ticks = torch.linspace(-1, 1, steps, device=device) * (steps - 1) / steps
        return normalize(ticks)

    ys, xs = centres(h), centres(w)
    grid = torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1)  # (h, w, 2)
    return grid.view(1, -1, 2).expand(num_grid, -1, -1)


def rel_roi_point_to_abs_img_point(rois: Tensor, rel_roi_points: Tensor) -> Tensor:
    """Points relative to their roi -> absolute image coordinates (no gradient).

    Args:
        rois: ``(K, 4)`` ``x1, y1, x2, y2``, or ``(K, 5)`` with a leading batch index.
        rel_roi_points: ``(K, P, 2)`` ``(x, y)`` in ``[0, 1]`` of roi ``k``.

    Returns:
        ``(K, P, 2)`` ``(x, y)`` in image coordinates.
    """
    _check_points("rel_roi_point_to_abs_img_point", "rel_roi_points", rel_roi_points, (3,))
    if not isinstance(rois, Tensor) or rois.dim() != 2 or rois.shape[1] not in (4, 5):
        found = tuple(rois.shape) if isinstance(rois, Tensor) else type(rois).__name__
        raise ValueError(
            f"mmcv.ops.rel_roi_point_to_abs_img_point: rois must be (K, 4) or (K, 5), got {found}"
        )
    if rois.shape[0] != rel_roi_points.shape[0]:
        raise ValueError(
            "mmcv.ops.rel_roi_point_to_abs_img_point: rel_roi_points must have one row per roi "
            f"({rois.shape[0]}), got {rel_roi_points.shape[0]}"
        )
    with torch.no_grad():
        boxes = rois[:, -4:]
        xs = rel_roi_points[:, :, 0] * (boxes[:, None, 2] - boxes[:, None, 0]) + boxes[:, None, 0]
        ys = rel_roi_points[:, :, 1] * (boxes[:, None, 3] - boxes[:, None, 1]) + boxes[:, None, 1]
        return torch.stack([xs, ys], dim=2)


def get_shape_from_feature_map(x: Tensor) -> Tensor:
    """``(1, 1, 2)`` float32 ``(W, H)`` of an ``(N, C, H, W)`` map, on its device."""
    if x.dim() != 4:
        raise ValueError(
            f"mmcv.ops.get_shape_from_feature_map: x must be (N, C, H, W), got {tuple(x.shape)}"
        )
    return torch.tensor([x.shape[3], x.shape[2]], dtype=torch.float32, device=x.device).view(
        1, 1, 2
    )


def abs_img_point_to_rel_img_point(
    abs_img_points: Tensor, img: Union[Sequence[int], Tensor], spatial_scale: float = 1.0
) -> Tensor:
    """Absolute image points -> ``[0, 1]`` coordinates of a map.

    Args:
        abs_img_points: ``(K, P, 2)`` ``(x, y)`` in image coordinates.
        img: ``(height, width)`` of the map (a tuple, e.g. ``tensor.shape[2:]``), or an
            ``(N, C, H, W)`` map.
        spatial_scale: Factor from image to map coordinates.

    Returns:
        ``(K, P, 2)``: ``abs_img_points / (W, H) * spatial_scale``.
    """
    if isinstance(img, Tensor):
        scale = get_shape_from_feature_map(img)
    elif isinstance(img, (tuple, list)) and len(img) == 2:
        h, w = img
        scale = torch.tensor([w, h], dtype=torch.float32, device=abs_img_points.device)
        scale = scale.view(1, 1, 2)
    else:
        raise TypeError(
            "mmcv.ops.abs_img_point_to_rel_img_point: img must be (height, width) or an "
            f"(N, C, H, W) tensor, got {img!r}"
        )
    return abs_img_points / scale * spatial_scale


def rel_roi_point_to_rel_img_point(
    rois: Tensor,
    rel_roi_points: Tensor,
    img: Union[Sequence[int], Tensor],
    spatial_scale: float = 1.0,
) -> Tensor:
    """Points relative to their roi -> ``[0, 1]`` coordinates of a map.

    Args:
        rois: ``(K, 4)`` or ``(K, 5)`` boxes in image coordinates.
        rel_roi_points: ``(K, P, 2)`` ``(x, y)`` in ``[0, 1]`` of roi ``k``.
        img: ``(height, width)`` of the map, or the ``(N, C, H, W)`` map.
        spatial_scale: Factor from image to map coordinates.

    Returns:
        ``(K, P, 2)`` ``(x, y)`` relative to the map.
    """
    abs_img_points = rel_roi_point_to_abs_img_point(rois, rel_roi_points)
    return abs_img_point_to_rel_img_point(abs_img_points, img, spatial_scale)


#: grid_sample's modes, which point_sample passes on.
_MODES = ("bilinear", "nearest", "bicubic")
_PADDING_MODES = ("zeros", "border", "reflection")


def point_sample(
    input: Tensor, points: Tensor, align_corners: bool = False, **kwargs: Any
) -> Tensor:
    """Read maps at points in ``[0, 1] x [0, 1]`` (``grid_sample`` on ``2 * points - 1``).

    Args:
        input: ``(N, C, H, W)`` float maps.
        points: ``(N, P, 2)`` or ``(N, Hg, Wg, 2)`` float ``(x, y)`` in ``[0, 1]``.
        align_corners: As in :func:`torch.nn.functional.grid_sample`.
        **kwargs: More :func:`~torch.nn.functional.grid_sample` arguments (``mode``,
            ``padding_mode``).

    Returns:
        ``(N, C, P)`` or ``(N, C, Hg, Wg)``. Where ``input`` and ``points`` have different
        float dtypes, both are promoted (``grid_sample`` itself requires equal dtypes), and
        so is the result. Under ONNX export, as mmcv without its custom ops, the sampling
        is :func:`bilinear_grid_sample` and ``kwargs`` are ignored. A map without rows
        or columns reads 0 at every point. A NaN point reads NaN, as ``grid_sample``
        (mmcv's too) gives.

    Raises:
        TypeError: ``input`` or ``points`` is not floating point.
        ValueError: shapes or devices that do not fit (batch sizes included).
    """
    _check_points("point_sample", "points", points, (3, 4))
    if isinstance(input, Tensor) and not input.is_floating_point():
        # grid_sample refuses it too; the promotion below would read it silently as float.
        raise TypeError(f"mmcv.ops.point_sample: input must be floating point, got {input.dtype}")
    if not isinstance(input, Tensor) or input.dim() != 4:
        found = tuple(input.shape) if isinstance(input, Tensor) else type(input).__name__
        raise ValueError(f"mmcv.ops.point_sample: input must be (N, C, H, W), got {found}")
    if points.shape[0] != input.shape[0] or points.device != input.device:
        raise ValueError(
            f"mmcv.ops.point_sample: points must have input's batch size {input.shape[0]} and "
            f"device {input.device}, found {tuple(points.shape)} on {points.device}"
        )
    for name, allowed in (("mode", _MODES), ("padding_mode", _PADDING_MODES)):
        if name in kwargs and kwargs[name] not in allowed:
            raise ValueError(
                f"mmcv.ops.point_sample: {name} must be one of {allowed}, found {kwargs[name]!r}"
            )
    squeeze = points.dim() == 3
    grid = denormalize(points[:, :, None, :] if squeeze else points)
    if grid.dtype != input.dtype:
        dtype = torch.promote_types(grid.dtype, input.dtype)
        input, grid = input.to(dtype), grid.to(dtype)
    if input.shape[2] == 0 or input.shape[3] == 0:
        # A map without rows or columns reads 0 everywhere (grid_sample refuses it).
        zeros = input.flatten(2).sum(-1)[:, :, None, None]
        out = zeros.expand(*input.shape[:2], *grid.shape[1:3])
        return out[..., 0] if squeeze else out
    if torch.onnx.is_in_onnx_export():
        out = bilinear_grid_sample(input, grid, align_corners=align_corners)
    else:
        out = F.grid_sample(input, grid, align_corners=align_corners, **kwargs)
    return out[..., 0] if squeeze else out


class SimpleRoIAlign(nn.Module):
    """PointRend's RoI align: each bin is the bilinear read at its centre (one sample).

    Args:
        output_size: ``(h, w)`` bins, or one int.
        spatial_scale: Factor from box to feature coordinates, positive.
        aligned: ``True``: sample with ``align_corners=False``; ``False``: mmdet's legacy
            mode, ``align_corners=True``.

    Raises:
        TypeError: ``output_size`` or ``spatial_scale`` of a wrong type.
        ValueError: A size or scale that is not positive.
    """

    def __init__(
        self, output_size: Union[int, Sequence[int]], spatial_scale: float, aligned: bool = True
    ) -> None:
        super().__init__()
        self.output_size = size_pair("SimpleRoIAlign", output_size)
        self.spatial_scale = spatial_scale_value("SimpleRoIAlign", spatial_scale)
        self.use_torchvision = False  # as mmcv's, read by code that handles every RoI layer
        self.aligned = aligned

    def forward(self, features: Tensor, rois: Tensor) -> Tensor:
        """``(N, C, H, W)`` maps, ``(K, 5)`` rois -> ``(K, C, h, w)``, in the rois' order.

        Raises:
            TypeError: ``features`` not floating point, ``rois`` not real-valued.
            ValueError: ``rois`` not ``(K, 5)`` (``(K, 4)`` boxes have no batch index),
                on another device, non-finite (on the CPU), or a batch index outside
                ``[0, N)``.
        """
        check_roi_inputs("SimpleRoIAlign", features, rois)
        num_rois, channels = rois.shape[0], features.shape[1]
        if num_rois == 0:  # still part of the graph: backward goes through it
            return features[:0].reshape(0, channels, *self.output_size)
        rel_roi_points = generate_grid(num_rois, self.output_size, device=rois.device)
        batch = rois[:, 0].long()
        pieces, order = [], []
        for image in range(features.shape[0]):
            inds = torch.nonzero(batch == image).flatten()
            if inds.numel() == 0:
                continue
            feat = features[image : image + 1]
            points = rel_roi_point_to_rel_img_point(
                rois[inds], rel_roi_points[inds], feat, self.spatial_scale
            )
            sampled = point_sample(feat, points[None], align_corners=not self.aligned)
            pieces.append(sampled[0].transpose(0, 1))  # (k, C, h * w)
            order.append(inds)
        inds = torch.cat(order) if order else batch[:0]
        if inds.numel() != num_rois:  # only off the CPU: check_roi_inputs looked there
            raise ValueError(
                f"mmcv.ops.SimpleRoIAlign: rois[:, 0] must be batch indices in "
                f"[0, {features.shape[0]})"
            )
        point_feats = torch.cat(pieces)[torch.argsort(inds)]
        return point_feats.reshape(num_rois, channels, *self.output_size)

    def __repr__(self) -> str:
        # mmcv's string, unclosed bracket included.
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, "
            f"spatial_scale={self.spatial_scale}"
        )
