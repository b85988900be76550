"""Mixed precision: which dtype autocast runs in, and a loss scaler for float16.

The config says it in one of three ways (mmdet 2.x's two, and mmpar's own)::

    amp = dict(dtype="bfloat16" | "float16" | None, loss_scale="dynamic" | 512.0 | dict(...))
    fp16 = dict(loss_scale=512.0)                                      # float16
    optimizer_config = dict(type="Fp16OptimizerHook", loss_scale=512.0)  # float16

``tools/train.py --amp`` turns AMP on with the config's ``amp`` settings, if any;
``dtype=None`` (the default) takes bfloat16 where the device supports it, else float16.
float16 scales the loss with ``torch.amp.GradScaler``: ``"dynamic"`` (the
default of ``amp``), a number (a static scale, mmcv's default 512 for ``fp16``
and ``Fp16OptimizerHook``), or a dict of ``GradScaler`` arguments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Any, ContextManager, Dict, Mapping, Optional, Union

import torch

from mmpar.utils.checks import is_number

__all__ = [
    "AmpSettings",
    "FP16_HOOKS",
    "autocast",
    "check_amp_device",
    "dtype_supported",
    "make_scaler",
    "resolve_amp",
    "static_scale",
]

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
#: mmcv's optimizer hooks that mean float16 training.
FP16_HOOKS = ("Fp16OptimizerHook", "GradientCumulativeFp16OptimizerHook")
MMCV_DEFAULT_LOSS_SCALE = 512.0
_SCALER_ARGS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
LossScale = Union[str, float, Dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class AmpSettings:
    """What the config asked for.

    Attributes:
        dtype: ``"bfloat16"``, ``"float16"``, or None (chosen per device by :meth:`torch_dtype`).
        loss_scale: ``"dynamic"``, a static scale, or ``GradScaler`` arguments; float16 only.
        source: The config key it came from, for messages.
    """

    dtype: Optional[str] = None
    loss_scale: Optional[LossScale] = None
    source: str = "amp"

    def torch_dtype(self, device: torch.device) -> torch.dtype:
        """The autocast dtype on ``device``: the one asked for, else bfloat16 where supported."""
        if self.dtype is not None:
            return DTYPES[self.dtype]
        return torch.bfloat16 if dtype_supported(device, torch.bfloat16) else torch.float16


def _check_loss_scale(value: Any, key: str) -> LossScale:
    if value == "dynamic" or (is_number(value) and value > 0):
        return value if isinstance(value, str) else float(value)
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(_SCALER_ARGS))
        if unknown:
            raise ValueError(
                f"{key}: expected GradScaler arguments among {list(_SCALER_ARGS)}, got {unknown}"
            )
        return dict(value)
    raise ValueError(
        f"{key}: expected 'dynamic', a positive number or a dict of GradScaler arguments, "
        f"got {value!r}"
    )


def _from_amp_key(amp: Any) -> Optional[AmpSettings]:
    if amp is None or amp is False:
        return None
    if amp is True:
        return AmpSettings()
    if not isinstance(amp, Mapping):
        raise TypeError(
            f"amp: expected None, a bool or dict(dtype=..., loss_scale=...), "
            f"got {type(amp).__name__} {amp!r}"
        )
    unknown = sorted(set(amp) - {"dtype", "loss_scale"})
    if unknown:
        raise ValueError(f"amp: unknown keys {unknown}; expected among ['dtype', 'loss_scale']")
    dtype = amp.get("dtype")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"amp.dtype: expected one of {list(DTYPES)} or None, got {dtype!r}")
    loss_scale = amp.get("loss_scale")
    if loss_scale is not None:
        if dtype == "bfloat16":
            raise ValueError(
                f"amp.loss_scale: only float16 scales the loss; dtype is bfloat16, "
                f"got loss_scale={loss_scale!r}"
            )
        loss_scale = _check_loss_scale(loss_scale, "amp.loss_scale")
    return AmpSettings(dtype, loss_scale)


def _mmdet_fp16(cfg: Mapping[str, Any]) -> Optional[AmpSettings]:
    """``fp16 = dict(loss_scale=...)`` or ``optimizer_config.type = "Fp16OptimizerHook"``."""
    fp16 = cfg.get("fp16")
    if fp16 is not None:
        if not isinstance(fp16, Mapping):
            raise TypeError(f"fp16: expected dict(loss_scale=...), got {type(fp16).__name__}")
        scale = fp16.get("loss_scale", MMCV_DEFAULT_LOSS_SCALE)
        return AmpSettings("float16", _check_loss_scale(scale, "fp16.loss_scale"), "fp16")
    opt = cfg.get("optimizer_config") or {}
    if isinstance(opt, Mapping) and opt.get("type") in FP16_HOOKS:
        scale = opt.get("loss_scale", MMCV_DEFAULT_LOSS_SCALE)
        key = "optimizer_config.loss_scale"
        return AmpSettings("float16", _check_loss_scale(scale, key), "optimizer_config.type")
    return None


def resolve_amp(cfg: Mapping[str, Any], flag: bool = False) -> Optional[AmpSettings]:
    """The AMP settings of a config, or None for float32 training.

    Args:
        cfg: The config (``amp``, ``fp16`` and ``optimizer_config`` are read).
        flag: ``--amp`` was given: AMP is on even without any of those keys.

    Raises:
        TypeError: a key has the wrong type.
        ValueError: a bad dtype or loss scale, or ``amp.dtype`` contradicts ``fp16``.
    """
    own = _from_amp_key(cfg.get("amp"))
    mmdet = _mmdet_fp16(cfg)
    if own is not None and mmdet is not None:
        if own.dtype == "bfloat16":
            raise ValueError(
                f"amp.dtype: 'bfloat16' contradicts {mmdet.source} (which means float16); "
                "drop one of them"
            )
        return AmpSettings("float16", own.loss_scale or mmdet.loss_scale, mmdet.source)
    settings = own or mmdet
    if settings is None and flag:
        settings = AmpSettings(source="--amp")
    return settings


def dtype_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether autocast on ``device`` runs in ``dtype`` (probed: old torch warns and disables)."""
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return False
        if dtype != torch.bfloat16:
            return True
        try:  # native bfloat16 only (Ampere or newer), not the slow emulation
            return torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch < 2.3 has no such argument and counts native support only
            return torch.cuda.is_bf16_supported()
    if not torch.amp.is_autocast_available(device.type):
        return False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast(device.type, dtype=dtype):
            enabled = torch.is_autocast_enabled(device.type)
    return enabled and not any("autocast" in str(w.message).lower() for w in caught)


