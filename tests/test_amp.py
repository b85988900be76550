"""Mixed precision: config forms, device checks, loss scaling, clipping, scaler state."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Dict

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from mmpar.collate import collate
from mmpar.data import build_dataset
from mmpar.data_parallel import MMDataParallel
from mmpar.models import build_model
from mmpar.runner import amp as amp_module
from mmpar.runner.amp import AmpSettings, check_amp_device, resolve_amp
from mmpar.runner.checkpoint import load_checkpoint, save_checkpoint
from mmpar.runner.optim_step import OptimizerStepper, build_stepper, describe
from mmpar.scatter_gather import to_device

CPU = torch.device("cpu")


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(8, 1)

    def train_step(self, data: Dict[str, Any], optimizer: Any = None) -> Dict[str, Any]:
        loss = ((self.fc(data["x"]).squeeze(1) - data["y"]) ** 2).mean() * data["gain"]
        return dict(loss=loss, log_vars={}, num_samples=len(data["x"]))


def _data(gain: float = 1.0) -> Dict[str, Any]:
    g = torch.Generator().manual_seed(2)
    return dict(x=torch.randn(16, 8, generator=g), y=torch.randn(16, generator=g), gain=gain)


@pytest.mark.parametrize(
    "cfg, flag, expected",
    [
        ({}, False, None),
        ({}, True, AmpSettings(source="--amp")),
        (dict(amp=True), False, AmpSettings()),
        (dict(amp=dict(dtype="bfloat16")), False, AmpSettings("bfloat16")),
        (dict(amp=dict(dtype="float16", loss_scale=128)), False, AmpSettings("float16", 128.0)),
        (dict(fp16=dict(loss_scale=512.0)), False, AmpSettings("float16", 512.0, "fp16")),
        (dict(fp16=dict(loss_scale="dynamic")), True, AmpSettings("float16", "dynamic", "fp16")),
        (
            dict(optimizer_config=dict(type="Fp16OptimizerHook")),
            False,
            AmpSettings("float16", 512.0, "optimizer_config.type"),
        ),
        (dict(amp=True, fp16=dict(loss_scale=64.0)), False, AmpSettings("float16", 64.0, "fp16")),
    ],
)
def test_config_forms(cfg: dict, flag: bool, expected: Any) -> None:
    assert resolve_amp(cfg, flag) == expected


@pytest.mark.parametrize(
    "cfg, error, words",
    [
        (dict(amp=dict(dtype="half")), ValueError, "amp.dtype: expected one of"),
        (dict(amp=dict(dtype="bfloat16", loss_scale=8.0)), ValueError, "amp.loss_scale: only"),
        (dict(amp=dict(loss_scale=-1)), ValueError, "amp.loss_scale: expected 'dynamic'"),
        (dict(amp=dict(scale=2)), ValueError, r"amp: unknown keys \['scale'\]"),
        (dict(amp="fp16"), TypeError, "amp: expected None, a bool or dict"),
        (dict(fp16=dict(loss_scale=dict(init=2))), ValueError, "fp16.loss_scale: expected"),
        (
            dict(amp=dict(dtype="bfloat16"), fp16=dict(loss_scale=512.0)),
            ValueError,
            "amp.dtype: 'bfloat16' contradicts fp16",
        ),
    ],
)
def test_bad_settings_name_the_key(cfg: dict, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        resolve_amp(cfg)


def test_amp_without_dtype_takes_bfloat16_on_the_cpu() -> None:
    assert check_amp_device(AmpSettings(), CPU) == torch.bfloat16


def test_float16_where_autocast_lacks_it_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = torch.autocast

    def old_torch_autocast(device_type: str, dtype: Any = None, **kwargs: Any) -> Any:
        # What torch < 2.x printed for float16 on the CPU, before running in float32.
        if dtype == torch.float16:
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling.")
            return real(device_type, dtype=torch.bfloat16, enabled=False)
        return real(device_type, dtype=dtype, **kwargs)

    monkeypatch.setattr(amp_module.torch, "autocast", old_torch_autocast)
    with pytest.raises(ValueError, match="amp: autocast in float16 is not supported on cpu"):
        check_amp_device(AmpSettings("float16"), CPU)
    # --amp without a dtype falls back to the supported one.
    assert check_amp_device(AmpSettings(), CPU) == torch.bfloat16


def test_missing_grad_scaler_names_the_torch_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch.amp, "GradScaler")
    with pytest.raises(RuntimeError, match=r"fp16: float16 training needs .*torch >= 2.3"):
        check_amp_device(AmpSettings("float16", 512.0, "fp16"), CPU)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_amp_on_cuda_without_cuda_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="autocast in bfloat16 is not supported on cuda"):
        check_amp_device(AmpSettings("bfloat16"), torch.device("cuda"))


@pytest.mark.cuda
def test_float16_on_cuda_trains_with_a_scaler() -> None:
    model = Linear().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stepper = build_stepper(dict(amp=dict(dtype="float16")), model, optimizer, torch.device("cuda"))
    data = {k: v.cuda() if torch.is_tensor(v) else v for k, v in _data().items()}
    out = stepper.train_iter(data, 0, 1)
    assert out["loss"].dtype == torch.float32 and stepper.scaler is not None


def _stepper(cfg: dict, clip: Any = None) -> OptimizerStepper:
    model = Linear()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    cfg = dict(cfg, optimizer_config=dict(grad_clip=clip))
    return build_stepper(cfg, MMDataParallel(model, device_ids=["cpu"]), optimizer, CPU)


def _delta(stepper: OptimizerStepper, gain: float = 1.0) -> torch.Tensor:
    before = torch.cat([p.detach().flatten().clone() for p in stepper.model.parameters()])
    out = stepper.train_iter(_data(gain), 0, 1)
    assert out["loss"].dtype == torch.float32
    return torch.cat([p.detach().flatten() for p in stepper.model.parameters()]) - before


def test_float16_clips_unscaled_gradients() -> None:
    clip = dict(max_norm=0.01)
    plain = _delta(_stepper({}, clip))
    stepper = _stepper(dict(amp=dict(dtype="float16", loss_scale=1024.0)), clip)
    assert stepper.scaler is not None and "static loss scale 1024" in describe(stepper)
    half = _delta(stepper)
    # Clipped to the same norm as in float32 (clipping scaled gradients would give 0.01/1024).
    assert abs(float(half.norm()) - 0.01) < 1e-5 and abs(float(plain.norm()) - 0.01) < 1e-6
    assert torch.allclose(half, plain, rtol=2e-2, atol=1e-5)


def test_static_scale_stays_and_overflow_skips_the_step() -> None:
    stepper = _stepper(dict(fp16=dict(loss_scale=512.0)))
    _delta(stepper)
    assert stepper.scaler.get_scale() == 512.0
    skipped = _delta(stepper, gain=float("inf"))  # inf gradients: no step
    assert torch.equal(skipped, torch.zeros_like(skipped)) and stepper.scaler.get_scale() == 512.0
    growing = dict(init_scale=2.0, growth_interval=1)
    dynamic = _stepper(dict(amp=dict(dtype="float16", loss_scale=growing)))
    _delta(dynamic)
    assert dynamic.scaler.get_scale() == 4.0  # a dynamic scale grows after a good step


def test_scaler_state_survives_a_checkpoint(tmp_path: Path) -> None:
    stepper = _stepper(dict(amp=dict(dtype="float16", loss_scale=dict(growth_interval=1))))
    for _ in range(3):
        _delta(stepper)
    path = tmp_path / "epoch_1.pth"
    save_checkpoint(path, stepper.model, stepper.optimizer, extra=dict(amp=stepper.state_dict()))
    fresh = _stepper(dict(amp=dict(dtype="float16", loss_scale=dict(growth_interval=1))))
    assert fresh.load_state_dict(load_checkpoint(path)["amp"])
    assert fresh.scaler.state_dict() == stepper.scaler.state_dict()
    assert not _stepper({}).load_state_dict(load_checkpoint(path)["amp"])  # no scaler: ignored
    with pytest.raises(ValueError, match="extra may not replace"):
        save_checkpoint(path, stepper.model, extra=dict(state_dict={}))


def test_tiny_det_losses_are_float32_under_bfloat16_autocast() -> None:
    torch.manual_seed(0)
    model = build_model(dict(type="TinyDet", num_classes=3, width=8))
    dataset = build_dataset(dict(type="SyntheticShapes", num_samples=2, min_size=48, max_size=64))
    loader = DataLoader(dataset, batch_size=2, collate_fn=lambda b: collate(b, samples_per_gpu=2))
    data = to_device(next(iter(loader)), "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.extract(data["img"])[0].dtype == torch.bfloat16
        losses = model(**data)
        out = model.train_step(data)
    assert all(v.dtype == torch.float32 for v in losses.values())
    assert out["loss"].dtype == torch.float32 and torch.isfinite(out["loss"])
