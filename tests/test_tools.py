"""End-to-end tests of tools/train.py and tools/test.py, run as a user would: subprocesses."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest
import torch

from mmpar.runner.launch import scale_lr
from mmpar.runner.lr_schedule import check_lr_config, scheduled_lr
from tests._dist_helpers import free_port, run_launcher

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "tiny_det" / "tiny_det_synthetic.py")
TIMEOUT = 180
# Tiny runs: 24 training images in batches of 8 (about 3-4 iterations per epoch), 8 val and 8
# test images.
TINY = [
    "runner.max_epochs=2",
    "data.train.num_samples=24",
    "data.val.num_samples=8",
    "data.test.num_samples=8",
    "data.samples_per_gpu=8",
    "data.test_samples_per_gpu=1",
    "log_config.interval=1",
]


def run_tool(
    args: List[str], check: bool = True, env: Optional[dict] = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess:
    # ``env`` may replace PYTHONPATH too (e.g. to add a user's project to it).
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    proc = run_launcher([sys.executable, *args], timeout=timeout, cwd=ROOT, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
            f"stderr:\n{proc.stderr[-3000:]}"
        )
    return proc


def torchrun_launcher(nproc: int = 2) -> List[str]:
    """``-m torch.distributed.run`` starting ``nproc`` processes, on a port free just now."""
    return [
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        f"--master_port={free_port()}",
    ]


# GPU kernels are not deterministic by default: runs whose parameters are compared bit
# for bit use --deterministic there (on the CPU they are deterministic without it).
BITWISE = ["--deterministic"] if torch.cuda.is_available() else []
# Two processes on a machine with fewer than two GPUs: gloo, which runs on the CPU.
GLOO = [] if torch.cuda.device_count() >= 2 else ["dist_params.backend='gloo'"]


def train_args(work_dir: Path, *extra: str, options: List[str] = TINY) -> List[str]:
    """``tools/train.py`` arguments of the tool tests' runs: seed 3, bit-exact where needed."""
    return [
        "tools/train.py",
        CONFIG,
        "--work-dir",
        str(work_dir),
        "--seed",
        "3",
        *BITWISE,
        *extra,
        "--cfg-options",
        *options,
    ]


def train(
    work_dir: Path, *extra: str, options: List[str] = TINY, check: bool = True
) -> subprocess.CompletedProcess:
    return run_tool(train_args(work_dir, *extra, options=options), check=check)


def json_records(work_dir: Path) -> List[dict]:
    (log,) = work_dir.glob("*.log.json")
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work_dir = tmp_path_factory.mktemp("trained")
    train(work_dir)
    return work_dir


def test_train_writes_logs_and_checkpoints(trained: Path) -> None:
    names = {p.name for p in trained.iterdir()}
    assert {"epoch_1.pth", "epoch_2.pth", "latest.pth", "tiny_det_synthetic.py"} <= names
    assert (trained / "latest.pth").resolve() == (trained / "epoch_2.pth").resolve()
    (text_log,) = trained.glob("*[0-9].log")
    text = text_log.read_text()
    assert (
        "Epoch [1][1/" in text
        and "loss_heatmap: " in text
        and "eta: " in text
        and "data_time: " in text
    )
    assert "mAP@0.5 before training: " in text
    records = json_records(trained)
    train_records = [r for r in records if r["mode"] == "train"]
    assert train_records and all(
        isinstance(r["loss"], float) and r["loss"] > 0 for r in train_records
    )
    assert [r["iter"] for r in train_records] == list(range(1, len(train_records) + 1))
    assert sum(r["mode"] == "val" for r in records) == 2  # before and after training


def test_train_logs_its_loader_and_takes_mmdets_persistent_workers(
    trained: Path, tmp_path: Path
) -> None:
    (text_log,) = trained.glob("*[0-9].log")
    pinned = "pinned" if torch.cuda.is_available() else "not pinned"
    assert f"train loader: 8 images per batch, 0 workers, {pinned}" in text_log.read_text()
    options = TINY + ["data.workers_per_gpu=2", "data.persistent_workers=True"]
    proc = train(tmp_path, "--no-validate", options=options)
    assert f"train loader: 8 images per batch, 2 workers (persistent), {pinned}" in proc.stdout
    assert [r["epoch"] for r in json_records(tmp_path) if r["mode"] == "train"][-1] == 2


