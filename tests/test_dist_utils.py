"""Tests of mmpar.dist, with real gloo process groups on 127.0.0.1."""

from __future__ import annotations

import datetime
import functools
import multiprocessing
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

import mmpar.dist.results as dist_results
from mmpar.dist import (
    all_gather_object_list,
    barrier,
    collect_results,
    expand_slurm_nodelist,
    get_dist_info,
    init_dist,
    is_main_process,
    master_only,
    slurm_first_host,
    sync_random_seed,
)
from tests._dist_helpers import (
    LAUNCH_VARS,
    clear_launch_env,
    free_port,
    run_launcher,
    run_workers,
    with_new_master_port,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No launcher variables in the environment; restored afterwards."""
    return clear_launch_env(monkeypatch)


# --------------------------------------------------------------------------- #
# Without a process group
# --------------------------------------------------------------------------- #
def test_single_process_defaults() -> None:
    assert not dist.is_initialized()
    assert get_dist_info() == (0, 1)
    assert is_main_process()
    barrier()
    assert all_gather_object_list({"a": 1}) == [{"a": 1}]
    assert sync_random_seed(123) == 123
    assert sync_random_seed(np.int64(7)) == 7
    drawn = sync_random_seed()
    assert isinstance(drawn, int) and 0 <= drawn < 2**31


@pytest.mark.parametrize(
    "seed, error", [("1", TypeError), (1.5, TypeError), (True, TypeError), (2**64, ValueError)]
)
def test_sync_random_seed_rejects(seed: Any, error: type) -> None:
    with pytest.raises(error, match="seed"):
        sync_random_seed(seed)


def test_master_only_keeps_metadata_and_runs_on_rank0() -> None:
    @master_only
    def save(path: str, *, tag: str = "x") -> str:
        """Save something."""
        return f"{path}:{tag}"

    assert save.__name__ == "save" and save.__doc__ == "Save something."
    assert save.__wrapped__.__name__ == "save"  # type: ignore[attr-defined]
    assert save("a", tag="b") == "a:b"


def test_init_dist_world_of_one_in_process(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("RANK", "0")
    clean_env.setenv("WORLD_SIZE", "1")
    clean_env.setenv("LOCAL_RANK", "0")
    clean_env.setenv("MASTER_ADDR", "127.0.0.1")
    clean_env.setenv("MASTER_PORT", str(free_port()))
    init_dist("pytorch", backend="gloo", timeout=30)
    try:
        assert get_dist_info() == (0, 1)
        assert dist.get_backend() == "gloo"
        assert sync_random_seed(5) == 5
        assert all_gather_object_list([1]) == [[1]]
        assert collect_results(["a", "b", "c"], 2) == ["a", "b"]
        with pytest.raises(RuntimeError, match="process group already exists"):
            init_dist("pytorch")
    finally:
        dist.destroy_process_group()
    assert get_dist_info() == (0, 1)


@pytest.mark.cuda
def test_init_dist_defaults_to_nccl_with_cuda(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("SLURM_PROCID", "0")
    clean_env.setenv("SLURM_NTASKS", "1")
    clean_env.setenv("SLURM_NODELIST", "127.0.0.1")
    init_dist("slurm", port=free_port(), timeout=60)
    try:
        assert dist.get_backend() == "nccl"
        assert torch.cuda.current_device() == 0
        assert os.environ["LOCAL_RANK"] == "0"
        assert sync_random_seed(11) == 11
        assert all_gather_object_list("x") == ["x"]
        assert collect_results([3, 1], 2, indices=[1, 0]) == [1, 3]
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------- #
# init_dist: argument and environment errors (no group is started)
# --------------------------------------------------------------------------- #
def test_unknown_launcher_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"launcher.*'pytorch', 'slurm', 'mpi'.*'torchrun'"):
        init_dist("torchrun")


@pytest.mark.parametrize(
    "launcher, given, missing",
    [
        ("pytorch", {"RANK": "0", "MASTER_ADDR": "h"}, ["WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"]),
        ("slurm", {"SLURM_PROCID": "0"}, ["SLURM_NTASKS", "SLURM_NODELIST"]),
        (
            "mpi",
            {"OMPI_COMM_WORLD_SIZE": "2"},
            ["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"],
        ),
    ],
)
def test_missing_env_variables_are_named(
    clean_env: pytest.MonkeyPatch, launcher: str, given: Dict[str, str], missing: List[str]
) -> None:
    for name, value in given.items():
        clean_env.setenv(name, value)
    with pytest.raises(ValueError) as info:
        init_dist(launcher)
    message = str(info.value)
    assert launcher in message
    for name in missing:
        assert name in message
    for name in given:
        assert f"'{name}'" not in message.split("expected all of")[0]
    assert not dist.is_initialized()


@pytest.mark.parametrize(
    "env, kwargs, error, match",
    [
        ({"RANK": "x"}, {}, ValueError, "RANK: expected an integer, got 'x'"),
        ({"RANK": "2"}, {}, ValueError, "RANK=2 is not below WORLD_SIZE=2"),
        ({"RANK": "-1"}, {}, ValueError, "RANK: expected an integer >= 0"),
        ({"MASTER_PORT": "70000"}, {}, ValueError, "MASTER_PORT: expected a TCP port"),
        ({}, {"timeout": 0}, ValueError, "timeout: expected a positive"),
        ({}, {"timeout": "5"}, TypeError, "timeout: expected seconds"),
        ({}, {"backend": 3}, TypeError, "backend: expected a str"),
        ({}, {"port": 1234}, ValueError, "port: only for"),
        (
            {},
            {"init_method": "tcp://x:1", "rank": 0},
            ValueError,
            r"kwargs: \['init_method', 'rank'\] are set by",
        ),
    ],
)
def test_pytorch_launcher_rejects_bad_values(
    clean_env: pytest.MonkeyPatch,
    env: Dict[str, str],
    kwargs: Dict[str, Any],
    error: type,
    match: str,
) -> None:
    base = {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }
    for name, value in {**base, **env}.items():
        clean_env.setenv(name, value)
    with pytest.raises(error, match=match):
        init_dist("pytorch", **kwargs)
    assert not dist.is_initialized()


def test_slurm_rejects_bad_port_and_rank(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("SLURM_PROCID", "0")
    clean_env.setenv("SLURM_NTASKS", "1")
    clean_env.setenv("SLURM_NODELIST", "node1")
    with pytest.raises(ValueError, match="port: expected a TCP port in 1..65535, got 0"):
        init_dist("slurm", port=0)
    with pytest.raises(TypeError, match="port: expected an int"):
        init_dist("slurm", port=1.5)
    clean_env.setenv("SLURM_PROCID", "1")
    with pytest.raises(ValueError, match="SLURM_PROCID=1 is not below SLURM_NTASKS=1"):
        init_dist("slurm")
    assert "RANK" not in os.environ  # nothing exported before the checks pass


# --------------------------------------------------------------------------- #
# Slurm node lists
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        ("node1", ["node1"]),
        ("127.0.0.1", ["127.0.0.1"]),
        ("node[01-03,07],gpu2", ["node01", "node02", "node03", "node07", "gpu2"]),
        ("gpu2,node[1-2]", ["gpu2", "node1", "node2"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[098-100]", ["n098", "n099", "n100"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("a-b.c[5],d[3-3]x", ["a-b.c5", "d3x"]),
        ("[1-2]", ["1", "2"]),
    ],
)
def test_expand_slurm_nodelist(nodelist: str, hosts: List[str]) -> None:
    assert expand_slurm_nodelist(nodelist) == hosts
    assert slurm_first_host(nodelist) == hosts[0]


@pytest.mark.parametrize(
    "nodelist, match",
    [
        ("", "comma-separated"),
        ("a,,b", "comma-separated"),
        ("node[1-3", "unbalanced"),
        ("node1-3]", "unbalanced"),
        ("n[[1]]", "nested"),
        ("n[3-1]", "descending range '3-1'"),
        ("n[a-b]", "invalid range 'a-b'"),
        ("n[]", "invalid range ''"),
        ("no de", "invalid host name 'no de'"),
    ],
)
def test_expand_slurm_nodelist_rejects(nodelist: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        expand_slurm_nodelist(nodelist)
    with pytest.raises(ValueError, match="nodelist"):
        slurm_first_host(nodelist)


def test_expand_slurm_nodelist_type_error() -> None:
    with pytest.raises(TypeError, match="nodelist: expected a str, got list"):
        expand_slurm_nodelist(["node1"])  # type: ignore[arg-type]


def test_first_host_does_not_expand_everything() -> None:
    assert slurm_first_host("n[0000000-9999999]") == "n0000000"


@settings(max_examples=60, deadline=None)
@given(
    prefix=st.from_regex(r"[a-z][a-z0-9-]{0,5}", fullmatch=True),
    ranges=st.lists(
        st.tuples(st.integers(0, 120), st.integers(0, 5), st.integers(1, 4)), min_size=1, max_size=4
    ),
)
def test_expand_slurm_nodelist_matches_formatting(prefix: str, ranges: List[Any]) -> None:
    specs, expected = [], []
    for lo, extent, width in ranges:
        specs.append(f"{lo:0{width}d}-{lo + extent:0{width}d}")
        expected += [f"{prefix}{n:0{width}d}" for n in range(lo, lo + extent + 1)]
    assert expand_slurm_nodelist(f"{prefix}[{','.join(specs)}],last") == expected + ["last"]


# --------------------------------------------------------------------------- #
# collect_results: single-process checks and simulated ranks
# --------------------------------------------------------------------------- #
def test_collect_results_single_process() -> None:
    assert collect_results([], 0) == []
    assert collect_results(("a", "b"), 2) == ["a", "b"]
    assert collect_results(["b", "a", "c"], 2, indices=[1, 0, 1]) == ["a", "b"]
    assert collect_results([10, 20], 2, indices=torch.tensor([1, 0])) == [20, 10]
    assert collect_results([10, 20], 2, indices=np.array([1, 0])) == [20, 10]


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        (([1, 2], -1), {}, ValueError, "size: expected a dataset length >= 0, got -1"),
        (([1, 2], 2.0), {}, TypeError, "size: expected an int, got float"),
        (("ab", 2), {}, TypeError, "results: expected a list"),
        (([1, 2], 3), {}, ValueError, "2 results over 1 ranks, fewer than size=3"),
        (([1, 2], 2), {"indices": [0]}, ValueError, r"one index per result \(2\), got 1"),
        (([1, 2], 2), {"indices": [0, 2]}, ValueError, r"index 2 is outside range\(size=2\)"),
        (([1, 2], 2), {"indices": [0, -1]}, ValueError, "index -1 is outside"),
        (([1, 2], 2), {"indices": [0, "1"]}, TypeError, "indices: expected ints, found str"),
        (([1, 2], 2), {"indices": 5}, TypeError, "indices: expected a sequence"),
        (
            ([1, 2, 3], 3),
            {"indices": [0, 0, 2]},
            ValueError,
            r"1 of 3 dataset indices have no result: \[1\]",
        ),
    ],
)
def test_collect_results_rejects(
    args: Any, kwargs: Dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        collect_results(*args, **kwargs)


def test_collect_results_names_many_missing_indices() -> None:
    with pytest.raises(
        ValueError, match=r"15 of 30 dataset indices .*\[1, 3, 5, .*19\] and 5 more"
    ):
        collect_results(list(range(30)), 30, indices=[i - i % 2 for i in range(30)])


def _sampler_parts(size: int, world: int, shuffle: bool, seed: int) -> List[List[int]]:
    """Per-rank dataset indices of a real DistributedSampler, without a group."""
    parts = []
    for rank in range(world):
        sampler = DistributedSampler(
            range(size), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed
        )
        sampler.set_epoch(seed)
        parts.append(list(sampler))
    return parts


@settings(max_examples=80, deadline=None)
@given(
    size=st.integers(0, 40), world=st.integers(1, 6), shuffle=st.booleans(), seed=st.integers(0, 10)
)
def test_collect_results_simulated_sampler_layouts(
    size: int, world: int, shuffle: bool, seed: int
) -> None:
    # The gather is simulated here; the real one is covered by the gloo tests below.
    parts = _sampler_parts(size, world, shuffle, seed)
    expected = [f"sample{i}" for i in range(size)]
    with_indices = [([f"sample{i}" for i in idx], idx) for idx in parts]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dist_results, "all_gather_object_list", lambda obj: with_indices)
        assert collect_results(with_indices[0][0], size, indices=parts[0]) == expected
        if not shuffle:
            plain = [(res, None) for res, _ in with_indices]
            patch.setattr(dist_results, "all_gather_object_list", lambda obj: plain)
            assert collect_results(plain[0][0], size) == expected


def test_collect_results_rejects_non_interleaved_lengths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        dist_results, "all_gather_object_list", lambda obj: [([1], None), ([2, 3], None)]
    )
    with pytest.raises(
        ValueError, match=r"per-rank lengths \[1, 2\] do not match an interleaved split"
    ):
        collect_results([1], 3)


# --------------------------------------------------------------------------- #
# Real 2- and 3-process gloo groups
# --------------------------------------------------------------------------- #
#: Two ranks cannot share one GPU under nccl, so on CUDA hosts the group tests
#: ask for gloo; without CUDA they leave the backend to init_dist's default.
_CPU_DEFAULT: Optional[str] = "gloo" if torch.cuda.is_available() else None


def _clear_launch_env() -> None:
    for name in LAUNCH_VARS:
        os.environ.pop(name, None)


def _exported_env() -> Dict[str, str]:
    return {
        name: os.environ[name]
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }


def _after_init(launcher: str) -> Dict[str, Any]:
    """What a rank sees once init_dist returned; also checks a real collective."""
    rank, world_size = get_dist_info()
    total = torch.tensor([rank + 1])
    dist.all_reduce(total)
    try:
        init_dist(launcher)
        again = "no error"
    except RuntimeError as exc:
        again = str(exc)
    return {
        "info": (rank, world_size),
        "sum": int(total),
        "backend": dist.get_backend(),
        "env": _exported_env(),
        "again": again,
    }


def _init_pytorch(rank: int, world_size: int) -> Dict[str, Any]:
    before = get_dist_info()
    init_dist("pytorch", backend=_CPU_DEFAULT, timeout=datetime.timedelta(seconds=30))
    return {"before": before, **_after_init("pytorch")}


def _init_slurm(rank: int, world_size: int, port: int) -> Dict[str, Any]:
    _clear_launch_env()
    os.environ.update(
        SLURM_PROCID=str(rank), SLURM_NTASKS=str(world_size), SLURM_NODELIST="localhost,gpu[2-3]"
    )
    if rank == 1:
        os.environ["SLURM_LOCALID"] = "5"  # rank 0 falls back to PROCID % gpus (0 on CPU)
    init_dist("slurm", backend=_CPU_DEFAULT, port=port, timeout=30)
    return _after_init("slurm")


def _init_mpi(rank: int, world_size: int, port: int) -> Dict[str, Any]:
    _clear_launch_env()
    os.environ.update(
        OMPI_COMM_WORLD_RANK=str(rank),
        OMPI_COMM_WORLD_SIZE=str(world_size),
        OMPI_COMM_WORLD_LOCAL_RANK=str(rank),
        MASTER_PORT=str(port),
    )
    init_dist("mpi", backend="gloo", timeout=30)
    return _after_init("mpi")


def test_init_dist_pytorch_two_processes() -> None:
    out = run_workers(_init_pytorch, 2, init_group=False, timeout=90)
    for rank, seen in enumerate(out):
        assert seen["before"] == (0, 1)
        assert seen["info"] == (rank, 2)
        assert seen["sum"] == 3
        assert seen["backend"] == "gloo"
        assert "process group already exists" in seen["again"]


def test_init_dist_slurm_two_processes() -> None:
    port = free_port()
    out = run_workers(_init_slurm, 2, port, init_group=False, timeout=90)
    assert [seen["info"] for seen in out] == [(0, 2), (1, 2)]
    assert [seen["sum"] for seen in out] == [3, 3]
    assert [seen["env"] for seen in out] == [
        {
            "RANK": str(r),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": local,
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": str(port),
        }
        for r, local in ((0, "0"), (1, "5"))
    ]


def test_init_dist_mpi_two_processes() -> None:
    port = free_port()
    out = run_workers(_init_mpi, 2, port, init_group=False, timeout=90)
    assert [seen["info"] for seen in out] == [(0, 2), (1, 2)]
    assert [seen["env"] for seen in out] == [
        {
            "RANK": str(r),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(r),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        for r in range(2)
    ]


_MISSING_PEER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from mmpar.dist import init_dist
    try:
        init_dist("pytorch", backend="gloo", timeout=3)
    except RuntimeError as exc:
        print("RAISED", type(exc).__name__)
    else:
        print("JOINED")
    """
)


