"""RoI Align's entry points of ``mmcv._ext`` on :func:`mmpar.compat.ops.roi_align.roi_align`.

mmcv-full 1.7.2's pybind signatures:

* ``roi_align_forward(input, rois, output, argmax_y, argmax_x, aligned_height,
  aligned_width, spatial_scale, sampling_ratio, pool_mode, aligned)``: writes ``output``;
* ``roi_align_backward(grad_output, rois, argmax_y, argmax_x, grad_input, aligned_height,
  aligned_width, spatial_scale, sampling_ratio, pool_mode, aligned)``: adds into
  ``grad_input`` (the kernel's atomic adds; mmcv's wrapper passes zeros).

``pool_mode`` 1 (avg, mmdet's) is supplied; 0 (max) is an
:class:`~mmpar.compat.ops.backend.UnsupportedOpError`: its backward reads the sampling
positions of the maxima, ``argmax_y``/``argmax_x``, which mmpar's op does not expose.
RoI Align is linear in ``input``, so the backward, which is not given it, takes mmpar's
gradient at zero input. NaN/inf: as mmpar's op. Differences from mmcv-full: runs on any
device; no max mode.
"""

from __future__ import annotations

from typing import Callable, Dict

from torch import Tensor

from mmpar.compat.mmcv_ext.calls import grads_of, where, write
from mmpar.compat.ops.backend import UnsupportedOpError
from mmpar.compat.ops.roi_align import roi_align

__all__ = ["ENTRY_POINTS", "roi_align_backward", "roi_align_forward"]


def _align(
    function: str,
    size: tuple,
    spatial_scale: float,
    sampling_ratio: int,
    pool_mode: int,
    aligned: bool,
) -> Callable[[Tensor, Tensor], Tensor]:
    if pool_mode != 1:
        raise UnsupportedOpError(
            f"{where(function)}: pool_mode must be 1 (avg); mmpar does not supply {pool_mode!r}"
            " (max)"
        )

    def forward(input: Tensor, rois: Tensor) -> Tensor:
        return roi_align(input, rois, size, spatial_scale, sampling_ratio, "avg", bool(aligned))

    return forward


def roi_align_forward(
    input: Tensor,
    rois: Tensor,
    output: Tensor,
    argmax_y: Tensor,
    argmax_x: Tensor,
    aligned_height: int,
    aligned_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    pool_mode: int,
    aligned: bool,
) -> None:
    """``output`` ``(K, C, aligned_height, aligned_width)`` <- RoI Align of ``input``
    ``(N, C, H, W)`` over ``rois`` ``(K, 5)``; ``argmax_y``/``argmax_x`` (max mode only)
    are not written."""
    del argmax_y, argmax_x
    align = _align(
        "roi_align_forward",
        (aligned_height, aligned_width),
        spatial_scale,
        sampling_ratio,
        pool_mode,
        aligned,
    )
    write("roi_align_forward", "output", output, align(input, rois).detach())


def roi_align_backward(
    grad_output: Tensor,
    rois: Tensor,
    argmax_y: Tensor,
    argmax_x: Tensor,
    grad_input: Tensor,
    aligned_height: int,
    aligned_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    pool_mode: int,
    aligned: bool,
) -> None:
    """``grad_input`` ``(N, C, H, W)`` += RoI Align's gradient for ``grad_output``."""
    del argmax_y, argmax_x
    align = _align(
        "roi_align_backward",
        (aligned_height, aligned_width),
        spatial_scale,
        sampling_ratio,
        pool_mode,
        aligned,
    )
    zeros = grad_output.new_zeros(grad_input.shape)
    (grad,) = grads_of(align, (zeros, rois), grad_output, (0,))
    write("roi_align_backward", "grad_input", grad_input, grad, add=True)


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "roi_align_backward": roi_align_backward,
    "roi_align_forward": roi_align_forward,
}
