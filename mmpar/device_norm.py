"""Normalizing images on the target device, after scatter, instead of in the loader workers.

A pipeline with ``Normalize(..., on_device=True)`` leaves the pixels as they are
(uint8 for decoded images: a quarter of the bytes of float32 through the worker
queues, the pinning and PCIe, and no float work in the workers) and records in
each image's ``img_norm_cfg`` what the worker would have done: ``mean``, ``std``,
``swap_rb`` (BGR to RGB), ``on_device=True``, the ``norm_hw`` that would have
been normalized, and the padding values in normalized units (``pad_val`` of a
following ``Pad``, ``batch_pad_val`` of the stacked container). The metas are
``cpu_only``, so this travels with the batch through collate and scatter.

:func:`normalize_scattered` then runs in :class:`~mmpar.MMDataParallel` and
:class:`~mmpar.MMDistributedDataParallel` right after their scatter, on each
target's own piece: every ``img`` whose metas ask for it becomes the float32
tensor the worker-side pipeline would have produced, margins included. Padding
happened on the raw pixels (with 0), and normalizing it would turn a 0 margin into
``-mean / std``; so after normalizing, each image's margins are set to the values
the worker-side pipeline puts there: ``pad_val`` between the normalized area and
the image's ``pad_shape``, ``batch_pad_val`` beyond it (both 0 by default). The
metas handed to the model then say ``on_device=False``: the work is done, and a
second pass changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, List, Sequence, Tuple

import torch

__all__ = ["needs_device_norm", "normalize_images", "normalize_batch", "normalize_scattered"]


def _cfg(meta: Any) -> Any:
    return meta.get("img_norm_cfg") if isinstance(meta, Mapping) else None


def needs_device_norm(img_metas: Any) -> bool:
    """Whether ``img_metas`` (a list of per-image dicts) ask for on-device normalization."""
    if not isinstance(img_metas, (list, tuple)) or not img_metas:
        return False
    cfg = _cfg(img_metas[0])
    return isinstance(cfg, Mapping) and bool(cfg.get("on_device", False))


#: Device copies of the constants (means, stds, padding values), by device and value.
_CONSTANTS: Dict[Tuple[Any, ...], torch.Tensor] = {}
_MAX_CONSTANTS = 256


def _to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` on ``device`` without making the host wait for the GPU: on CUDA, through
    pinned memory in one asynchronous copy, ordered on the current stream."""
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def _column(values: Sequence[Sequence[float]], device: torch.device) -> torch.Tensor:
    """``(N, C)`` numbers as an ``(N, C, 1, 1)`` float32 tensor on ``device``, copied
    there once per device and value (a constant: a mean, a std, a padding value)."""
    rows = tuple(tuple(float(v) for v in row) for row in values)
    key = (device, rows)
    cached = _CONSTANTS.get(key)
    if cached is None:
        if len(_CONSTANTS) >= _MAX_CONSTANTS:
            _CONSTANTS.clear()
        host = torch.tensor(rows, dtype=torch.float32)[:, :, None, None]
        cached = _CONSTANTS[key] = _to_device(host, device)
    return cached