@pytest.mark.parametrize("rank", [0, 1])
def test_missing_peer_raises_after_timeout(rank: int) -> None:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    proc = subprocess.run(
        [sys.executable, "-c", _MISSING_PEER.format(repo=str(REPO))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("RAISED"), (proc.stdout, proc.stderr[-2000:])


def _shared_values(rank: int, world_size: int) -> Dict[str, Any]:
    """Seeds, gathers and master_only inside a group made by run_workers."""
    np.random.seed(1000 + rank)  # ranks would draw different seeds on their own
    calls: List[int] = []
    tagged = master_only(functools.partial(calls.append, rank))
    barrier()
    return {
        "main": is_main_process(),
        "master_only": (tagged(), calls),
        "drawn": sync_random_seed(),
        "given": sync_random_seed(100 + rank),
        "rank0_none": sync_random_seed(None if rank == 0 else 7),
        "gathered": all_gather_object_list({"rank": rank}),
    }


def test_shared_values_in_group() -> None:
    out = run_workers(_shared_values, 2, timeout=90)
    assert [seen["main"] for seen in out] == [True, False]
    assert out[0]["master_only"] == (None, [0]) and out[1]["master_only"] == (None, [])
    assert out[0]["drawn"] == out[1]["drawn"] and 0 <= out[0]["drawn"] < 2**31
    assert out[0]["given"] == out[1]["given"] == 100
    assert out[0]["rank0_none"] == out[1]["rank0_none"] != 7
    assert out[0]["gathered"] == out[1]["gathered"] == [{"rank": 0}, {"rank": 1}]


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _collect_cases(rank: int, world_size: int, sizes: List[int]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for size in sizes:
        for shuffle in (False, True):
            idx = list(DistributedSampler(range(size), world_size, rank, shuffle=shuffle, seed=3))
            results = [{"id": i, "rank": rank} for i in idx]
            out[f"{size}-{shuffle}-indices"] = collect_results(results, size, indices=idx)
            if not shuffle:
                out[f"{size}-plain"] = collect_results(results, size)
    # Error cases: every rank sees the same gathered data, so every rank raises (no hang).
    out["mixed"] = _outcome(collect_results, [rank], 2, indices=[rank] if rank == 0 else None)
    out["missing"] = _outcome(collect_results, [rank, rank], world_size + 1, indices=[0, 0])
    out["short"] = _outcome(collect_results, [rank], world_size + 1)
    out["still_usable"] = all_gather_object_list(rank)
    return out


@pytest.mark.parametrize("world_size, sizes", [(2, [7, 0, 1]), (3, [7, 10, 2])])
def test_collect_results_in_group(world_size: int, sizes: List[int]) -> None:
    out = run_workers(_collect_cases, world_size, sizes, timeout=90)
    for size in sizes:
        expected_ids = list(range(size))
        for key in (f"{size}-False-indices", f"{size}-True-indices", f"{size}-plain"):
            merged = out[0][key]
            assert all(seen[key] == merged for seen in out)
            assert [item["id"] for item in merged] == expected_ids
            # No-shuffle layout: sample i was processed by rank i % W.
            if "True" not in key:
                assert [item["rank"] for item in merged] == [i % world_size for i in expected_ids]
    for seen in out:
        others = list(range(1, world_size))
        assert (
            seen["mixed"]
            == f"ValueError: indices: ranks {others} passed none while other ranks passed indices"
        )
        assert seen["missing"] == (
            f"ValueError: indices: {world_size} of {world_size + 1} dataset indices have no "
            f"result: {list(range(1, world_size + 1))}"
        )
        assert seen["short"] == (
            f"ValueError: results: {world_size} results over {world_size} ranks, fewer than "
            f"size={world_size + 1}"
        )
        assert seen["still_usable"] == list(range(world_size))


# --------------------------------------------------------------------------- #
# The run_workers helper itself
# --------------------------------------------------------------------------- #
def _fail_on_rank1(rank: int, world_size: int) -> int:
    if rank == 1:
        raise KeyError("rank one broke")
    return os.getpid()


def _hang(rank: int, world_size: int, pid_dir: str) -> None:
    Path(pid_dir, str(rank)).write_text(str(os.getpid()))
    time.sleep(600)


def _exit_hard(rank: int, world_size: int) -> None:
    os._exit(7)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_run_workers_reports_rank_error() -> None:
    with pytest.raises(RuntimeError, match=r"rank 1 raised:(.|\n)*KeyError: 'rank one broke'"):
        run_workers(_fail_on_rank1, 2, timeout=60)
    with pytest.raises(RuntimeError, match=r"rank 0 exited without a result \(exit code 7\)"):
        run_workers(_exit_hard, 1, init_group=False, timeout=60)


def test_run_workers_timeout_kills_everything(tmp_path: Path) -> None:
    # No process group: the 15 s only have to cover starting two interpreters.
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] did not finish within 15 s"):
        run_workers(_hang, 2, str(tmp_path), timeout=15, init_group=False)
    pids = [int(p.read_text()) for p in sorted(tmp_path.iterdir())]
    assert len(pids) == 2
    assert not any(_alive(pid) for pid in pids)
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        (["torchrun", "--master_port=1234", "a.py"], ["torchrun", "--master_port=999", "a.py"]),
        (
            ["torchrun", "--master-port", "1234", "a.py"],
            ["torchrun", "--master-port", "999", "a.py"],
        ),
        (["torchrun", "--nproc_per_node=2", "a.py"], None),
        (["torchrun", "--master_port"], None),
    ],
)
def test_with_new_master_port(cmd: List[str], expected: Optional[List[str]]) -> None:
    assert with_new_master_port(cmd, 999) == expected