def test_checkpoint_loads_with_weights_only(trained: Path) -> None:
    checkpoint = torch.load(trained / "latest.pth", weights_only=True)
    assert set(checkpoint) == {"meta", "state_dict", "optimizer", "rng"}
    meta = checkpoint["meta"]
    assert meta["epoch"] == 2 and meta["seed"] == 3 and meta["iter"] > 0
    assert "TinyDet" in meta["config"] and meta["config_dict"]["runner"]["max_epochs"] == 2
    assert set(checkpoint["rng"]) >= {"python", "numpy", "torch"}


def test_resume_reaches_the_same_parameters(trained: Path, tmp_path: Path) -> None:
    first = [o if o != "runner.max_epochs=2" else "runner.max_epochs=1" for o in TINY]
    train(tmp_path, options=first)
    assert not (tmp_path / "epoch_2.pth").exists()
    proc = train(tmp_path, "--resume-from", str(tmp_path / "epoch_1.pth"))
    assert "resumed from" in proc.stdout
    resumed = torch.load(tmp_path / "epoch_2.pth", weights_only=True)
    straight = torch.load(trained / "epoch_2.pth", weights_only=True)
    assert resumed["meta"]["iter"] == straight["meta"]["iter"]
    for key, value in straight["state_dict"].items():
        assert torch.equal(resumed["state_dict"][key], value), key


def test_auto_resume_continues_from_latest(trained: Path, tmp_path: Path) -> None:
    for name in ("epoch_2.pth",):
        (tmp_path / name).write_bytes((trained / name).read_bytes())
    (tmp_path / "latest.pth").symlink_to("epoch_2.pth")
    options = [o if o != "runner.max_epochs=2" else "runner.max_epochs=3" for o in TINY]
    proc = train(tmp_path, "--auto-resume", "--no-validate", options=options)
    assert "resumed from" in proc.stdout and "epoch 2" in proc.stdout
    assert torch.load(tmp_path / "latest.pth", weights_only=True)["meta"]["epoch"] == 3
    assert not (tmp_path / "epoch_1.pth").exists()  # nothing was retrained


