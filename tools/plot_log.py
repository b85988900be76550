#!/usr/bin/env python3
"""Plot training curves from the JSON logs that tools/train.py writes: one panel per key.

Examples::

    python tools/plot_log.py work_dirs/tiny/*.log.json --keys loss loss_heatmap mAP --out curves.png
    python tools/plot_log.py A.log.json B.log.json --keys mAP --out map.svg

A key logged while training (``mode: train`` records, e.g. ``loss``) is drawn over
the iterations; a key logged by the evaluations (``mode: val`` records, e.g.
``mAP``) over the epochs (0: before training). Each log is one line in each panel.
A log without records (e.g. a run that stopped before its first logging step) is
skipped with a warning; a key that no log holds is an error. Needs matplotlib:
``pip install -e ".[plot]"``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

try:
    import mmpar  # noqa: F401
except ImportError:  # a source checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mmpar.registry.registry import did_you_mean
from mmpar.runner.cli import add_debug_arg, fail, user_errors


@dataclasses.dataclass
class Curve:
    """One key of one log: ``values`` over ``steps`` (epochs or iterations)."""

    steps: List[int] = dataclasses.field(default_factory=list)
    values: List[float] = dataclasses.field(default_factory=list)
    per_epoch: bool = False


def _records(path: Path) -> List[Dict[str, Any]]:
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {number}: not a JSON object ({exc.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}, line {number}: not a JSON object")
            records.append(record)
    return records


def _is_value(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_json_log(path: Path, keys: Sequence[str]) -> Dict[str, Curve]:
    """The curves of ``keys`` in one ``.log.json`` file; keys it lacks are left out.

    A key held by ``mode: train`` records is taken over their ``iter``; otherwise
    from ``mode: val`` records over their ``epoch`` (``per_epoch``).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a line is not a JSON object (naming the file and line).
    """
    records = _records(path)
    curves: Dict[str, Curve] = {}
    for key in keys:
        for mode, step, per_epoch in (("train", "iter", False), ("val", "epoch", True)):
            held = [r for r in records if r.get("mode") == mode and _is_value(r.get(key))]
            if held:
                curves[key] = Curve(
                    [int(r.get(step, i)) for i, r in enumerate(held)],
                    [float(r[key]) for r in held],
                    per_epoch,
                )
                break
    return curves


def plottable_keys(path: Path) -> List[str]:
    """The keys that some training or evaluation record of the log holds a number for."""
    keys = set()
    for record in _records(path):
        if record.get("mode") in ("train", "val"):
            keys.update(k for k, v in record.items() if _is_value(v) and k not in ("iter", "epoch"))
    return sorted(keys)


def has_records(path: Path) -> bool:
    """Whether the log holds a training or evaluation record (not only its meta line)."""
    return any(r.get("mode") in ("train", "val") for r in _records(path))


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        fail("plot_log.py needs matplotlib; install it with: pip install -e '.[plot]'")
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def draw(logs: Sequence[Path], keys: Sequence[str], title: str = ""):
    """A matplotlib Figure with one panel (axes) per key and one line per log in each.

    Logs without records, and keys missing from some logs, are skipped with a warning.

    Raises:
        ValueError: no log has records, or a key is in none of them.
    """
    used = [log for log in logs if has_records(log)]
    if not used:
        raise ValueError(
            f"none of the logs {[str(p) for p in logs]} holds a record to plot; "
            "give .log.json files of runs that logged at least one step"
        )
    for log in logs:
        if log not in used:
            _warn(f"{log}: no training or evaluation records; skipped")
    curves = {log: load_json_log(log, keys) for log in used}
    missing = [k for k in keys if not any(k in c for c in curves.values())]
    if missing:
        known = sorted({k for log in used for k in plottable_keys(log)})
        close = " ".join(
            f"{k!r}: {did_you_mean(k, known)}" for k in missing if did_you_mean(k, known)
        )
        raise ValueError(
            f"--keys: no record of {[str(p) for p in used]} holds {missing}; "
            f"{close}the logs hold {known}"
        )
    plt = _pyplot()
    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 3 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        per_epoch = False
        for log in used:
            curve = curves[log].get(key)
            if curve is None:
                _warn(f"{log}: no record holds {key!r}; not in that panel")
                continue
            per_epoch = curve.per_epoch
            marker = "o" if per_epoch else None
            ax.plot(curve.steps, curve.values, marker=marker, markersize=3, label=log.name)
        ax.set_title(key)
        ax.set_xlabel("epoch" if per_epoch else "iteration")
        ax.set_ylabel(key)
        ax.grid(True, alpha=0.3)
        if len(used) > 1:
            ax.legend()
    fig.suptitle(title or ", ".join(log.name for log in used))
    fig.tight_layout()
    return fig


def plot(logs: Sequence[Path], keys: Sequence[str], out: Path, title: str = "") -> Path:
    """Draw ``keys`` of ``logs`` (see :func:`draw`) and save it to ``out`` (PNG, SVG, PDF...)."""
    fig = draw(logs, keys, title)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100, bbox_inches="tight")
    _pyplot().close(fig)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "logs", nargs="+", type=Path, help="JSON log file(s) (<timestamp>.log.json)"
    )
    parser.add_argument(
        "--keys", nargs="+", default=["loss"], help="what to plot, one panel each (default: loss)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("curve.png"),
        help="image file to write (default: curve.png)",
    )
    parser.add_argument("--title", default="", help="figure title")
    add_debug_arg(parser)
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.logs if not p.is_file()]
    if missing:
        fail(
            f"log file(s) not found: {missing}; give the .log.json files that tools/train.py wrote"
        )
    with user_errors(args.debug, errors=(ValueError, OSError)):
        out = plot(args.logs, args.keys, args.out, args.title)
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