def test_run_launcher_moves_off_a_master_port_that_another_process_took(tmp_path: Path) -> None:
    # What free_port cannot rule out: another process listens on the port by the time
    # torchrun binds it. The first launch fails in its store, the second gets a new port.
    script = tmp_path / "hello.py"
    script.write_text("import os\nprint('hello from rank', os.environ['RANK'])\n")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1"]
        cmd += [f"--master_port={port}", str(script)]
        result = run_launcher(cmd, timeout=120, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "hello from rank 0" in result.stdout
    assert f"--master_port={port}" not in result.args


def _ddp_in_a_cycle_then_destroy(rank: int, world_size: int) -> list:
    from torch.nn.parallel import DistributedDataParallel

    from mmpar.dist import destroy_dist

    model = DistributedDataParallel(torch.nn.Linear(2, 2))
    model(torch.ones(3, 2)).sum().backward()
    model.self_ref = [model]  # a cycle: only the garbage collector frees it
    del model
    destroy_dist()
    destroy_dist()  # a second call is a no-op
    return [dist.is_initialized()]


@pytest.mark.slow
def test_destroy_dist_frees_wrappers_in_cycles_and_leaves_the_group() -> None:
    assert run_workers(_ddp_in_a_cycle_then_destroy, 2, timeout=60) == [[False], [False]]


_LAUNCHER = """
import subprocess, sys, time
sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
child = subprocess.Popen(sleeper, start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(120)
"""


def test_run_launcher_timeout_stops_workers_in_their_own_sessions(tmp_path) -> None:
    from tests._dist_helpers import run_launcher

    pid_file = tmp_path / "worker.pid"
    with pytest.raises(subprocess.TimeoutExpired):
        run_launcher([sys.executable, "-c", _LAUNCHER, str(pid_file)], timeout=3)
    worker = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(worker):
        time.sleep(0.05)
    assert not _alive(worker), "the launcher's worker (own session, like torchrun's) survived"
