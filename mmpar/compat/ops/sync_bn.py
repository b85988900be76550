"""mmcv's synchronized batch norm (``mmcv.ops.sync_bn``), with ``torch.distributed``.

In training (and always without running stats) the batch statistics are
synchronized over a process group with two ``all_reduce`` calls, as mmcv-full's
kernels do:

* ``stats_mode='default'``: every rank's per-channel mean, then its variance
  around the synchronized mean, count equally: both are averaged over the
  ranks. Exact for equal per-rank batches; an empty rank counts as mean 0 and
  variance 0.
* ``stats_mode='N'``: each rank's mean and variance are weighted by its batch
  size ``N`` and divided by the total ``N`` of the group, so empty ranks do not
  count (exact where the ranks' spatial sizes agree).

The running statistics follow mmcv: ``running = (1 - m) * running + m * batch``
with the variance made unbiased with the count ``local N * H * W * group
size``, and no update when the whole group's batch is empty. In eval mode with
running statistics it is ``F.batch_norm`` with them.

The backward is autograd's (the ``all_reduce`` calls carry gradients), so the
input gradient is the exact gradient of the total loss of the group. That is
what mmcv's backward kernel computes in ``'default'`` mode, and in ``'N'`` mode
where the ranks' batches are equal; for unequal batches in ``'N'`` mode mmcv's
kernel divides by the local count instead, and this is the exact gradient.
As in mmcv, the gradients of ``weight`` and ``bias`` are averaged over the group
(the DDP average of them is then unchanged).

Unlike mmcv-full, this works without an initialized process group (then the
group has size 1 and it is batch norm), accepts float64 and bfloat16 too, and
reads the group's size at every forward rather than at construction.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.parameter import Parameter

from mmpar.compat.ops.backend import check_int

__all__ = ["SyncBatchNorm", "SyncBatchNormFunction"]

_STATS_MODES = ("default", "N")


class _AllReduceSum(torch.autograd.Function):
    """``all_reduce(SUM)`` whose gradient is the ``all_reduce(SUM)`` of the gradients."""

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, group: Any) -> Tensor:
        ctx.group = group
        out = tensor.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Tensor, None]:
        grad = grad.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _GroupMeanGrad(torch.autograd.Function):
    """Identity whose gradient is averaged over the group (mmcv's weight and bias gradients)."""

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, group: Any, group_size: int) -> Tensor:
        ctx.group, ctx.group_size = group, group_size
        return tensor.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Tensor, None, None]:
        grad = grad.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(grad, group=ctx.group)
        return grad / ctx.group_size, None, None


def _group_sum(local: Tensor, batch_size: int, group: Any, group_size: int, mode: str) -> Tensor:
    """The group's sum of ``local`` (times each rank's batch size in mode ``'N'``)."""
    if mode == "N":
        local = local * batch_size
    return _AllReduceSum.apply(local, group) if group_size > 1 else local


def sync_batch_norm(
    input: Tensor,
    running_mean: Optional[Tensor],
    running_var: Optional[Tensor],
    weight: Optional[Tensor],
    bias: Optional[Tensor],
    momentum: float,
    eps: float,
    group: Any,
    group_size: int,
    stats_mode: str,
) -> Tensor:
    """Batch norm with statistics synchronized over ``group``; updates the running stats.

    Args:
        input: ``(N, C, *)`` float.
        running_mean: (C,) float, updated in place, or ``None``.
        running_var: (C,) float, updated in place, or ``None``.
        weight: (C,) float, or ``None``.
        bias: (C,) float, or ``None``.
        momentum: The running statistics' update factor.
        eps: Added to the variance.
        group: The process group (``None``: the default group).
        group_size: Its size; 1 computes locally, without collectives.
        stats_mode: ``'default'`` or ``'N'`` (see the module's docstring).

    Returns:
        ``(N, C, *)`` in ``input``'s dtype (float16 / bfloat16 are computed in float32).
    """
    if stats_mode not in _STATS_MODES:
        raise ValueError(
            f"mmcv.ops.SyncBatchNorm: stats_mode must be one of {_STATS_MODES}, got {stats_mode!r}"
        )
    compute_dtype = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    batch_size, channels = input.shape[:2]
    x = input.to(compute_dtype).reshape(batch_size, channels, math.prod(input.shape[2:]))
    count = x.size(0) * x.size(2)
    divisor = max(count, 1)  # an empty rank contributes zeros

    # The mean travels with the count of non-empty ranks ('default') or of samples ('N').
    flag = x.new_full((1,), 1.0 if batch_size > 0 else 0.0)
    local = torch.cat([x.sum(dim=(0, 2)) / divisor, flag])
    reduced = _group_sum(local, batch_size, group, group_size, stats_mode)
    total_batch = reduced[-1].detach()
    denominator = total_batch.clamp(min=1) if stats_mode == "N" else group_size
    mean = reduced[:channels] / denominator

    centered = x - mean[:, None]
    local_var = centered.square().sum(dim=(0, 2)) / divisor
    var = _group_sum(local_var, batch_size, group, group_size, stats_mode) / denominator
    out = centered * torch.rsqrt(var + eps)[:, None]

    if weight is not None:
        params = torch.cat([weight, bias]).to(compute_dtype)
        if group_size > 1:
            params = _GroupMeanGrad.apply(params, group, group_size)
        out = out * params[:channels, None] + params[channels:, None]

    if running_mean is not None and running_var is not None:
        with torch.no_grad():
            # No update when the group's whole batch is empty.
            factor = total_batch.clamp(max=1) * momentum
            unbiased_count = count * group_size
            unbiased = var * (unbiased_count / (unbiased_count - 1)) if unbiased_count > 1 else var
            running_mean.copy_(factor * mean + (1 - factor) * running_mean)
            running_var.copy_(factor * unbiased + (1 - factor) * running_var)
    return out.reshape(input.shape).to(input.dtype)


