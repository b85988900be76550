"""Gradient accumulation: N batches of B make the step of one batch of N·B."""

from __future__ import annotations

import copy
import logging
from typing import Any, Dict, List, Optional

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

from mmpar.data_parallel import MMDataParallel
from mmpar.distributed import MMDistributedDataParallel
from mmpar.runner.accumulate import cumulative_iters, is_step_iter, loss_divisor, window_open
from mmpar.runner.lr_schedule import check_lr_config
from mmpar.runner.optim_step import OptimizerStepper
from mmpar.runner.train_loop import TrainState, train_one_epoch
from tests._dist_helpers import run_workers

SAMPLES = 24
# bf16 keeps 8 significant bits: each rounding is up to 2**-8 relative, and the sums of
# 4 batches of 6 and of one batch of 24 round differently. Their gradients agree to
# a few roundings, well within this bound on the norm of the difference.
BF16_RTOL = 3e-2


class Regressor(nn.Module):
    """No batch statistics; the loss is a mean over the samples of the batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((self.net(x).float().squeeze(1) - y) ** 2).mean()

    def train_step(self, data: Dict[str, Any], optimizer: Any = None) -> Dict[str, Any]:
        loss = self(**data)
        return dict(loss=loss, log_vars=dict(loss=float(loss.detach())), num_samples=len(data["x"]))


class Pairs(Dataset):
    def __init__(self, n: int = SAMPLES) -> None:
        g = torch.Generator().manual_seed(1)
        self.x, self.y = torch.randn(n, 4, generator=g), torch.randn(n, generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Dict[str, torch.Tensor]:
        return dict(x=self.x[i], y=self.y[i])


class EpochSampler(torch.utils.data.Sampler):
    """Indices ``start, start + step, ...`` in order; ``set_epoch`` as the loop expects."""

    def __init__(self, n: int, start: int = 0, step: int = 1) -> None:
        self.indices = list(range(start, n, step))

    def set_epoch(self, epoch: int) -> None:
        pass

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def _step_delta(
    model: nn.Module,
    wrapped: nn.Module,
    batch_size: int,
    n: int,
    amp_dtype: Optional[torch.dtype] = None,
    start: int = 0,
    step: int = 1,
    lr_config: Optional[dict] = None,
) -> List[torch.Tensor]:
    """Parameter change after one epoch of ``batch_size`` batches, accumulating ``n`` per step."""
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = DataLoader(Pairs(), batch_size, sampler=EpochSampler(SAMPLES, start, step))
    stepper = OptimizerStepper(wrapped, optimizer, cumulative_iters=n, amp_dtype=amp_dtype)
    state = TrainState(max_epochs=1, iters_per_epoch=len(loader))
    logger = logging.getLogger("test_accumulate")
    train_one_epoch(
        wrapped, loader, optimizer, state, check_lr_config(lr_config), 0.5, logger, stepper=stepper
    )
    assert state.iter == len(loader)  # iterations count batches, not steps
    return [p.detach() - b for p, b in zip(model.parameters(), before)]


def _relative_error(a: List[torch.Tensor], b: List[torch.Tensor]) -> float:
    diff = torch.cat([(x - y).flatten() for x, y in zip(a, b)]).norm()
    return float(diff / torch.cat([y.flatten() for y in b]).norm())


def test_window_arithmetic_matches_mmcv_for_the_remainder() -> None:
    # A run of 7 batches, N=3: windows [0,1,2] [3,4,5] and a remainder [6] divided by 1.
    assert [loss_divisor(i, 7, 3) for i in range(7)] == [3, 3, 3, 3, 3, 3, 1]
    assert [i for i in range(7) if is_step_iter(i, 7, 3)] == [2, 5, 6]
    assert [loss_divisor(i, 8, 3) for i in range(8)] == [3, 3, 3, 3, 3, 3, 2, 2]
    # Epochs of 4: the window [3,4,5] straddles the first two, and is open after each.
    assert [window_open(done, 8, 3) for done in (3, 4, 6, 8)] == [False, True, False, False]
    assert cumulative_iters(None) == 1
    assert cumulative_iters(dict(type="GradientCumulativeOptimizerHook", cumulative_iters=4)) == 4


@pytest.mark.parametrize(
    "config, error, words",
    [
        (dict(cumulative_iters=0), ValueError, "cumulative_iters must be >= 1"),
        (dict(cumulative_iters=2.0), TypeError, "cumulative_iters must be an int"),
        (dict(type="Nope"), ValueError, "optimizer_config.type"),
        ([1], TypeError, "optimizer_config: expected a dict"),
    ],
)
def test_bad_cumulative_iters_name_the_key(config: Any, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        cumulative_iters(config)


@pytest.mark.parametrize("amp_dtype, rtol", [(None, 1e-6), (torch.bfloat16, BF16_RTOL)])
def test_n_batches_of_b_equal_one_batch_of_n_times_b(
    amp_dtype: Optional[torch.dtype], rtol: float
) -> None:
    big_model = Regressor()
    big = _step_delta(big_model, MMDataParallel(big_model, device_ids=["cpu"]), 24, 1, amp_dtype)
    model = Regressor()
    small = _step_delta(model, MMDataParallel(model, device_ids=["cpu"]), 6, 4, amp_dtype)
    assert _relative_error(small, big) <= rtol
    assert _relative_error(small, [torch.zeros_like(t) for t in big]) > 0.01  # it did step


def test_epoch_tail_shorter_than_n_steps_at_the_epoch_end() -> None:
    # 24 samples in batches of 4 with N=4: one window of 16, then 8 samples divided by 2.
    # Two SGD steps from the same start: the 16-sample mean, then the 8-sample mean.
    model = Regressor()
    got = _step_delta(model, MMDataParallel(model, device_ids=["cpu"]), 4, 4)
    reference = Regressor()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    before = [p.detach().clone() for p in reference.parameters()]
    data = Pairs()
    for lo, hi in ((0, 16), (16, 24)):
        optimizer.zero_grad()
        reference(data.x[lo:hi], data.y[lo:hi]).backward()
        optimizer.step()
    expected = [p.detach() - b for p, b in zip(reference.parameters(), before)]
    assert _relative_error(got, expected) <= 1e-6


def _train_epochs(
    wrapped: nn.Module,
    epochs: range,
    total_epochs: int,
    n: int,
    start: int = 0,
    step: int = 1,
    resume: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Train ``epochs`` of 3 batches of 8 samples (of 24, strided by rank), accumulating ``n``;
    optionally resumed from ``resume``. Returns what a checkpoint after the last epoch holds."""
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.5, momentum=0.9)
    loader = DataLoader(Pairs(), 8 // step, sampler=EpochSampler(SAMPLES, start, step))
    stepper = OptimizerStepper(wrapped, optimizer, cumulative_iters=n)
    state = TrainState(epoch=epochs[0], max_epochs=total_epochs, iters_per_epoch=len(loader))
    state.iter = state.epoch * len(loader)
    if resume is not None:
        optimizer.load_state_dict(copy.deepcopy(resume["optimizer"]))  # as if read from a file
        if resume["grads"] is not None:
            stepper.load_pending_grads(resume["grads"])
    logger = logging.getLogger("test_accumulate")
    for _ in epochs:
        train_one_epoch(
            wrapped, loader, optimizer, state, check_lr_config(None), 0.5, logger, stepper=stepper
        )
    grads = stepper.pending_grads()
    return dict(optimizer=optimizer.state_dict(), grads=grads, params=_params(wrapped))


def _params(wrapped: nn.Module) -> List[torch.Tensor]:
    return [p.detach().clone() for p in wrapped.parameters()]


def test_windows_straddle_epochs_as_mmcv_counts_them() -> None:
    # 2 epochs of 3 batches of 8 with N=2: steps on batches (0,1), (2, next epoch's 0), (1,2).
    model = Regressor()
    got = _train_epochs(MMDataParallel(model, device_ids=["cpu"]), range(2), 2, 2)["params"]
    reference = Regressor()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5, momentum=0.9)
    data = Pairs()
    for first, second in (((0, 8), (8, 16)), ((16, 24), (0, 8)), ((8, 16), (16, 24))):
        optimizer.zero_grad()
        for lo, hi in (first, second):
            (reference(data.x[lo:hi], data.y[lo:hi]) / 2).backward()
        optimizer.step()
    assert _relative_error(got, _params(reference)) <= 1e-6


