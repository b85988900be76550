"""torch.compile for training and testing, in place: checkpoint keys stay unchanged.

``compile = True`` or ``compile = dict(targets=[...], **options)`` (``--compile``),
``options`` going to ``torch.compile`` (``backend``, ``mode``, ``dynamic``,
``fullgraph``, ``options``). What is compiled, the *targets*:

* ``""``: the model itself, with ``nn.Module.compile()``: ``train_step``'s
  ``self(...)`` runs the compiled ``forward``;
* a submodule's name (``"backbone"``): that submodule, with ``nn.Module.compile()``;
* a method's name (``"extract_feat"``): the model's method, compiled with
  ``torch.compile`` and set on the instance, so that the model's own calls reach it.

The default targets are the model's ``compile_targets`` attribute when it has
one, else ``[""]``. A detector's ``forward`` takes per-image lists (boxes of
varying counts, metas of varying sizes): compiled whole, it recompiles for
each new list shape. Its backbone and heads see one image tensor of fixed rank,
which ``dynamic=True`` (the default here) keeps to a few compilations per
run; TinyDet's ``compile_targets`` is ``("extract",)`` for that reason.

torch's messages about graph breaks and recompilations go, each distinct one
once, to the run's logger; :class:`CompileMonitor` counts them.

Parameters stay where they are, so ``state_dict()`` keys are those of the eager
model (no ``_orig_mod.``): a compiled run's checkpoint loads in an eager model.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Dict, List, Mapping, Optional, Set

import torch
from torch import nn

__all__ = ["CompileMonitor", "compile_model", "resolve_compile"]

_OPTIONS = ("backend", "mode", "dynamic", "fullgraph", "options")
_KINDS = {"Recompiling function": "recompile", "Graph break": "graph break"}


def resolve_compile(value: Any) -> Optional[Dict[str, Any]]:
    """The config's ``compile`` as ``dict(targets=None | [...], **options)``, or None (off).

    Raises:
        TypeError: not None, a bool or a dict; ``targets`` not a list of names.
        ValueError: an unknown key.
    """
    if value is None or value is False:
        return None
    if value is True:
        return dict(targets=None)
    if not isinstance(value, Mapping):
        raise TypeError(
            f"compile: expected None, a bool or dict(targets=..., backend=..., dynamic=...), "
            f"got {type(value).__name__} {value!r}"
        )
    unknown = sorted(set(value) - set(_OPTIONS) - {"targets"})
    if unknown:
        raise ValueError(
            f"compile: unknown keys {unknown}; expected among {['targets', *_OPTIONS]}"
        )
    targets = value.get("targets")
    if targets is not None and (
        isinstance(targets, str) or not all(isinstance(t, str) for t in targets)
    ):
        raise TypeError(f"compile.targets: expected a list of names, got {targets!r}")
    return dict(value, targets=None if targets is None else list(targets))


def _check_torch() -> None:
    if not hasattr(nn.Module, "compile") or not hasattr(torch, "compile"):
        raise RuntimeError(
            "compile: needs nn.Module.compile (torch >= 2.2); "
            f"installed torch is {torch.__version__}"
        )


def compile_model(model: nn.Module, settings: Mapping[str, Any]) -> List[str]:
    """Compile the targets of ``settings`` (from :func:`resolve_compile`) in ``model``, in place.

    Call it on the unwrapped model, before wrapping it.

    Returns:
        What was compiled, e.g. ``["TinyDet.extract"]``.

    Raises:
        ValueError: a target names neither a submodule nor a method of ``model``.
        RuntimeError: the installed torch has no ``nn.Module.compile``.
    """
    _check_torch()
    options = {k: v for k, v in settings.items() if k != "targets"}
    options.setdefault("dynamic", True)
    targets = settings.get("targets")
    if targets is None:
        targets = list(getattr(model, "compile_targets", None) or [""])
    modules = dict(model.named_modules())
    done = []
    for target in targets:
        name = f"{type(model).__name__}.{target}" if target else type(model).__name__
        if target in modules:
            modules[target].compile(**options)
        elif callable(getattr(model, target, None)):
            # An instance attribute: the model's own calls reach it; its parameters stay put.
            setattr(model, target, torch.compile(getattr(model, target), **options))
        else:
            raise ValueError(
                f"compile.targets: {target!r} is neither a submodule nor a method of "
                f"{type(model).__name__}"
            )
        done.append(name)
    return done


def _kind(record: logging.LogRecord) -> Optional[str]:
    """``"recompile"``, ``"graph break"``, or None for torch's other messages."""
    text = record.getMessage().lstrip()
    return next((k for p, k in _KINDS.items() if text.startswith(p)), None)


class CompileMonitor(logging.Handler):
    """Turns torch's graph-break and recompilation messages into one log line each.

    :meth:`install` enables those messages (``torch._logging.set_logs``) and keeps
    torch's own handlers from printing them; each distinct message (its first
    line, numbers aside) then goes once to ``logger``. ``counts`` has how many
    of each kind torch reported.
    """

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logging.DEBUG)
        self.target = logger
        self.counts = {"recompile": 0, "graph break": 0}
        self.seen: Set[str] = set()

        self.silence = logging.Filter()
        self.silence.filter = lambda record: _kind(record) is None  # type: ignore[method-assign]

    def emit(self, record: logging.LogRecord) -> None:
        kind = _kind(record)
        if kind is None:
            return
        self.counts[kind] += 1
        lines = [ln.strip() for ln in record.getMessage().strip().splitlines() if ln.strip()]
        reason = next((ln for ln in lines[1:] if ln.startswith("-") or "Reason" in ln), "")
        reason = reason.split("  #")[0][:160]  # the guard or reason, without torch's source notes
        key = re.sub(r"\d+", "N", f"{lines[0]} {reason}")  # once per place and reason
        if key not in self.seen:
            self.seen.add(key)
            self.target.info(f"torch.compile {kind}: {lines[0]} {reason}".rstrip())

    def install(self) -> "CompileMonitor":
        """Start listening (graph breaks and recompilations of every compiled function)."""
        torch._logging.set_logs(recompiles=True, graph_breaks=True)
        root = logging.getLogger("torch._dynamo")
        for handler in root.handlers:
            handler.addFilter(self.silence)
        root.addHandler(self)
        return self

    def remove(self) -> None:
        """Stop listening."""
        root = logging.getLogger("torch._dynamo")
        root.removeHandler(self)
        for handler in root.handlers:
            handler.removeFilter(self.silence)
