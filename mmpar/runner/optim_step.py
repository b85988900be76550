"""A training iteration's forward and backward, and every ``cumulative_iters`` batches a step.

Brings together what ``optimizer_config`` and ``amp`` ask for: autocast around
``train_step``, the loss in float32, divided for gradient accumulation, scaled
for float16, the first backward passes of a window in DDP's ``no_sync()`` so
that gradients are reduced once per step, gradient clipping on unscaled
gradients, and the optimizer step through the loss scaler.
"""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager, Dict, Mapping, Optional

import torch
import torch.distributed as dist
from torch import nn

from mmpar.dist import is_distributed
from mmpar.module_wrappers import unwrap_module
from mmpar.runner.accumulate import (
    cumulative_iters,
    is_step_iter,
    is_window_start,
    loss_divisor,
)
from mmpar.runner.amp import autocast, check_amp_device, make_scaler, resolve_amp, static_scale

__all__ = ["OptimizerStepper", "build_stepper", "describe", "resolve_precision"]


class OptimizerStepper:
    """Runs ``model.train_step`` and the backward pass of each batch, and steps the optimizer.

    Args:
        model: The wrapped model (``MMDataParallel`` or ``MMDistributedDataParallel``).
        optimizer: Its optimizer.
        grad_clip: ``clip_grad_norm_`` arguments (``max_norm``, ``norm_type``), or None.
        cumulative_iters: Batches per optimizer step (see :mod:`mmpar.runner.accumulate`).
        amp_dtype: Autocast dtype of the forward pass; None for float32.
        device: Where the model runs (the autocast device type).
        scaler: A ``torch.amp.GradScaler`` for float16, else None.
        static_scale: Reset the scaler to this scale after every step (a static loss scale).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        grad_clip: Optional[Mapping[str, Any]] = None,
        cumulative_iters: int = 1,
        amp_dtype: Optional[torch.dtype] = None,
        device: torch.device = torch.device("cpu"),
        scaler: Optional["torch.amp.GradScaler"] = None,
        static_scale: Optional[float] = None,
    ) -> None:
        self.model, self.optimizer = model, optimizer
        self.grad_clip = dict(grad_clip) if grad_clip else None
        self.cumulative_iters = cumulative_iters
        self.amp_dtype, self.device = amp_dtype, device
        self.scaler, self.static_scale = scaler, static_scale
        #: Whether gradients of an unfinished window are waiting for the next step.
        self.pending = False

    def _sync_context(self, step: bool) -> ContextManager[Any]:
        no_sync = getattr(self.model, "no_sync", None)
        if step or no_sync is None:
            return contextlib.nullcontext()
        return no_sync()

    def train_iter(self, data: Any, it: int, total: int) -> Dict[str, Any]:
        """Forward and backward of iteration ``it`` (0-based) of a run of ``total`` iterations.

        Returns:
            ``train_step``'s outputs, with ``loss`` in float32 (undivided: what is logged).

        Raises:
            KeyError: ``train_step`` returned no ``loss``.
        """
        n = self.cumulative_iters
        if is_window_start(it, n):
            self.optimizer.zero_grad()
        step = is_step_iter(it, total, n)
        with self._sync_context(step):
            with autocast(self.amp_dtype, self.device):
                outputs = self.model.train_step(data, self.optimizer)
            if "loss" not in outputs:
                raise KeyError(f"train_step returned no 'loss' (keys: {sorted(outputs)})")
            outputs["loss"] = loss = outputs["loss"].float()
            divisor = loss_divisor(it, total, n)
            if divisor != 1:
                loss = loss / divisor
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        if step:
            self._step()
        self.pending = not step
        return outputs

    def _step(self) -> None:
        if self.scaler is not None and self.grad_clip:
            self.scaler.unscale_(self.optimizer)
        if self.grad_clip:
            params = [p for p in self.model.parameters() if p.requires_grad and p.grad is not None]
            torch.nn.utils.clip_grad_norm_(params, **self.grad_clip)
        if self.scaler is None:
            self.optimizer.step()
            return
        self.scaler.step(self.optimizer)  # skipped when the gradients hold inf/nan
        self.scaler.update(self.static_scale)

    def state_dict(self) -> Optional[Dict[str, Any]]:
        """What a checkpoint keeps (the loss scaler's state), or None without a scaler."""
        return None if self.scaler is None else dict(scaler=self.scaler.state_dict())

    def pending_grads(self) -> Optional[Dict[str, torch.Tensor]]:
        """The gradients of an unfinished window, by parameter name (on the CPU), or None.

        In a process group this is a collective, to be called on every rank: each
        rank's pending gradients are first replaced by their mean over the ranks (in
        place), so that the one copy a checkpoint keeps serves every rank on resume.
        DDP averages the gradients at the window's last backward pass anyway, so the
        step is the same, up to the order of the float additions.
        """
        if not self.pending:
            return None
        named = [
            (name, p)
            for name, p in unwrap_module(self.model).named_parameters()
            if p.grad is not None
        ]
        if is_distributed():
            world = dist.get_world_size()
            for _, p in named:
                dist.all_reduce(p.grad)
                p.grad.div_(world)
        return {name: p.grad.detach().cpu().clone() for name, p in named}

    def load_pending_grads(self, grads: Mapping[str, torch.Tensor]) -> None:
        """Put :meth:`pending_grads`' output back, so that the open window goes on.

        Raises:
            ValueError: a name that is not a parameter of the model, or a shape that
                differs from its parameter's.
        """
        params = dict(unwrap_module(self.model).named_parameters())
        for name, grad in grads.items():
            p = params.get(name)
            if p is None or p.shape != grad.shape:
                found = "no such parameter" if p is None else f"parameter shape {tuple(p.shape)}"
                raise ValueError(
                    f"accumulated_grads[{name!r}]: expected the gradient of a parameter of the "
                    f"model, got shape {tuple(grad.shape)} ({found})"
                )
            p.grad = grad.to(device=p.device, dtype=p.dtype, copy=True)  # backward adds in place
        self.pending = True

    def load_state_dict(self, state: Optional[Mapping[str, Any]]) -> bool:
        """Restore :meth:`state_dict`'s output; returns whether a scaler state was loaded."""
        if self.scaler is None or not state or "scaler" not in state:
            return False
        self.scaler.load_state_dict(dict(state["scaler"]))
        return True


def resolve_precision(cfg: Mapping[str, Any], device: torch.device) -> Optional[torch.dtype]:
    """The autocast dtype a config asks for on ``device`` (None: float32), with its
    ``optimizer_config`` checked too: call it early, so that a bad option fails first.

    Raises:
        TypeError, ValueError: a bad ``amp``, ``fp16`` or ``optimizer_config`` (naming the key).
        RuntimeError: the installed torch lacks what the options need.
    """
    cumulative_iters(cfg.get("optimizer_config"))
    settings = resolve_amp(cfg)
    return None if settings is None else check_amp_device(settings, device)


def build_stepper(
    cfg: Mapping[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
) -> OptimizerStepper:
    """The :class:`OptimizerStepper` of a config (``amp``, ``fp16``, ``optimizer_config``)."""
    dtype = resolve_precision(cfg, device)
    settings = resolve_amp(cfg)
    opt_cfg = cfg.get("optimizer_config") or {}
    return OptimizerStepper(
        model,
        optimizer,
        opt_cfg.get("grad_clip"),
        cumulative_iters(opt_cfg),
        dtype,
        device,
        make_scaler(settings, device),
        static_scale(settings),
    )


def describe(stepper: OptimizerStepper) -> str:
    """One log line: the precision and accumulation of a run."""
    if stepper.amp_dtype is None:
        text = "float32"
    else:
        text = f"mixed precision: {str(stepper.amp_dtype).replace('torch.', '')} autocast"
    if stepper.scaler is not None:
        kind = "dynamic" if stepper.static_scale is None else "static"
        text += f", {kind} loss scale {stepper.scaler.get_scale():g}"
    if stepper.cumulative_iters > 1:
        text += f"; gradients accumulated over {stepper.cumulative_iters} batches per step"
    return text
