"""Deformable convolution entry points of ``mmcv._ext`` on
:func:`mmpar.compat.ops.deform_conv.deform_conv2d` (DCNv1) and
:func:`mmpar.compat.ops.modulated_deform_conv.modulated_deform_conv2d` (DCNv2).

mmcv-full 1.7.2's pybind signatures (``columns`` and ``ones`` are the kernels' scratch
buffers: accepted, not written):

* ``deform_conv_forward(input, weight, offset, output, columns, ones, kW, kH, dW, dH,
  padW, padH, dilationW, dilationH, group, deformable_group, im2col_step)``: writes
  ``output``;
* ``deform_conv_backward_input(input, offset, gradOutput, gradInput, gradOffset, weight,
  columns, kW, ..., im2col_step)``: adds into ``gradInput`` (the col2im kernel's atomic
  adds) and writes ``gradOffset``;
* ``deform_conv_backward_parameters(input, offset, gradOutput, gradWeight, columns,
  ones, kW, ..., scale, im2col_step)``: adds ``scale`` times the gradient into
  ``gradWeight`` (the kernel's ``addmm_``);
* ``modulated_deform_conv_forward(input, weight, bias, ones, offset, mask, output,
  columns, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
  group, deformable_group, with_bias)``: writes ``output``;
* ``modulated_deform_conv_backward(input, weight, bias, ones, offset, mask, columns,
  grad_input, grad_weight, grad_bias, grad_offset, grad_mask, grad_output, kernel_h, ...,
  with_bias)``: adds into ``grad_input``, ``grad_weight`` and ``grad_bias`` (``with_bias``)
  and writes ``grad_offset`` and ``grad_mask``.

The kernel sizes must match ``weight``'s (a ``ValueError`` here). NaN/inf: as mmpar's ops.
Differences from mmcv-full: runs on any device.
"""

# ruff: noqa: N803 - the C++ parameters' names (kW, gradOutput, ...)
from __future__ import annotations

from typing import Callable, Dict, Optional

from torch import Tensor

from mmpar.compat.mmcv_ext.calls import check_sizes, grads_of, write
from mmpar.compat.ops.deform_conv import deform_conv2d
from mmpar.compat.ops.modulated_deform_conv import modulated_deform_conv2d

__all__ = [
    "ENTRY_POINTS",
    "deform_conv_backward_input",
    "deform_conv_backward_parameters",
    "deform_conv_forward",
    "modulated_deform_conv_backward",
    "modulated_deform_conv_forward",
]


def _dcn(
    function: str,
    weight: Tensor,
    kh: int,
    kw: int,
    geometry: tuple,
    groups: tuple,
    im2col_step: int,
) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """``f(input, offset, weight)``: DCNv1 with mmcv's per-axis arguments, ``geometry`` =
    ``(dH, dW, padH, padW, dilationH, dilationW)``, ``groups`` = ``(group, deformable_group)``."""
    check_sizes(function, kH=(kh, weight.shape[2]), kW=(kw, weight.shape[3]))
    dh, dw, ph, pw, ih, iw = geometry

    def forward(input: Tensor, offset: Tensor, weight: Tensor) -> Tensor:
        return deform_conv2d(
            input, offset, weight, (dh, dw), (ph, pw), (ih, iw), *groups, False, im2col_step
        )

    return forward


def deform_conv_forward(
    input: Tensor,
    weight: Tensor,
    offset: Tensor,
    output: Tensor,
    columns: Tensor,
    ones: Tensor,
    kW: int,
    kH: int,
    dW: int,
    dH: int,
    padW: int,
    padH: int,
    dilationW: int,
    dilationH: int,
    group: int,
    deformable_group: int,
    im2col_step: int,
) -> None:
    """``output`` ``(N, C_out, H_out, W_out)`` <- DCNv1 of ``input`` ``(N, C_in, H, W)``
    with ``offset`` ``(N, 2 * deformable_group * kH * kW, H_out, W_out)`` and ``weight``
    ``(C_out, C_in / group, kH, kW)``."""
    del columns, ones
    conv = _dcn(
        "deform_conv_forward",
        weight,
        kH,
        kW,
        (dH, dW, padH, padW, dilationH, dilationW),
        (group, deformable_group),
        im2col_step,
    )
    write("deform_conv_forward", "output", output, conv(input, offset, weight).detach())


def deform_conv_backward_input(
    input: Tensor,
    offset: Tensor,
    gradOutput: Tensor,
    gradInput: Tensor,
    gradOffset: Tensor,
    weight: Tensor,
    columns: Tensor,
    kW: int,
    kH: int,
    dW: int,
    dH: int,
    padW: int,
    padH: int,
    dilationW: int,
    dilationH: int,
    group: int,
    deformable_group: int,
    im2col_step: int,
) -> None:
    """``gradInput`` += and ``gradOffset`` <- DCNv1's gradients for ``gradOutput``."""
    del columns
    conv = _dcn(
        "deform_conv_backward_input",
        weight,
        kH,
        kW,
        (dH, dW, padH, padW, dilationH, dilationW),
        (group, deformable_group),
        im2col_step,
    )
    grad_in, grad_off = grads_of(conv, (input, offset, weight), gradOutput, (0, 1))
    write("deform_conv_backward_input", "gradInput", gradInput, grad_in, add=True)
    write("deform_conv_backward_input", "gradOffset", gradOffset, grad_off)


