#!/usr/bin/env python3
"""Plot training curves from the JSON logs that tools/train.py writes.

Example::

    python tools/plot_log.py work_dirs/tiny_det_synthetic/20240101_120000.log.json --keys loss loss_heatmap --out curve.png

Each key of each log becomes one line over the training iterations (``mode: train``
records; ``mAP`` plots the ``mode: val`` records). Needs matplotlib:
``pip install mmpar[plot]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

Series = Dict[str, Tuple[List[int], List[float]]]


def load_json_log(path: Path, keys: Sequence[str]) -> Series:
    """``{key: (iterations, values)}`` from one ``.log.json`` file.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a line is not JSON (naming the file and line), or a key is in no record.
    """
    series: Series = {k: ([], []) for k in keys}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {number}: not a JSON object ({exc.msg})") from None
            for key in keys:
                wanted_mode = "val" if key == "mAP" else "train"
                if record.get("mode") == wanted_mode and isinstance(record.get(key), (int, float)):
                    series[key][0].append(int(record.get("iter", len(series[key][0]))))
                    series[key][1].append(float(record[key]))
    missing = [k for k, (xs, _) in series.items() if not xs]
    if missing:
        raise ValueError(f"{path}: no record holds the key(s) {missing}")
    return series


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(
            "error: plot_log.py needs matplotlib; install it with: pip install mmpar[plot]"
        ) from None
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def plot(logs: Sequence[Path], keys: Sequence[str], out: Path, title: str = "") -> Path:
    """Draw every key of every log on one figure and save it to ``out`` (PNG, SVG, PDF...)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for log in logs:
        for key, (xs, ys) in load_json_log(log, keys).items():
            label = key if len(logs) == 1 else f"{log.name}: {key}"
            ax.plot(xs, ys, marker="o" if key == "mAP" else None, markersize=3, label=label)
    ax.set_xlabel("iteration")
    ax.set_ylabel(", ".join(keys))
    ax.set_title(title or ", ".join(log.name for log in logs))
    ax.grid(True, alpha=0.3)
    ax.legend()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "logs", nargs="+", type=Path, help="JSON log file(s) (<timestamp>.log.json)"
    )
    parser.add_argument("--keys", nargs="+", default=["loss"], help="what to plot (default: loss)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("curve.png"),
        help="image file to write (default: curve.png)",
    )
    parser.add_argument("--title", default="", help="figure title")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.logs if not p.is_file()]
    if missing:
        parser.error(f"log file(s) not found: {missing}")
    try:
        out = plot(args.logs, args.keys, args.out, args.title)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
