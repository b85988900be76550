"""Hot-path section: collate and scatter per batch, this tree against a baseline revision.

What every training step pays outside the model, on the CPU:

* ``collate, detection fields``: 16 samples of a small image (3 x 40-64 x 40-64,
  ``stack=True``), per-image boxes and labels, and ``cpu_only`` metas, into 2
  chunks. Small images on purpose: the per-field work is what a change to the
  container handling could slow down, and large images would hide it;
* ``collate, 16 full-size images``: the collate section's batch (uint8,
  3 x (600-800) x (900-1333), one chunk), where the copy dominates;
* ``scatter to 1 target`` (what MMDataParallel does per step) and ``scatter to
  2 targets`` of the collated detection batch, CPU targets.

With ``--baseline REV`` the same measurement runs on ``git archive REV mmpar``
as well: both trees in child processes, alternating over several rounds so the
noise of a shared machine hits both alike; the figures are medians of the
per-round medians and their ratio. Without it only this tree is measured. When
mmcv 1.x is installed, the same batch built from mmcv's containers (adopted by
mmpar as they come) is measured on this tree too.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
TARGET_SLOWDOWN = 0.05

# Runs in a child process with PYTHONPATH set to the tree under test.
_WORKER = r"""
import json, statistics, sys, time
import torch
from mmpar import DataContainer, collate, scatter

quick = sys.argv[1] == "1"
foreign = sys.argv[2] == "1"
torch.set_num_threads(1)
DC = DataContainer
if foreign:
    import mmcv.parallel
    DC = mmcv.parallel.DataContainer

g = torch.Generator().manual_seed(0)
def rint(lo, hi):
    return int(torch.randint(lo, hi + 1, (1,), generator=g))

small = []
for i in range(16):
    k = rint(0, 20)
    small.append({
        "img": DC(torch.rand(3, rint(40, 64), rint(40, 64), generator=g), stack=True),
        "gt_bboxes": DC(torch.rand(k, 4, generator=g)),
        "gt_labels": DC(torch.randint(0, 80, (k,), generator=g)),
        "img_metas": DC({"index": i, "img_shape": (64, 64, 3), "flip": False}, cpu_only=True),
    })
scale = 0.25 if quick else 1.0
def full_size():
    shape = (3, int(rint(600, 800) * scale), int(rint(900, 1333) * scale))
    return DC(torch.randint(0, 256, shape, generator=g, dtype=torch.uint8), stack=True)
big = [{"img": full_size()} for _ in range(16)]
batch = collate(small, samples_per_gpu=8)
one = collate(small, samples_per_gpu=16)

cases = {
    "collate, detection fields": (lambda: collate(small, samples_per_gpu=8), 50 if quick else 400),
    "collate, 16 full-size images": (lambda: collate(big, samples_per_gpu=16), 3 if quick else 15),
    "scatter to 1 target": (lambda: scatter(one, ["cpu"]), 50 if quick else 400),
    "scatter to 2 targets": (lambda: scatter(batch, ["cpu", "cpu"]), 50 if quick else 400),
}
out = {}
for name, (fn, n) in cases.items():
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    out[name] = statistics.median(times)
import mmpar
out["__file__"] = mmpar.__file__
print(json.dumps(out))
"""


def _export(rev: str, into: str) -> str:
    """``mmpar/`` of ``rev`` unpacked into ``into``; returns the tree's root."""
    data = subprocess.run(
        ["git", "archive", rev, "mmpar"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def _measure(tree: str, quick: bool, foreign: bool = False) -> Dict[str, float]:
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-c",
            _WORKER,
            "1" if quick else "0",
            "1" if foreign else "0",
        ],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"hotpath worker on {tree} failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out.pop("__file__").startswith(str(Path(tree).resolve())):
        raise RuntimeError(f"hotpath worker imported mmpar from outside {tree}")
    return out


def _has_mmcv1() -> bool:
    try:
        from importlib.metadata import version

        return version("mmcv").startswith("1.")
    except Exception:  # not installed
        return False


def _medians(rounds: List[Dict[str, float]]) -> Dict[str, float]:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def run(quick: bool = False, baseline: Optional[str] = None) -> str:
    rounds = 2 if quick else 7
    trees = {"this tree": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        if baseline:
            trees[f"baseline {baseline}"] = _export(baseline, tmp)
        results: Dict[str, List[Dict[str, float]]] = {name: [] for name in trees}
        for r in range(rounds):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
            for name, tree in order:
                results[name].append(_measure(tree, quick))
        foreign = (
            _medians([_measure(str(ROOT), quick, foreign=True) for _ in range(rounds)])
            if _has_mmcv1()
            else None
        )
    med = {name: _medians(rs) for name, rs in results.items()}
    names = list(trees)
    header = "| case | " + " | ".join(f"{n} (us)" for n in names)
    header += " | this tree / baseline |" if baseline else " |"
    if foreign:
        header = header[:-1] + "| mmcv containers, this tree (us) |"
    lines = [
        "## Hot path: collate and scatter per batch",
        "",
        f"CPU, 1 thread, child processes; medians of {rounds} rounds"
        + (f", this tree and `{baseline}` alternating" if baseline else "")
        + ".",
        "",
        header,
        "|" + "---|" * (header.count("|") - 1),
    ]
    verdicts = []
    for case in med[names[0]]:
        row = f"| {case} | " + " | ".join(f"{med[n][case] * 1e6:,.0f}" for n in names)
        if baseline:
            ratio = med[names[0]][case] / med[names[1]][case]
            row += f" | {ratio:.3f}"
            verdicts.append(ratio <= 1 + TARGET_SLOWDOWN)
        if foreign:
            row += f" | {foreign[case] * 1e6:,.0f}"
        lines.append(row + " |")
    if baseline:
        met = all(verdicts)
        lines += [
            "",
            f"- Target: this tree at most {TARGET_SLOWDOWN:.0%} slower than `{baseline}` on every "
            f"case: **{'met' if met else 'NOT met'}**",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run(baseline=sys.argv[1] if len(sys.argv) > 1 else None))