class SyncBatchNormFunction:
    """mmcv's autograd Function's name: ``apply`` is the synchronized batch norm.

    ``apply(input, running_mean, running_var, weight, bias, momentum, eps,
    group, group_size, stats_mode)``, as mmcv's.
    """

    apply = staticmethod(sync_batch_norm)


def _group_size(group: Any) -> int:
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


class SyncBatchNorm(nn.Module):
    """Batch norm whose training statistics are synchronized over a process group.

    mmcv's ``MMSyncBN``: the parameters and buffers (``weight``, ``bias``,
    ``running_mean``, ``running_var``, ``num_batches_tracked``) are named as in
    ``nn.BatchNorm2d``; ``weight`` starts uniform in [0, 1) (mmcv's choice) and
    ``bias`` at 0.

    Args:
        num_features: C, the channels of the ``(N, C, *)`` input.
        eps: Added to the variance.
        momentum: The running statistics' update factor; ``None``: a
            cumulative average over the batches seen.
        affine: Whether there are ``weight`` and ``bias``.
        track_running_stats: Whether there are running statistics (without
            them, batch statistics are used in eval mode too).
        group: The process group that synchronizes (``None``: the default one).
        stats_mode: ``'default'`` (ranks count equally) or ``'N'`` (ranks
            count by their batch size), see :mod:`mmpar.compat.ops.sync_bn`.

    Raises:
        TypeError: a ``num_features`` that is not an int.
        ValueError: a ``num_features`` below 1, or another ``stats_mode``.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: Optional[float] = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        group: Optional[Any] = None,
        stats_mode: str = "default",
    ) -> None:
        super().__init__()
        num_features = check_int("mmcv.ops.SyncBatchNorm", "num_features", num_features, 1)
        if stats_mode not in _STATS_MODES:
            raise ValueError(
                f"mmcv.ops.SyncBatchNorm: stats_mode must be one of {_STATS_MODES}, "
                f"got {stats_mode!r}"
            )
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if group is None and dist.is_available() and dist.is_initialized():
            group = dist.group.WORLD
        self.group = group
        self.stats_mode = stats_mode
        if affine:
            self.weight = Parameter(torch.empty(num_features))
            self.bias = Parameter(torch.empty(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    @property
    def group_size(self) -> int:
        """The size of the synchronizing group now (1 without an initialized process group)."""
        return _group_size(self.group)

    def reset_running_stats(self) -> None:
        """Running mean 0, running variance 1, no batches tracked."""
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        """The running statistics reset; ``weight`` uniform in [0, 1), ``bias`` 0."""
        self.reset_running_stats()
        if self.affine:
            with torch.no_grad():
                self.weight.uniform_()
                self.bias.zero_()

    def forward(self, input: Tensor) -> Tensor:
        """``(N, C, *) -> (N, C, *)``, normalized per channel.

        Raises:
            TypeError: an input that is not a floating-point tensor.
            ValueError: an input of fewer than 2 dimensions, or not ``num_features`` channels.
        """
        op = "mmcv.ops.SyncBatchNorm"
        if not isinstance(input, Tensor) or not input.is_floating_point():
            found = input.dtype if isinstance(input, Tensor) else type(input).__name__
            raise TypeError(f"{op}: input must be a floating-point tensor, found {found}")
        if input.dim() < 2:
            raise ValueError(f"{op}: expected at least 2D input, got {input.dim()}D input")
        if input.size(1) != self.num_features:
            raise ValueError(
                f"{op}: input must have num_features = {self.num_features} channels "
                f"(dim 1), got shape {tuple(input.shape)}"
            )
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked += 1
            if self.momentum is None:  # a cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        if self.training or not self.track_running_stats:
            return sync_batch_norm(
                input,
                self.running_mean,
                self.running_var,
                self.weight,
                self.bias,
                factor,
                self.eps,
                self.group,
                self.group_size,
                self.stats_mode,
            )
        return F.batch_norm(
            input,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            False,
            factor,
            self.eps,
        )

    def __repr__(self) -> str:
        # mmcv's, its missing space after "group_size=...," included.
        return (
            f"{type(self).__name__}({self.num_features}, eps={self.eps}, "
            f"momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}, "
            f"group_size={self.group_size},stats_mode={self.stats_mode})"
        )