def test_test_tool_prints_and_saves_map(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "results.pkl"
    proc = run_tool(
        [
            "tools/test.py",
            CONFIG,
            str(trained / "latest.pth"),
            "--out",
            str(out),
            "--eval",
            "--cfg-options",
            *TINY,
        ]
    )
    assert "mAP@0.5: " in proc.stdout
    with open(out, "rb") as f:
        results = pickle.load(f)
    assert len(results) == 8 and all(len(per_image) == 3 for per_image in results)
    metrics = json.loads((tmp_path / "results.metrics.json").read_text())
    assert 0.0 <= metrics["mAP"] <= 1.0 and metrics["num_images"] == 8
    assert f"{metrics['mAP']:.4f}" in proc.stdout


def test_test_tool_needs_out_or_eval(trained: Path) -> None:
    proc = run_tool(["tools/test.py", CONFIG, str(trained / "latest.pth")], check=False)
    assert proc.returncode != 0 and "--out" in proc.stderr and "--eval" in proc.stderr


def test_cfg_options_override_and_syncbn_is_converted(tmp_path: Path) -> None:
    options = TINY + ["runner.max_epochs=1", "model.norm_cfg.type=SyncBN", "optimizer.lr=0.001"]
    proc = train(tmp_path, "--no-validate", options=options)
    assert "SyncBatchNorm layers converted to BatchNorm2d (no process group)" in proc.stderr
    assert sorted(p.name for p in tmp_path.glob("epoch_*.pth")) == ["epoch_1.pth"]
    dumped = (tmp_path / "tiny_det_synthetic.py").read_text()
    assert "type='SyncBN'" in dumped and "lr=0.001" in dumped
    # Every logged lr is the schedule of the overridden base lr (0.003 would give 3x these).
    from mmpar.runner.lr_schedule import check_lr_config, scheduled_lr

    schedule = check_lr_config(
        dict(policy="step", step=[7], gamma=0.1, warmup="linear", warmup_iters=16, warmup_ratio=0.1)
    )
    records = [r for r in json_records(tmp_path) if r.get("mode") == "train"]
    assert records
    for r in records:
        expected = scheduled_lr(0.001, schedule, r["epoch"] - 1, r["iter"] - 1, len(records))
        assert r["lr"] == pytest.approx(expected, rel=0.01)  # the log keeps 3 significant digits


def test_auto_scale_lr(tmp_path: Path) -> None:
    options = TINY + ["runner.max_epochs=1", "data.samples_per_gpu=4"]
    proc = train(tmp_path, "--no-validate", "--auto-scale-lr", options=options)
    assert "auto_scale_lr: lr 0.003 -> 0.00075 (batch size 4 vs base 16)" in proc.stdout


@pytest.mark.parametrize(
    "body, line, what",
    [
        ("_base_ = []\nmodel = dict(type='TinyDet'\nx = 1\n", None, "SyntaxError"),
        ("a = 1\nb = 2\nc = undefined_name + 1\n", 3, "NameError"),
    ],
)
def test_broken_config_fails_clearly(
    tmp_path: Path, body: str, line: Optional[int], what: str
) -> None:
    config = tmp_path / "broken.py"
    config.write_text(body)
    proc = run_tool(
        ["tools/train.py", str(config), "--work-dir", str(tmp_path / "wd")], check=False
    )
    assert proc.returncode != 0
    assert str(config) in proc.stderr and "line " in proc.stderr
    if line is not None:
        assert f"line {line}" in proc.stderr and what in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_resume_checkpoint_fails_clearly(tmp_path: Path) -> None:
    proc = train(tmp_path, "--resume-from", str(tmp_path / "nope.pth"), check=False)
    assert proc.returncode != 0 and "nope.pth" in proc.stderr and "not found" in proc.stderr


def test_corrupt_resume_checkpoint_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "bad.pth").write_bytes(b"PK\x03\x04 not really a checkpoint")
    proc = train(tmp_path, "--resume-from", str(tmp_path / "bad.pth"), check=False)
    assert proc.returncode != 0 and "bad.pth" in proc.stderr and "corrupt" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_torchrun_two_gloo_processes_train_and_test(trained: Path, tmp_path: Path) -> None:
    options = TINY + ["runner.max_epochs=1", "data.samples_per_gpu=4"] + GLOO
    proc = run_tool(
        [
            *torchrun_launcher(),
            "tools/train.py",
            CONFIG,
            "--work-dir",
            str(tmp_path / "dist"),
            "--seed",
            "3",
            "--launcher",
            "pytorch",
            "--cfg-options",
            *options,
        ]
    )
    assert "2 process(es), launcher pytorch" in proc.stdout
    if GLOO and torch.cuda.is_available():
        assert "training on the CPU although CUDA is available: the gloo backend" in proc.stdout
    checkpoint = torch.load(tmp_path / "dist" / "latest.pth", weights_only=True)
    assert checkpoint["meta"]["world_size"] == 2 and checkpoint["meta"]["epoch"] == 1
    # Distributed testing: every image once, in dataset order: the same detections as one process.
    run_tool(
        [
            *torchrun_launcher(),
            "tools/test.py",
            CONFIG,
            str(trained / "latest.pth"),
            "--launcher",
            "pytorch",
            "--out",
            str(tmp_path / "dist.json"),
            "--eval",
            "--cfg-options",
            *TINY,
            *GLOO,
        ]
    )
    # Where the processes ran on the CPU (gloo), so does the reference: the same arithmetic.
    run_tool(
        [
            "tools/test.py",
            CONFIG,
            str(trained / "latest.pth"),
            "--out",
            str(tmp_path / "single.json"),
            "--cfg-options",
            *TINY,
        ],
        env={"CUDA_VISIBLE_DEVICES": ""} if GLOO else None,
    )
    dist_results = json.loads((tmp_path / "dist.json").read_text())
    single_results = json.loads((tmp_path / "single.json").read_text())
    assert len(dist_results) == len(single_results) == 8
    for img_dist, img_single in zip(dist_results, single_results):
        for cls_dist, cls_single in zip(img_dist, img_single):
            dets_dist = torch.tensor(cls_dist).reshape(-1, 5)
            assert torch.allclose(dets_dist, torch.tensor(cls_single).reshape(-1, 5), atol=1e-4)


