"""Transport section: what a collated batch costs to cross from a DataLoader worker.

A batch leaves a worker pickled by ``multiprocessing.reduction.ForkingPickler``
(with torch's reducers, as DataLoader's worker queue does it): each tensor storage
is moved into its own shared-memory segment and travels as a file descriptor,
which the main process receives, one connection to the worker's resource sharer
each, when it unpickles the batch. For batches of many small tensors that
crossing, not the worker's work, bounds the loader. Measured on small detection
samples (uint8 image 3 x (40-64) x (40-64), ``stack=True``, ``size_divisor=32``;
1-20 boxes float32 (k, 4) and labels int64 (k,); ``cpu_only`` metas), for 16 and
64 samples per batch, one chunk:

* ``loader only``: batches/s of a 2-worker ``DataLoader`` with ``mmpar.collate``,
  ``persistent_workers=True``, ``pin_memory=False``, over an epoch, touching
  nothing; one untimed epoch first starts the workers;
* ``crossing``: a producer process (the worker) builds a fresh batch (``samples``),
  collates it (``collate``) and pickles it (``pickle``); the bytes go through a
  pipe to the consumer (the main process), which unpickles them (``unpickle``),
  in lockstep. ``end to end`` runs from the start of the pickle to the end of the
  unpickle, the pipe and the scheduling included. The unpickle is timed in
  another process on purpose: unpickling in the pickling process would find the
  storages in torch's cache of shared storages instead of mapping them.

With ``--baseline REV`` the same runs on ``git archive REV mmpar`` as well: both
trees in child processes, alternating over several rounds so the noise of a
shared machine hits both alike; the figures are medians of the per-round medians
and their ratios this tree / baseline. Without it only this tree is measured.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "_transport_child.py"
BATCH_SIZES = (16, 64)
#: Issue 17's targets for B = 64: loader-only throughput against the baseline,
#: and pickle + unpickle of one batch.
TARGET_SPEEDUP = 5.0
TARGET_CROSSING_MS = 5.0

_TIMES = ("samples", "collate", "pickle", "unpickle", "total", "end_to_end")


def _export(rev: str, into: str) -> str:
    """``mmpar/`` of ``rev`` unpacked into ``into``; returns the tree's root."""
    data = subprocess.run(
        ["git", "archive", rev, "mmpar"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def _measure(script: str, tree: str, quick: bool) -> Dict[str, Any]:
    """One round on ``tree``: the child's JSON, after checking which mmpar it measured."""
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", script, "1" if quick else "0", *map(str, BATCH_SIZES)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"transport child on {tree} failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(out.pop("__file__")).resolve().is_relative_to(Path(tree).resolve()):
        raise RuntimeError(f"transport child imported mmpar from outside {tree}")
    return out


def _summary(rounds: List[Dict[str, Any]], batch_size: int) -> Dict[str, float]:
    """Medians over rounds of the per-round medians, for one batch size."""
    per_round: Dict[str, List[float]] = {k: [] for k in ("rate", *_TIMES, "payload")}
    for r in rounds:
        cell = r[str(batch_size)]
        reps = [dict(rep, total=rep["pickle"] + rep["unpickle"]) for rep in cell["crossing"]]
        per_round["rate"].append(statistics.median(cell["loader"]))
        for key in (*_TIMES, "payload"):
            per_round[key].append(statistics.median(rep[key] for rep in reps))
    out = {k: statistics.median(v) for k, v in per_round.items()}
    last = rounds[-1][str(batch_size)]["crossing"][-1]
    out["tensors"], out["storages"] = last["tensors"], last["storages"]
    return out


def _verdict(met: bool) -> str:
    """A target's verdict, in bold."""
    return "**met**" if met else "**not met**"


def run(quick: bool = False, baseline: Optional[str] = None) -> str:
    """Measure this tree (and ``baseline``'s ``mmpar/``) and return the Markdown section.

    Args:
        quick: One round of small epochs and few repeats (a smoke run, seconds).
        baseline: A git revision to measure side by side with this tree.

    Returns:
        The section, ending with a newline.
    """
    rounds = 1 if quick else 5
    trees = {"this tree": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        # The child runs from a folder of its own: a script's folder goes first on sys.path.
        script = os.path.join(tmp, "child", "transport_child.py")
        os.makedirs(os.path.dirname(script))
        shutil.copyfile(CHILD, script)
        if baseline:
            trees[f"baseline {baseline}"] = _export(baseline, os.path.join(tmp, "baseline"))
        results: Dict[str, List[Dict[str, Any]]] = {name: [] for name in trees}
        for r in range(rounds):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
            for name, tree in order:
                results[name].append(_measure(script, tree, quick))
    names = list(trees)
    med = {(n, b): _summary(results[n], b) for n in names for b in BATCH_SIZES}

    lines = [
        "## Transport: a collated batch from a DataLoader worker to the main process",
        "",
        "Small detection samples (uint8 image 3 x (40-64) x (40-64), 1-20 boxes and labels, "
        "`cpu_only` metas), one chunk per batch; CPU, child processes; medians of "
        f"{rounds} round(s)"
        + (f", this tree and `{baseline}` alternating" if baseline else "")
        + ". Ratios are this tree / baseline.",
        "",
        "### Loader only: batches/s, 2 workers, `persistent_workers=True`, `pin_memory=False`",
        "",
    ]
    header = "| batch | " + " | ".join(f"{n} (batches/s)" for n in names)
    header += " | this tree / baseline |" if baseline else " |"
    lines += [header, "|---|" + "---:|" * (header.count("|") - 2)]
    for b in BATCH_SIZES:
        row = f"| B={b} | " + " | ".join(f"{med[n, b]['rate']:,.1f}" for n in names)
        if baseline:
            row += f" | {med[names[0], b]['rate'] / med[names[1], b]['rate']:.2f}x"
        lines.append(row + " |")

    lines += [
        "",
        "### Crossing of one collated batch (ms)",
        "",
        "`samples` and `collate`: the worker's own work. `pickle`: "
        "`ForkingPickler.dumps(batch)` in the worker process, a fresh batch each time. "
        "`unpickle`: `pickle.loads(payload)` in the main process, the bytes having come "
        "through a pipe. `total`: pickle + unpickle. `end to end`: from the start of the "
        "pickle to the end of the unpickle.",
        "",
        "| batch | tree | tensors | storages | payload (KiB) | samples | collate | pickle "
        "| unpickle | total | end to end |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b in BATCH_SIZES:
        for n in names:
            m = med[n, b]
            lines.append(
                f"| B={b} | {n} | {m['tensors']:.0f} | {m['storages']:.0f} | "
                f"{m['payload'] / 1024:.1f} | "
                + " | ".join(f"{m[k] * 1e3:.2f}" for k in _TIMES)
                + " |"
            )
        if baseline:
            this, base = med[names[0], b], med[names[1], b]
            lines.append(
                f"| B={b} | this tree / baseline | | | {this['payload'] / base['payload']:.2f}x | "
                + " | ".join(f"{this[k] / base[k]:.2f}x" for k in _TIMES)
                + " |"
            )

    big = max(BATCH_SIZES)
    this = med[names[0], big]
    lines.append("")
    if baseline:
        speedup = this["rate"] / med[names[1], big]["rate"]
        lines.append(
            f"- Target: loader-only throughput for B={big} >= {TARGET_SPEEDUP:g}x `{baseline}`: "
            f"{speedup:.2f}x, {_verdict(speedup >= TARGET_SPEEDUP)}"
        )
    else:
        lines.append(
            f"- Target: loader-only throughput for B={big} >= {TARGET_SPEEDUP:g}x the baseline: "
            f"not judged without `--baseline REV` (this tree: {this['rate']:,.1f} batches/s)"
        )
    crossing_ms = this["total"] * 1e3
    against = f" (`{baseline}`: {med[names[1], big]['total'] * 1e3:.2f} ms)" if baseline else ""
    lines.append(
        f"- Target: pickle + unpickle of one B={big} batch <= {TARGET_CROSSING_MS:g} ms: "
        f"this tree {crossing_ms:.2f} ms{against}, "
        f"{_verdict(crossing_ms <= TARGET_CROSSING_MS)}"
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run(baseline=sys.argv[1] if len(sys.argv) > 1 else None))
