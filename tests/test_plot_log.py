"""tools/plot_log.py: JSON logs to one panel per key, through the command line."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_tool():
    spec = importlib.util.spec_from_file_location("plot_log_tool", ROOT / "tools" / "plot_log.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def write_log(path: Path, with_map: bool = True) -> Path:
    """A log as tools/train.py writes it: 2 epochs of 4 iterations, mAP before and after each."""
    records = [dict(mode="meta", seed=0)]
    if with_map:
        records.append(dict(mode="val", tag="before training", epoch=0, iter=0, mAP=0.0))
    for epoch in (1, 2):
        records += [
            dict(mode="train", epoch=epoch, iter=i, lr=0.01, loss=3.0 / i, loss_heatmap=2.0 / i)
            for i in range(4 * epoch - 3, 4 * epoch + 1)
        ]
        if with_map:
            records.append(
                dict(mode="val", tag="val", epoch=epoch, iter=4 * epoch, mAP=0.3 * epoch)
            )
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def plot_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "tools/plot_log.py", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg"),
        capture_output=True,
        text=True,
        timeout=120,
    )


def svg_axes(path: Path) -> List[str]:
    """The ids of the axes (panels) of an SVG that matplotlib wrote."""
    return re.findall(r'<g id="(axes_\d+)">', path.read_text())


def test_cli_draws_one_panel_per_key(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.log.json")
    out = tmp_path / "curves.svg"
    proc = plot_cli(str(log), "--keys", "loss_heatmap", "loss", "mAP", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert svg_axes(out) == ["axes_1", "axes_2", "axes_3"]
    png = tmp_path / "curve.png"
    assert plot_cli(str(log), "--keys", "loss", "--out", str(png)).returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


def test_evaluation_keys_are_over_epochs_and_training_keys_over_iterations(tmp_path: Path) -> None:
    log = write_log(tmp_path / "a.log.json")
    tool = load_tool()
    curves = tool.load_json_log(log, ["loss", "mAP"])
    assert curves["loss"].steps == list(range(1, 9)) and not curves["loss"].per_epoch
    assert curves["loss"].values[0] == pytest.approx(3.0)
    assert curves["mAP"].steps == [0, 1, 2] and curves["mAP"].per_epoch
    assert curves["mAP"].values == pytest.approx([0.0, 0.3, 0.6])
    fig = tool.draw([log], ["loss", "mAP"])
    assert [ax.get_title() for ax in fig.axes] == ["loss", "mAP"]
    assert [ax.get_xlabel() for ax in fig.axes] == ["iteration", "epoch"]
    assert [len(ax.get_lines()) for ax in fig.axes] == [1, 1]


def test_an_empty_log_in_a_glob_is_skipped_with_a_warning(tmp_path: Path) -> None:
    good = write_log(tmp_path / "good.log.json")
    empty = tmp_path / "empty.log.json"
    empty.write_text("")
    meta_only = tmp_path / "meta.log.json"
    meta_only.write_text(json.dumps(dict(mode="meta", seed=0)) + "\n")
    out = tmp_path / "curves.svg"
    proc = plot_cli(
        str(empty), str(good), str(meta_only), "--keys", "loss", "mAP", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {empty}: no training or evaluation records; skipped" in proc.stderr
    assert f"warning: {meta_only}: no training or evaluation records; skipped" in proc.stderr
    assert len(svg_axes(out)) == 2


def test_a_key_missing_from_one_log_is_a_warning(tmp_path: Path) -> None:
    with_map = write_log(tmp_path / "a.log.json")
    without = write_log(tmp_path / "b.log.json", with_map=False)
    fig = load_tool().draw([with_map, without], ["loss", "mAP"])
    assert [len(ax.get_lines()) for ax in fig.axes] == [2, 1]


def error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_user_errors_are_one_line(tmp_path: Path) -> None:
    log = write_log(tmp_path / "a.log.json")
    out = str(tmp_path / "x.png")
    assert "['nope']" in error_line(plot_cli(str(log), "--keys", "nope", "--out", out))
    bad = tmp_path / "bad.log.json"
    bad.write_text('{"mode": "train", "iter": 1, "loss": 1.0}\nnot json\n')
    assert f"{bad}, line 2" in error_line(plot_cli(str(bad), "--out", out))
    missing = str(tmp_path / "missing.log.json")
    assert missing in error_line(plot_cli(missing, "--out", out))
    empty = tmp_path / "empty.log.json"
    empty.write_text("")
    assert "holds a record" in error_line(plot_cli(str(empty), "--out", out))
    debug = plot_cli(str(bad), "--out", out, "--debug")
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_missing_matplotlib_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    tool = load_tool()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(SystemExit) as exc:
        tool._pyplot()
    assert exc.value.code == 2
    assert "pip install -e '.[plot]'" in capsys.readouterr().err