def check_amp_device(settings: AmpSettings, device: torch.device) -> torch.dtype:
    """The autocast dtype of ``settings`` on ``device``, checked to work there.

    Raises:
        ValueError: the device cannot run autocast in that dtype (naming the option).
        RuntimeError: the installed torch lacks ``torch.amp.GradScaler`` for float16.
    """
    dtype = settings.torch_dtype(device)
    name = str(dtype).replace("torch.", "")
    if not dtype_supported(device, dtype):
        cuda = device.type == "cuda" and torch.cuda.is_available()
        where = f"cuda ({torch.cuda.get_device_name(device)})" if cuda else device.type
        other = "float16" if dtype == torch.bfloat16 else "bfloat16"
        raise ValueError(
            f"{settings.source}: autocast in {name} is not supported on {where} with torch "
            f"{torch.__version__}; use dtype={other!r} or train without AMP"
        )
    if dtype == torch.float16 and not hasattr(torch.amp, "GradScaler"):
        raise RuntimeError(
            f"{settings.source}: float16 training needs torch.amp.GradScaler (torch >= 2.3); "
            f"installed torch is {torch.__version__}"
        )
    return dtype


def make_scaler(
    settings: Optional[AmpSettings], device: torch.device
) -> Optional["torch.amp.GradScaler"]:
    """A ``torch.amp.GradScaler`` for float16 on ``device``; None for bfloat16 or no AMP."""
    if settings is None or check_amp_device(settings, device) != torch.float16:
        return None
    scale = settings.loss_scale if settings.loss_scale is not None else "dynamic"
    if isinstance(scale, dict):
        return torch.amp.GradScaler(device.type, **scale)
    if scale == "dynamic":
        return torch.amp.GradScaler(device.type)
    return torch.amp.GradScaler(device.type, init_scale=float(scale))


def static_scale(settings: Optional[AmpSettings]) -> Optional[float]:
    """The fixed scale to reset the scaler to after each step, for a numeric ``loss_scale``."""
    if settings is None or not is_number(settings.loss_scale):
        return None
    return float(settings.loss_scale)  # type: ignore[arg-type]


def autocast(dtype: Optional[torch.dtype], device: torch.device) -> ContextManager[Any]:
    """``torch.autocast`` on ``device`` in ``dtype``; a no-op context for None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)