def test_a_checkpoint_inside_a_window_keeps_its_gradients_and_resume_is_exact() -> None:
    straight = Regressor()
    wrapped = MMDataParallel(straight, device_ids=["cpu"])
    first = _train_epochs(wrapped, range(1), 2, 2)  # 3 batches: one step, one batch pending
    assert first["grads"] is not None and set(first["grads"]) == {
        name for name, _ in straight.named_parameters()
    }
    end = _train_epochs(wrapped, range(1, 2), 2, 2, resume=first)["params"]
    resumed = Regressor()
    resumed.load_state_dict(dict(zip(straight.state_dict(), first["params"])))
    wrapped = MMDataParallel(resumed, device_ids=["cpu"])
    again = _train_epochs(wrapped, range(1, 2), 2, 2, resume=first)
    assert all(torch.equal(a, b) for a, b in zip(again["params"], end))
    assert again["grads"] is None  # the run ended on a step
    # Without the gradients the window's step misses a batch: not the same parameters.
    lost = Regressor()
    lost.load_state_dict(dict(zip(straight.state_dict(), first["params"])))
    partial = _train_epochs(
        MMDataParallel(lost, device_ids=["cpu"]), range(1, 2), 2, 2, resume=dict(first, grads=None)
    )
    assert not all(torch.equal(a, b) for a, b in zip(partial["params"], end))


