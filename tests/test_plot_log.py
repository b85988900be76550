"""tools/plot_log.py: JSON logs to PNG curves."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_tool():
    spec = importlib.util.spec_from_file_location("plot_log_tool", ROOT / "tools" / "plot_log.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_log(path: Path) -> Path:
    records = [dict(mode="meta", seed=0), dict(mode="val", epoch=0, iter=0, mAP=0.0)]
    records += [
        dict(mode="train", epoch=1, iter=i, lr=0.01, loss=3.0 / i, loss_heatmap=2.0 / i)
        for i in range(1, 9)
    ]
    records.append(dict(mode="val", epoch=1, iter=8, mAP=0.6))
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_cli_writes_a_png(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.log.json")
    out = tmp_path / "curve.png"
    proc = subprocess.run(
        [
            sys.executable,
            "tools/plot_log.py",
            str(log),
            "--keys",
            "loss",
            "loss_heatmap",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 1000


def test_series_come_from_train_and_val_records(tmp_path: Path) -> None:
    series = load_tool().load_json_log(write_log(tmp_path / "a.log.json"), ["loss", "mAP"])
    assert series["loss"][0] == list(range(1, 9)) and series["loss"][1][0] == pytest.approx(3.0)
    assert series["mAP"] == ([0, 8], [0.0, 0.6])


def test_unknown_key_and_bad_json_are_reported(tmp_path: Path) -> None:
    tool = load_tool()
    log = write_log(tmp_path / "a.log.json")
    with pytest.raises(ValueError, match=r"no record holds the key\(s\) \['nope'\]"):
        tool.load_json_log(log, ["nope"])
    log.write_text('{"mode": "train", "iter": 1, "loss": 1.0}\nnot json\n')
    with pytest.raises(ValueError, match="line 2"):
        tool.load_json_log(log, ["loss"])
    assert tool.main([str(log), "--keys", "loss", "--out", str(tmp_path / "x.png")]) == 1


def test_missing_matplotlib_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    tool = load_tool()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(SystemExit, match=r"pip install mmpar\[plot\]"):
        tool._pyplot()