@pytest.mark.slow
def test_torchrun_resume_restores_every_ranks_random_streams(tmp_path: Path) -> None:
    # No DataLoader workers: each rank flips images with its own main-process
    # stream (seeded seed + rank); resuming must give every rank its own stream back.
    options = TINY + ["data.samples_per_gpu=4", "data.workers_per_gpu=0"] + GLOO

    def torchrun_train(work_dir: Path, *extra: str, epochs: int = 2) -> None:
        run_tool(
            [
                *torchrun_launcher(),
                "tools/train.py",
                CONFIG,
                "--work-dir",
                str(work_dir),
                "--seed",
                "5",
                "--no-validate",
                "--launcher",
                "pytorch",
                *BITWISE,
                *extra,
                "--cfg-options",
                *options,
                f"runner.max_epochs={epochs}",
            ]
        )

    torchrun_train(tmp_path / "whole")
    torchrun_train(tmp_path / "split", epochs=1)
    first = torch.load(tmp_path / "split" / "latest.pth", weights_only=True)
    assert first["meta"]["epoch"] == 1 and len(first["rng_ranks"]) == 2
    assert first["rng_ranks"][0]["python"] != first["rng_ranks"][1]["python"]
    torchrun_train(tmp_path / "split", "--auto-resume")
    assert torch.load(tmp_path / "split" / "latest.pth", weights_only=True)["meta"]["epoch"] == 2
    whole = torch.load(tmp_path / "whole" / "latest.pth", weights_only=True)["state_dict"]
    resumed = torch.load(tmp_path / "split" / "latest.pth", weights_only=True)["state_dict"]
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() != 1, reason="needs a machine with exactly one GPU")
def test_torchrun_two_nccl_processes_on_one_gpu_stop_with_a_clear_error(tmp_path: Path) -> None:
    proc = run_tool(
        [
            *torchrun_launcher(),
            "tools/train.py",
            CONFIG,
            "--work-dir",
            str(tmp_path),
            "--launcher",
            "pytorch",
            "--cfg-options",
            *TINY,
        ],
        check=False,
    )
    assert proc.returncode != 0
    assert "2 processes on this node but 1 visible GPU(s)" in proc.stderr, proc.stderr[-3000:]
    assert (
        "dist_params.backend=gloo" in proc.stderr
        and "Duplicate GPU" not in proc.stderr + proc.stdout
    )


@pytest.mark.slow
@pytest.mark.cuda
def test_torchrun_one_nccl_process_trains_on_the_gpu(tmp_path: Path) -> None:
    options = TINY + ["runner.max_epochs=1", "dist_params.backend='nccl'"]
    proc = run_tool(
        [
            *torchrun_launcher(1),
            "tools/train.py",
            CONFIG,
            "--work-dir",
            str(tmp_path),
            "--seed",
            "3",
            "--launcher",
            "pytorch",
            "--cfg-options",
            *options,
        ]
    )
    assert "training on cuda:0" in proc.stdout
    assert torch.load(tmp_path / "latest.pth", weights_only=True)["meta"]["world_size"] == 1


def test_lr_schedule_step_warmup_and_cosine() -> None:
    cfg = check_lr_config(
        dict(policy="step", step=[2], gamma=0.1, warmup="linear", warmup_iters=10, warmup_ratio=0.1)
    )
    assert scheduled_lr(1.0, cfg, epoch=0, iteration=0, max_iters=100) == pytest.approx(0.1)
    assert scheduled_lr(1.0, cfg, epoch=0, iteration=5, max_iters=100) == pytest.approx(0.55)
    assert scheduled_lr(1.0, cfg, epoch=1, iteration=20, max_iters=100) == pytest.approx(1.0)
    assert scheduled_lr(1.0, cfg, epoch=2, iteration=40, max_iters=100) == pytest.approx(0.1)
    cosine = check_lr_config(dict(policy="cosine", min_lr=0.0))
    assert scheduled_lr(2.0, cosine, 0, 50, 100) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="lr_config.policy"):
        check_lr_config(dict(policy="poly"))
    with pytest.raises(ValueError, match="lr_config.warmup_iters"):
        check_lr_config(dict(warmup="linear", warmup_iters=-1))


def test_scale_lr_needs_base_batch_size() -> None:
    optimizer = dict(type="SGD", lr=0.02)
    assert scale_lr(optimizer, dict(base_batch_size=16), 32) == pytest.approx(0.04)
    with pytest.raises(ValueError, match="base_batch_size"):
        scale_lr(dict(lr=0.1), None, 8)


@pytest.mark.slow
def test_train_benchmark_section_quick() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "mmpar_bench_train", ROOT / "tools" / "bench" / "train.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    section = module.run(quick=True)
    assert section.startswith("## Training loop")
    assert "| 1 process (MMDataParallel, CPU) |" in section
    assert "| 2 gloo processes (MMDistributedDataParallel, torchrun) |" in section
    assert "- target: 2 gloo processes" in section and (
        "met (" in section or "not met (" in section
    )
    assert "| bfloat16 autocast (`--amp`) |" in section and "| float32, compiled (" in section


def test_log_interval_below_one_is_a_clear_error(tmp_path: Path) -> None:
    proc = train(tmp_path, options=TINY + ["log_config.interval=0"], check=False)
    assert proc.returncode != 0 and "log_config.interval" in proc.stderr
