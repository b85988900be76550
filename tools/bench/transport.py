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
  another process on purpose: unpickling in the pickling process would still
  receive each fd, but find its storage in torch's cache of shared storages
  instead of mapping it.

With ``--baseline REV`` the same runs on ``git archive REV mmpar`` as well: each
tree in a long-lived child process (loaders, workers and producer started once),
the two taking turns measurement by measurement (one epoch, one crossing), the
order flipping each time, so that the noise of a shared machine hits both alike;
the figures are medians, the ratios this tree / baseline medians of the ratios
of the two measurements of each turn. Without it only this tree is measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import IO, Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "_transport_child.py"
BATCH_SIZES = (16, 64)
#: Issue 17's targets for B = 64: loader-only throughput against the baseline,
#: and pickle + unpickle of one batch.
TARGET_SPEEDUP = 5.0
TARGET_CROSSING_MS = 5.0

CHILD_TIMEOUT_S = 300

_TIMES = ("samples", "collate", "pickle", "unpickle", "total", "end_to_end")


def _export(rev: str, into: str) -> str:
    """``mmpar/`` of ``rev`` unpacked into ``into``; returns the tree's root."""
    data = subprocess.run(
        ["git", "archive", rev, "mmpar"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


class _Child:
    """The measuring process on one tree (``_transport_child.py``), one command at a time.

    Args:
        script: The copy of ``_transport_child.py`` to run.
        tree: The root of the tree whose ``mmpar`` it measures.
        samples: Samples per loader epoch, whatever the batch size (epochs of one length).
        log: A file for its stderr, shown when it fails.
    """

    def __init__(self, script: str, tree: str, samples: int, log: IO[str]) -> None:
        self.tree, self.log = tree, log
        self.proc = subprocess.Popen(
            [sys.executable, "-W", "ignore", script, str(samples), *map(str, BATCH_SIZES)],
            env=dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1"),
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            where = Path(self._read()["__file__"]).resolve()
            if not where.is_relative_to(Path(tree).resolve()):
                raise RuntimeError(f"transport child imported mmpar from {where}, not {tree}")
        except BaseException:
            self.close()
            raise

    def _read(self) -> Dict[str, Any]:
        ready, _, _ = select.select([self.proc.stdout], [], [], CHILD_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            self.log.seek(0)
            what = "failed" if ready else f"gave no answer in {CHILD_TIMEOUT_S} s"
            raise RuntimeError(f"transport child on {self.tree} {what}:\n{self.log.read()[-2000:]}")
        return json.loads(line)

    def ask(self, command: str) -> Dict[str, Any]:
        """Send one command (``loader B`` or ``cross B``) and return its answer."""
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        """End of input: the child shuts its workers down and exits (or is killed)."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def _series(results: Dict[str, list]) -> Dict[str, List[float]]:
    """One tree's figures for one batch size, in turn order: rates per epoch, times per crossing."""
    reps = results["crossing"]
    out = {"rate": list(results["loader"])}
    for key in (*_TIMES, "payload", "tensors", "storages"):
        out[key] = [r["pickle"] + r["unpickle"] if key == "total" else r[key] for r in reps]
    return out


def _paired_ratio(this: List[float], base: List[float]) -> float:
    """The median ratio of measurements taken in the same turn.

    The two of a pair ran seconds apart, so a shift in the machine's load between
    turns cancels out of their ratio, which a ratio of medians would keep.
    """
    return statistics.median(x / y for x, y in zip(this, base))


def _load_average() -> str:
    """The 1-minute load average, or ``n/a`` where the platform has none."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except (AttributeError, OSError):
        return "n/a"


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
    # Rounds; samples per loader epoch; crossings per batch size and round.
    rounds, samples, crossings = (1, 128, 2) if quick else (16, 320, 3)
    load_before = _load_average()
    trees = {"this tree": str(ROOT)}
    units = [("loader", b) for b in BATCH_SIZES]
    units += [("cross", b) for b in BATCH_SIZES for _ in range(crossings)]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        # The child runs from a folder of its own: a script's folder goes first on sys.path.
        script = os.path.join(tmp, "child", "transport_child.py")
        os.makedirs(os.path.dirname(script))
        shutil.copyfile(CHILD, script)
        if baseline:
            trees[f"baseline {baseline}"] = _export(baseline, os.path.join(tmp, "baseline"))
        children = {}
        for name, tree in trees.items():
            log = stack.enter_context(tempfile.TemporaryFile("w+"))
            children[name] = _Child(script, tree, samples, log)
            stack.callback(children[name].close)
        names = list(trees)
        results: Dict[Tuple[str, int], Dict[str, list]] = {
            (n, b): {"loader": [], "crossing": []} for n in names for b in BATCH_SIZES
        }
        turn = 0
        for _ in range(rounds):
            for kind, b in units:
                for name in names[::-1] if turn % 2 else names:
                    answer = children[name].ask(f"{kind} {b}")
                    if kind == "loader":
                        results[name, b]["loader"].append(answer["rate"])
                    else:
                        results[name, b]["crossing"].append(answer)
                turn += 1
    series = {key: _series(value) for key, value in results.items()}
    med = {key: {k: statistics.median(v) for k, v in s.items()} for key, s in series.items()}
    ratio = {
        b: {
            k: _paired_ratio(series[names[0], b][k], series[names[1], b][k])
            for k in ("rate", *_TIMES, "payload")
        }
        for b in BATCH_SIZES
        if baseline
    }

    lines = [
        "## Transport: a collated batch from a DataLoader worker to the main process",
        "",
        "Small detection samples (uint8 image 3 x (40-64) x (40-64), 1-20 boxes and labels, "
        "`cpu_only` metas), one chunk per batch; CPU, one child process per tree; medians "
        f"of {rounds} round(s) of one epoch ({samples} samples) and {crossings} crossings per "
        "batch size"
        + (
            f", this tree and `{baseline}` taking turns; ratios this tree / baseline are the "
            "medians of the ratios of the two measurements of each turn"
            if baseline
            else ""
        )
        + f". 1-minute load average before / after: {load_before} / {_load_average()} "
        f"({os.cpu_count()} CPUs): the loader figures swing with the load.",
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
            row += f" | {ratio[b]['rate']:.2f}x"
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
            lines.append(
                f"| B={b} | this tree / baseline | | | {ratio[b]['payload']:.2f}x | "
                + " | ".join(f"{ratio[b][k]:.2f}x" for k in _TIMES)
                + " |"
            )

    big = max(BATCH_SIZES)
    this = med[names[0], big]
    lines.append("")
    if baseline:
        speedup = ratio[big]["rate"]
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
