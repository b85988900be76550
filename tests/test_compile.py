"""torch.compile in place: targets, unchanged checkpoint keys, bounded recompilations, wrappers."""

from __future__ import annotations

import logging
from typing import Any, Dict, List

import pytest
import torch
from torch import nn

from mmpar.data import build_dataloader, build_dataset, set_loader_epoch
from mmpar.data_parallel import MMDataParallel
from mmpar.distributed import MMDistributedDataParallel
from mmpar.models import build_model
from mmpar.runner.compile import CompileMonitor, compile_model, resolve_compile
from mmpar.runner.inference import single_gpu_test
from mmpar.runner.rng import set_random_seed
from tests._dist_helpers import run_workers
from tests._training import step_losses

EAGER = dict(targets=None, backend="eager")  # dynamo only: quick, and recompiles the same


class Net(nn.Module):
    """A user model: forward in user code, train_step/val_step in mmcv's style."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:
        return dict(loss=((self.head(self.body(x)).squeeze(1) - y) ** 2).mean())

    def train_step(self, data: Dict[str, Any], optimizer: Any = None) -> Dict[str, Any]:
        loss = self(**data)["loss"]
        return dict(loss=loss, log_vars=dict(loss=float(loss.detach())), num_samples=len(data["x"]))

    def val_step(self, data: Dict[str, Any], optimizer: Any = None) -> Dict[str, Any]:
        with torch.no_grad():
            return self.train_step(data)


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, None),
        (False, None),
        (True, dict(targets=None)),
        (dict(backend="eager", targets=("extract",)), dict(backend="eager", targets=["extract"])),
    ],
)
def test_config_forms(value: Any, expected: Any) -> None:
    assert resolve_compile(value) == expected


@pytest.mark.parametrize(
    "value, error, words",
    [
        ("yes", TypeError, "compile: expected None, a bool or dict"),
        (dict(mode="max-autotune", dynamc=True), ValueError, r"compile: unknown keys \['dynamc'\]"),
        (dict(targets="extract"), TypeError, "compile.targets: expected a list of names"),
    ],
)
def test_bad_settings_name_the_key(value: Any, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        resolve_compile(value)


def test_targets_compile_in_place_and_keep_the_keys() -> None:
    keys = list(Net().state_dict())
    for targets, name in (
        ([""], "Net"),
        (["head"], "Net.head"),
        (["train_step"], "Net.train_step"),
    ):
        model = Net()
        assert compile_model(model, dict(EAGER, targets=targets)) == [name]
        assert list(model.state_dict()) == keys  # no _orig_mod.
    tiny = build_model(dict(type="TinyDet", width=8))
    assert compile_model(tiny, EAGER) == ["TinyDet.extract"]  # its compile_targets
    with pytest.raises(ValueError, match="compile.targets: 'nope' is neither"):
        compile_model(Net(), dict(EAGER, targets=["nope"]))


def test_missing_module_compile_names_the_torch_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(nn.Module, "compile")
    with pytest.raises(RuntimeError, match=r"compile: needs nn.Module.compile \(torch >= 2.2\)"):
        compile_model(Net(), EAGER)


def test_varying_padded_sizes_and_box_lists_recompile_a_bounded_number_of_times(
    caplog: pytest.LogCaptureFixture,
) -> None:
    torch.manual_seed(0)
    model = build_model(dict(type="TinyDet", width=8))
    compile_model(model, EAGER)
    wrapped = MMDataParallel(model, device_ids=["cpu"])
    # 48-112 px images padded to multiples of 32: 64, 96 or 128 high and wide; 1-4 boxes each.
    shapes_cfg = dict(type="SyntheticShapes", num_samples=48, min_size=48, max_size=112)
    loader = build_dataloader(build_dataset(shapes_cfg), 4, 0, dist=False, seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = CompileMonitor(logging.getLogger("mmpar.test")).install()
    shapes = set()
    try:
        with caplog.at_level(logging.INFO, logger="mmpar.test"):
            set_loader_epoch(loader, 0)
            for data in loader:
                shapes.add(tuple(data["img"].data[0].shape))
                wrapped.train_step(data, optimizer)["loss"].backward()
                optimizer.step()
            test_cfg = dict(shapes_cfg, num_samples=8)
            test_loader = build_dataloader(
                build_dataset(test_cfg, test_mode=True), 4, 0, dist=False, shuffle=False
            )
            assert len(single_gpu_test(wrapped, test_loader)) == 8
    finally:
        monitor.remove()
    assert len(shapes) >= 4, shapes  # the check below means something
    assert 1 <= monitor.counts["recompile"] <= 8 and monitor.counts["graph break"] == 0
    lines = [r.getMessage() for r in caplog.records if "torch.compile recompile" in r.getMessage()]
    assert len(lines) == len(set(lines)) and 1 <= len(lines) <= monitor.counts["recompile"]


def _losses(compiled: bool, steps: int = 3) -> List[float]:
    set_random_seed(0)
    model = build_model(dict(type="TinyDet", width=8, norm_cfg=None))
    wrapped = MMDataParallel(model, device_ids=["cpu"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    dataset = build_dataset(dict(type="SyntheticShapes", num_samples=4, min_size=48, max_size=64))
    # Drawn before compiling, which may draw random numbers itself: the same flips for both.
    batches = list(build_dataloader(dataset, 2, 0, dist=False, shuffle=False))
    if compiled:
        compile_model(model, dict(targets=None))  # inductor, the default backend
    return step_losses(wrapped, optimizer, batches * steps)


@pytest.mark.slow
def test_inductor_run_gives_the_eager_losses() -> None:
    eager, compiled = _losses(False), _losses(True)
    # Inductor fuses and reorders float32 arithmetic: equal up to rounding, compounded over steps.
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-5)


def _ddp_worker(rank: int, world: int, compiled: bool) -> Dict[str, Any]:
    model = Net()
    if compiled:
        compile_model(model, dict(EAGER, targets=[""]))
    ddp = MMDistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for n in (6, 5, 6):  # a varying batch size
        data = dict(x=torch.randn(n, 4, generator=g), y=torch.randn(n, generator=g))
        optimizer.zero_grad()
        ddp.train_step(data, optimizer)["loss"].backward()
        optimizer.step()
    val = ddp.val_step(data, optimizer)
    return dict(params=[p.detach() for p in model.parameters()], val=float(val["loss"]))


@pytest.mark.slow
def test_compiled_model_trains_through_mm_distributed_data_parallel() -> None:
    eager = run_workers(_ddp_worker, 2, False, timeout=120)
    compiled = run_workers(_ddp_worker, 2, True, timeout=120)
    for e, c in zip(eager, compiled):
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(e["params"], c["params"]))
        assert c["val"] == pytest.approx(e["val"], rel=1e-6)