def test_pending_gradients_of_another_model_are_refused() -> None:
    model = Regressor()
    stepper = OptimizerStepper(model, torch.optim.SGD(model.parameters(), lr=0.1), None, 2)
    with pytest.raises(ValueError, match=r"accumulated_grads\['head.weight'\].*no such parameter"):
        stepper.load_pending_grads({"head.weight": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"accumulated_grads\['net.0.bias'\].*shape \(3,\)"):
        stepper.load_pending_grads({"net.0.bias": torch.zeros(3)})


def _ddp_resume_worker(rank: int, world: int) -> Dict[str, Any]:
    """Straight 2 epochs against 1 epoch, a 'checkpoint' (rank 0's copy) and a resumed one."""
    model = Regressor()
    ddp = MMDistributedDataParallel(model)
    first = _train_epochs(ddp, range(1), 2, 2, start=rank, step=world)
    # Every rank holds the mean of the ranks' pending gradients; the checkpoint keeps rank 0's.
    saved = [None]
    if rank == 0:
        saved[0] = first
    dist.broadcast_object_list(saved, src=0)
    end = _train_epochs(ddp, range(1, 2), 2, 2, start=rank, step=world, resume=first)["params"]
    resumed = Regressor()
    resumed.load_state_dict(dict(zip(model.state_dict(), saved[0]["params"])))
    again = _train_epochs(
        MMDistributedDataParallel(resumed),
        range(1, 2),
        2,
        2,
        start=rank,
        step=world,
        resume=saved[0],
    )
    same_grads = all(torch.equal(first["grads"][k], saved[0]["grads"][k]) for k in first["grads"])
    return dict(same_grads=same_grads, end=end, again=again["params"])


@pytest.mark.slow
def test_two_gloo_processes_resume_inside_a_window_exactly() -> None:
    results = run_workers(_ddp_resume_worker, 2, timeout=120)
    model = Regressor()
    single = _train_epochs(MMDataParallel(model, device_ids=["cpu"]), range(2), 2, 2)["params"]
    for result in results:
        assert result["same_grads"]  # averaged over the ranks before saving
        assert all(torch.equal(a, b) for a, b in zip(result["again"], result["end"]))
        assert _relative_error(result["end"], single) <= 1e-6


def _ddp_worker(rank: int, world: int, amp: bool) -> Dict[str, Any]:
    """Each rank takes every other sample; count the gradient all-reduces with a comm hook."""
    dtype = torch.bfloat16 if amp else None
    calls = {"n": 0}

    # Unannotated: DDP checks the annotation, which the __future__ import makes a str.
    def counting_hook(state, bucket):
        calls["n"] += 1
        fut = dist.all_reduce(bucket.buffer() / world, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    deltas, counts = {}, {}
    for n, batch in ((1, 12), (4, 3)):
        model = Regressor()
        ddp = MMDistributedDataParallel(model)
        ddp.register_comm_hook(None, counting_hook)
        calls["n"] = 0
        deltas[n] = _step_delta(model, ddp, batch, n, dtype, start=rank, step=world)
        counts[n] = calls["n"]
    return dict(deltas=deltas, counts=counts)


@pytest.mark.slow
@pytest.mark.parametrize("amp, rtol", [(False, 1e-6), (True, BF16_RTOL)])
def test_two_gloo_processes_accumulate_in_no_sync(amp: bool, rtol: float) -> None:
    results = run_workers(_ddp_worker, 2, amp, timeout=120)
    model = Regressor()
    single = _step_delta(model, MMDataParallel(model, device_ids=["cpu"]), 24, 1)
    for result in results:
        # 2 ranks x 4 batches of 3, accumulated: one step of all 24 samples.
        assert _relative_error(result["deltas"][4], single) <= rtol
        assert _relative_error(result["deltas"][1], single) <= rtol
        # One all-reduce per step (a single bucket): no_sync kept the other 3 local.
        assert result["counts"] == {1: 1, 4: 1}