def normalize_images(img: torch.Tensor, img_metas: Sequence[Mapping[str, Any]]) -> torch.Tensor:
    """Normalize a stacked batch of raw images where it is, as a worker-side ``Normalize`` would.

    Args:
        img: ``(N, C, H, W)`` images of any dtype (uint8 typically), padded.
        img_metas: N dicts whose ``img_norm_cfg`` has ``mean``, ``std`` and
            optionally ``swap_rb``, ``norm_hw``, ``pad_val``, ``batch_pad_val``;
            ``pad_shape`` gives the extent of each image's own padding.

    Returns:
        A new float32 ``(N, C, H, W)`` tensor on ``img``'s device.

    Raises:
        ValueError: ``img`` is not 4-D, the metas are not one per image, or
            ``mean``/``std`` do not have one value per channel.
    """
    if img.dim() != 4:
        raise ValueError(
            f"normalize_images: img must be (N, C, H, W), got shape {tuple(img.shape)}"
        )
    n, c, h, w = img.shape
    if len(img_metas) != n:
        raise ValueError(f"normalize_images: {n} images but {len(img_metas)} img_metas")
    cfgs = [_cfg(m) or {} for m in img_metas]
    for i, cfg in enumerate(cfgs):
        for key in ("mean", "std"):
            if len(cfg.get(key, ())) != c:
                raise ValueError(
                    f"normalize_images: img_metas[{i}]['img_norm_cfg'][{key!r}] must have "
                    f"{c} values (one per channel), got {cfg.get(key)!r}"
                )
    device = img.device
    x = img.to(torch.float32)
    swap = [bool(cfg.get("swap_rb", False)) for cfg in cfgs]
    if all(swap):
        x = x.flip(1)
    elif any(swap):
        index = _to_device(torch.tensor([i for i, s in enumerate(swap) if s]), device)
        x = x.index_copy(0, index, x.index_select(0, index).flip(1))
    same = all(
        cfg is cfgs[0]
        or (list(cfg["mean"]) == list(cfgs[0]["mean"]) and list(cfg["std"]) == list(cfgs[0]["std"]))
        for cfg in cfgs
    )
    rows_of = cfgs[:1] if same else cfgs
    mean = _column([cfg["mean"] for cfg in rows_of], device)
    std = _column([cfg["std"] for cfg in rows_of], device)
    x = (x - mean) / std  # the worker's float32 arithmetic, in the same order
    norm_hw = [
        tuple(cfg.get("norm_hw") or meta.get("img_shape", (h, w)))[:2]
        for cfg, meta in zip(cfgs, img_metas)
    ]
    pad_hw = [tuple(meta.get("pad_shape") or hw)[:2] for meta, hw in zip(img_metas, norm_hw)]
    if all(nh >= h and nw >= w for nh, nw in norm_hw):
        return x  # no margin anywhere
    rows = torch.arange(h, device=device)[None, None, :, None]  # no copy: made on the device
    cols = torch.arange(w, device=device)[None, None, None, :]

    def inside(hw: List[Tuple[int, int]]) -> torch.Tensor:
        bounds = _to_device(torch.tensor(hw, dtype=torch.int64), device)
        return (rows < bounds[:, 0, None, None, None]) & (cols < bounds[:, 1, None, None, None])

    pad_val = _column([[cfg.get("pad_val", 0)] for cfg in cfgs], device)
    batch_pad_val = _column([[cfg.get("batch_pad_val", 0)] for cfg in cfgs], device)
    margin = torch.where(inside(pad_hw), pad_val, batch_pad_val)
    return torch.where(inside(norm_hw), x, margin)


def _done(img_metas: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    return [
        dict(meta, img_norm_cfg=dict(meta["img_norm_cfg"], on_device=False)) for meta in img_metas
    ]


def normalize_batch(data: Any) -> Any:
    """``data`` with its ``img`` normalized if its ``img_metas`` ask for it; else ``data`` itself.

    ``data`` is a mapping after scatter or :func:`mmpar.to_device` (``img`` a
    tensor and ``img_metas`` a list of dicts, or, for test-time augmentation, a
    list of both). For code without mmpar's wrappers:
    ``model(**normalize_batch(to_device(batch, "cuda:0")))``.
    """
    if not isinstance(data, Mapping) or "img" not in data or "img_metas" not in data:
        return data
    img, metas = data["img"], data["img_metas"]
    if isinstance(img, torch.Tensor) and needs_device_norm(metas):
        new_img, new_metas = normalize_images(img, metas), _done(metas)
    elif (
        isinstance(img, (list, tuple))
        and isinstance(metas, (list, tuple))
        and len(img) == len(metas)
        and img
        and all(isinstance(t, torch.Tensor) for t in img)
        and any(needs_device_norm(m) for m in metas)
    ):
        new_img = [
            normalize_images(t, m) if needs_device_norm(m) else t for t, m in zip(img, metas)
        ]
        new_metas = [_done(m) if needs_device_norm(m) else m for m in metas]
    else:
        return data
    out = dict(data)
    out["img"], out["img_metas"] = new_img, new_metas
    return type(data)(out) if type(data) is not dict else out  # type: ignore[call-arg]


def normalize_scattered(
    scattered: Tuple[Tuple[Tuple[Any, ...], ...], Tuple[Dict[str, Any], ...]],
) -> Tuple[Tuple[Tuple[Any, ...], ...], Tuple[Dict[str, Any], ...]]:
    """What :func:`mmpar.scatter_kwargs` returned, with :func:`normalize_batch` applied per target:
    to the keyword arguments and to every positional argument that is a mapping."""
    inputs, kwargs = scattered
    new_inputs = tuple(tuple(normalize_batch(a) for a in args) for args in inputs)
    new_kwargs = tuple(normalize_batch(kw) for kw in kwargs)
    return new_inputs, new_kwargs
