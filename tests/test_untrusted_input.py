"""Input that is not trusted is data, never code.

``--cfg-options`` values are read with ``ast.literal_eval`` or kept as strings
(``mmpar.config.dict_action``); JSON configs are parsed as JSON. Every payload below
would create a marker file if anything evaluated it; no test may see the file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, List

import pytest

from mmpar.config import Config, DictAction, parse_option_value

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "tiny_det" / "tiny_det_synthetic.py"
TINY = ["runner.max_epochs=1", "data.train.num_samples=8", "data.samples_per_gpu=4"]


def payloads(marker: Path) -> List[str]:
    """Expressions that create ``marker`` when evaluated (each in another disguise)."""
    touch = f"__import__('os').system('touch {marker}')"
    return [
        touch,
        f'eval("{touch}")',
        f'exec("{touch}")',
        f"lambda: {touch}",
        "f'{" + touch.replace("'", '"') + "}'",
        f"[{touch}, 1]",
        f"({touch},)",
        f"{{'a': {touch}}}",
        f"1 if {touch} else 2",
        f"__import__('subprocess').call(['touch', '{marker}'])",
        f"open('{marker}', 'w')",
        "().__class__.__base__.__subclasses__()",
        f"'''; {touch}; x='''",  # tries to break out of the quotes of a dumped config
        f"x\n{touch}",
    ]


def _plain_values(value: Any) -> bool:
    """Only literal data: strings, numbers, bools, None in lists, tuples and dicts."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain_values(v) for v in value)
    if isinstance(value, dict):
        return all(_plain_values(k) and _plain_values(v) for k, v in value.items())
    return False


def test_parse_option_value_never_runs_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for text in payloads(marker):
        value = parse_option_value(text)
        assert _plain_values(value), (text, value)
        assert not marker.exists(), text
    assert parse_option_value(payloads(marker)[0]) == payloads(marker)[0]  # kept as typed


def test_dict_action_keys_and_values_stay_strings(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    parser = argparse.ArgumentParser()
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={})
    tokens = [f"k{i}={p}" for i, p in enumerate(payloads(marker))] + [f"{payloads(marker)[0]}=1"]
    options = parser.parse_args(["--cfg-options", *tokens]).cfg_options
    assert len(options) == len(tokens)
    assert all(_plain_values(v) for v in options.values())
    assert options["k0"] == payloads(marker)[0]
    cfg = Config.fromfile(CONFIG)
    cfg.merge_from_dict({k: v for k, v in options.items() if k.startswith("k")})
    assert cfg.k0 == payloads(marker)[0]
    assert not marker.exists()


def test_json_config_is_data_only(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    data = {f"p{i}": p for i, p in enumerate(payloads(marker))}
    data["nested"] = {"type": payloads(marker)[0], "list": payloads(marker)[:3]}
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(data))
    cfg = Config.fromfile(path)
    assert cfg.p0 == payloads(marker)[0] and cfg.nested.type == payloads(marker)[0]
    assert not marker.exists()
    # Written back as Python and read again (Python configs run as code): still strings.
    cfg.dump(tmp_path / "dumped.py")
    again = Config.fromfile(tmp_path / "dumped.py")
    assert again.to_dict() == cfg.to_dict()
    assert not marker.exists()


def _train(work_dir: Path, config: Path, options: List[str]) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "tools/train.py",
        str(config),
        "--work-dir",
        str(work_dir),
        "--seed",
        "0",
        "--no-validate",
        "--cfg-options",
        *TINY,
        *options,
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_train_cfg_options_payloads_are_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    options = [f"+custom.p{i}={p}" for i, p in enumerate(payloads(marker))]
    proc = _train(tmp_path / "work", CONFIG, options)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists()
    # The config the run dumped next to its checkpoints reads back with the payloads as strings.
    dumped = Config.fromfile(tmp_path / "work" / CONFIG.name)
    assert dumped.custom.p0 == payloads(marker)[0]
    assert not marker.exists()
    # A payload where a number is expected is refused with a message, not run.
    proc = _train(tmp_path / "work2", CONFIG, [f"model.width={payloads(marker)[0]}"])
    assert proc.returncode != 0 and not marker.exists()
    assert "width" in proc.stderr


@pytest.mark.slow
def test_train_with_a_json_config_does_not_execute_its_strings(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    config = tmp_path / "evil.json"
    config.write_text(
        json.dumps(
            {
                "_base_": str(CONFIG),
                "payload": payloads(marker)[0],
                "work_note": payloads(marker)[4],
            }
        )
    )
    proc = _train(tmp_path / "work", config, [])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists()