def deform_conv_backward_parameters(
    input: Tensor,
    offset: Tensor,
    gradOutput: Tensor,
    gradWeight: Tensor,
    columns: Tensor,
    ones: Tensor,
    kW: int,
    kH: int,
    dW: int,
    dH: int,
    padW: int,
    padH: int,
    dilationW: int,
    dilationH: int,
    group: int,
    deformable_group: int,
    scale: float,
    im2col_step: int,
) -> None:
    """``gradWeight`` += ``scale`` times DCNv1's weight gradient for ``gradOutput``."""
    del columns, ones
    conv = _dcn(
        "deform_conv_backward_parameters",
        gradWeight,
        kH,
        kW,
        (dH, dW, padH, padW, dilationH, dilationW),
        (group, deformable_group),
        im2col_step,
    )
    # The forward's weight is not given; DCNv1 is linear in it, so any weight (zeros) serves.
    (grad,) = grads_of(
        conv, (input, offset, gradWeight.new_zeros(gradWeight.shape)), gradOutput, (2,)
    )
    write("deform_conv_backward_parameters", "gradWeight", gradWeight, grad * scale, add=True)


def _mdcn(
    function: str, weight: Tensor, kernel: tuple, geometry: tuple, groups: tuple, with_bias: bool
) -> Callable[..., Tensor]:
    """``f(input, offset, mask, weight, bias)``: DCNv2 with mmcv's per-axis arguments."""
    check_sizes(
        function, kernel_h=(kernel[0], weight.shape[2]), kernel_w=(kernel[1], weight.shape[3])
    )
    sh, sw, ph, pw, dh, dw = geometry

    def forward(
        input: Tensor, offset: Tensor, mask: Tensor, weight: Tensor, bias: Optional[Tensor]
    ) -> Tensor:
        return modulated_deform_conv2d(
            input,
            offset,
            mask,
            weight,
            bias if with_bias else None,
            (sh, sw),
            (ph, pw),
            (dh, dw),
            *groups,
        )

    return forward


def modulated_deform_conv_forward(
    input: Tensor,
    weight: Tensor,
    bias: Tensor,
    ones: Tensor,
    offset: Tensor,
    mask: Tensor,
    output: Tensor,
    columns: Tensor,
    kernel_h: int,
    kernel_w: int,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dilation_h: int,
    dilation_w: int,
    group: int,
    deformable_group: int,
    with_bias: bool,
) -> None:
    """``output`` <- DCNv2 of ``input`` with ``offset``, ``mask`` ``(N, deformable_group *
    kernel_h * kernel_w, H_out, W_out)``, ``weight`` and, ``with_bias``, ``bias``."""
    del ones, columns
    conv = _mdcn(
        "modulated_deform_conv_forward",
        weight,
        (kernel_h, kernel_w),
        (stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w),
        (group, deformable_group),
        with_bias,
    )
    write(
        "modulated_deform_conv_forward",
        "output",
        output,
        conv(input, offset, mask, weight, bias).detach(),
    )


def modulated_deform_conv_backward(
    input: Tensor,
    weight: Tensor,
    bias: Tensor,
    ones: Tensor,
    offset: Tensor,
    mask: Tensor,
    columns: Tensor,
    grad_input: Tensor,
    grad_weight: Tensor,
    grad_bias: Tensor,
    grad_offset: Tensor,
    grad_mask: Tensor,
    grad_output: Tensor,
    kernel_h: int,
    kernel_w: int,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dilation_h: int,
    dilation_w: int,
    group: int,
    deformable_group: int,
    with_bias: bool,
) -> None:
    """DCNv2's gradients for ``grad_output``: added into ``grad_input``, ``grad_weight``
    and (``with_bias``) ``grad_bias``; written into ``grad_offset`` and ``grad_mask``."""
    del ones, columns
    function = "modulated_deform_conv_backward"
    conv = _mdcn(
        function,
        weight,
        (kernel_h, kernel_w),
        (stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w),
        (group, deformable_group),
        with_bias,
    )
    wrt = (0, 1, 2, 3, 4) if with_bias else (0, 1, 2, 3)
    grads = grads_of(conv, (input, offset, mask, weight, bias), grad_output, wrt)
    write(function, "grad_input", grad_input, grads[0], add=True)
    write(function, "grad_offset", grad_offset, grads[1])
    write(function, "grad_mask", grad_mask, grads[2])
    write(function, "grad_weight", grad_weight, grads[3], add=True)
    if with_bias:
        write(function, "grad_bias", grad_bias, grads[4], add=True)


#: mmcv-full's entry-point name -> mmpar's function.
ENTRY_POINTS: Dict[str, Callable[..., object]] = {
    "deform_conv_backward_input": deform_conv_backward_input,
    "deform_conv_backward_parameters": deform_conv_backward_parameters,
    "deform_conv_forward": deform_conv_forward,
    "modulated_deform_conv_backward": modulated_deform_conv_backward,
    "modulated_deform_conv_forward": modulated_deform_conv_forward,
}
