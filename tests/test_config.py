"""Tests for mmpar.config: Config, ConfigDict, _base_ inheritance, dump and DictAction."""

from __future__ import annotations

import argparse
import copy
import json
import keyword
import math
import pickle
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpar.config import Config, ConfigDict, DictAction, apply_custom_imports, parse_option_value


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- reading files


def test_python_config_keeps_public_names_only(tmp_path: Path) -> None:
    source = """\
        import os
        from collections import OrderedDict
        from math import floor

        def helper(x):
            return x * 2

        class Local:
            pass

        _hidden = 1
        depth = helper(25)
        model = dict(type="RetinaNet", backbone=dict(depth=depth, stages=(1, 2)))
        names = [os.path.basename("a/b.txt")]
        """
    path = write(tmp_path / "cfg.py", source)
    cfg = Config.fromfile(path)
    assert cfg.to_dict() == {
        "depth": 50,
        "model": {"type": "RetinaNet", "backbone": {"depth": 50, "stages": (1, 2)}},
        "names": ["b.txt"],
    }
    assert cfg.filename == str(path)
    assert cfg.text == textwrap.dedent(source)


def test_json_config_is_data(tmp_path: Path) -> None:
    data = {"model": {"type": "__import__('os').system('exit 1')", "depth": 50}, "steps": [8, 11]}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(data))
    cfg = Config.fromfile(str(path))
    assert cfg.to_dict() == data
    assert cfg.model.type == data["model"]["type"]


def test_nested_bases_with_relative_paths(tmp_path: Path) -> None:
    write(
        tmp_path / "configs/_base_/default.py",
        "seed = 0\nlog = dict(interval=50, hooks=['text'])\n",
    )
    write(
        tmp_path / "configs/_base_/models/retinanet.py",
        """\
        _base_ = "../default.py"
        model = dict(type="RetinaNet", backbone=dict(type="ResNet", depth=50),
                     neck=dict(type="FPN", out=256))
        log = dict(interval=10)
        """,
    )
    write(
        tmp_path / "configs/_base_/schedule.json",
        json.dumps({"optimizer": {"type": "SGD", "lr": 0.01}}),
    )
    path = write(
        tmp_path / "configs/retinanet/r101.py",
        """\
        _base_ = ["../_base_/models/retinanet.py", "../_base_/schedule.json"]
        model = dict(backbone=dict(depth=101))
        optimizer = dict(lr=0.02)
        """,
    )
    cfg = Config.fromfile(path)
    assert cfg.to_dict() == {
        "seed": 0,
        "log": {"interval": 10, "hooks": ["text"]},
        "model": {
            "type": "RetinaNet",
            "backbone": {"type": "ResNet", "depth": 101},
            "neck": {"type": "FPN", "out": 256},
        },
        "optimizer": {"type": "SGD", "lr": 0.02},
    }
    assert "_base_" not in cfg
    # With bases, .text holds every file read, each after a header, bases first.
    assert cfg.text.index("default.py") < cfg.text.index("retinanet.py") < cfg.text.index("r101.py")
    assert "optimizer = dict(lr=0.02)" in cfg.text


def test_later_base_wins_and_lists_are_replaced(tmp_path: Path) -> None:
    write(tmp_path / "a.py", "x = 1\nsteps = [1, 2, 3]\nd = dict(k=1)\n")
    write(tmp_path / "b.json", json.dumps({"x": 2, "d": {"j": 2}}))
    path = write(tmp_path / "c.py", "_base_ = ['a.py', 'b.json']\nsteps = [9]\n")
    assert Config.fromfile(path).to_dict() == {"x": 2, "steps": [9], "d": {"k": 1, "j": 2}}


def test_json_config_with_base(tmp_path: Path) -> None:
    write(tmp_path / "base/model.py", "model = dict(a=1, b=dict(c=2))\n")
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"_base_": "base/model.py", "model": {"b": {"d": 3}}}))
    assert Config.fromfile(path).to_dict() == {"model": {"a": 1, "b": {"c": 2, "d": 3}}}


def test_delete_replaces_base_dict(tmp_path: Path) -> None:
    write(
        tmp_path / "base.py",
        "optimizer = dict(type='SGD', lr=0.01, momentum=0.9)\nhead = dict(a=dict(b=1, c=2))\n",
    )
    path = write(
        tmp_path / "cfg.py",
        """\
        _base_ = 'base.py'
        optimizer = dict(_delete_=True, type='AdamW', lr=1e-4)
        head = dict(a=dict(_delete_=False, c=3))
        fresh = dict(_delete_=True, x=[dict(_delete_=True, y=1)])
        """,
    )
    assert Config.fromfile(path).to_dict() == {
        "optimizer": {"type": "AdamW", "lr": 1e-4},
        "head": {"a": {"b": 1, "c": 3}},
        "fresh": {"x": [{"y": 1}]},
    }


def test_delete_flag_must_be_bool(tmp_path: Path) -> None:
    write(tmp_path / "base.py", "opt = dict(lr=1)\n")
    path = write(tmp_path / "cfg.py", "_base_ = 'base.py'\nopt = dict(_delete_='yes', lr=2)\n")
    with pytest.raises(TypeError, match="opt._delete_: expected True or False"):
        Config.fromfile(path)


def test_diamond_bases_are_not_a_cycle(tmp_path: Path) -> None:
    write(tmp_path / "root.py", "r = 1\n")
    write(tmp_path / "left.py", "_base_ = 'root.py'\nl = 1\n")
    write(tmp_path / "right.py", "_base_ = 'root.py'\nq = 1\n")
    path = write(tmp_path / "top.py", "_base_ = ['left.py', 'right.py']\n")
    assert Config.fromfile(path).to_dict() == {"r": 1, "l": 1, "q": 1}


# --------------------------------------------------------------------------- broken configs


def test_missing_file_and_base(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.py"):
        Config.fromfile(tmp_path / "nope.py")
    path = write(tmp_path / "sub/cfg.py", "_base_ = ['../missing/base.py']\n")
    with pytest.raises(FileNotFoundError) as info:
        Config.fromfile(path)
    message = str(info.value)
    assert str(tmp_path / "missing" / "base.py") in message
    assert str(path) in message and "'../missing/base.py'" in message


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    write(tmp_path / "base.py", "a = 1\nb = 2\nmodel = dict(depth=50,\nc = 3\n")
    path = write(tmp_path / "cfg.py", "_base_ = 'base.py'\n")
    with pytest.raises(SyntaxError) as info:
        Config.fromfile(path)
    assert str(tmp_path / "base.py") in str(info.value) and "line 3" in str(info.value)
    assert info.value.filename == str(tmp_path / "base.py") and info.value.lineno == 3


def test_runtime_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "cfg.py", "a = 1\nb = {}\nc = b['missing']\n")
    with pytest.raises(KeyError) as info:
        Config.fromfile(path)
    assert str(path) in str(info.value) and "line 3" in str(info.value)


def test_base_cycle_lists_chain(tmp_path: Path) -> None:
    a = write(tmp_path / "a.py", "_base_ = 'sub/b.py'\nx = 1\n")
    b = write(tmp_path / "sub/b.py", "_base_ = '../c.json'\n")
    c = tmp_path / "c.json"
    c.write_text(json.dumps({"_base_": ["a.py"]}))
    with pytest.raises(ValueError) as info:
        Config.fromfile(a)
    assert str(info.value) == f"_base_ cycle: {a} -> {b} -> {c} -> {a}"


def test_self_base_is_a_cycle(tmp_path: Path) -> None:
    path = write(tmp_path / "me.py", "_base_ = './me.py'\n")
    with pytest.raises(ValueError, match="cycle"):
        Config.fromfile(path)


def test_unsupported_extensions(tmp_path: Path) -> None:
    yaml = write(tmp_path / "cfg.yaml", "a: 1\n")
    with pytest.raises(ValueError, match="'.yaml'"):
        Config.fromfile(yaml)
    path = write(tmp_path / "cfg.py", "_base_ = 'cfg.yaml'\n")
    with pytest.raises(ValueError, match=f"_base_ 'cfg.yaml' in {path}"):
        Config.fromfile(path)
    with pytest.raises(ValueError, match="'.txt'"):
        Config({"a": 1}).dump(tmp_path / "out.txt")


def test_invalid_json_and_bad_shapes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "a": 1,\n  "b": \n}\n')
    with pytest.raises(ValueError, match=r"bad\.json, line 4"):
        Config.fromfile(bad)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ValueError, match="top level, got list"):
        Config.fromfile(listed)
    wrong_base = write(tmp_path / "wb.py", "_base_ = 3\n")
    with pytest.raises(TypeError, match="_base_ must be a path"):
        Config.fromfile(wrong_base)
    with pytest.raises(TypeError, match="path"):
        Config.fromfile(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cfg_dict"):
        Config([1, 2])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- ConfigDict and access


def test_config_dict_access() -> None:
    cd = ConfigDict(
        {"model": {"backbone": {"depth": 50}}, "steps": [{"a": 1}], "pair": ({"b": 2},)}
    )
    assert cd.model.backbone.depth == 50 and cd["model"]["backbone"]["depth"] == 50
    assert isinstance(cd.steps[0], ConfigDict) and cd.steps[0].a == 1 and cd.pair[0].b == 2
    assert hasattr(cd, "model") and not hasattr(cd, "optimizer")
    with pytest.raises(AttributeError, match="'optimizer'"):
        cd.optimizer
    assert getattr(cd, "optimizer", "default") == "default"
    assert cd.get("optimizer") is None and "model" in cd and list(cd) == ["model", "steps", "pair"]
    cd.optimizer = {"lr": 0.1}
    cd.model.neck = {"out": 256}
    cd.setdefault("extra", {"x": 1})
    assert isinstance(cd.optimizer, ConfigDict) and cd.model.neck.out == 256 and cd.extra.x == 1
    del cd.optimizer
    with pytest.raises(AttributeError, match="'optimizer'"):
        del cd.optimizer
    assert isinstance(cd.copy(), ConfigDict) and "model" in dir(cd)


def test_config_dict_copy_and_pickle() -> None:
    cd = ConfigDict({"a": {"b": [1, {"c": 2}]}})
    for clone in (copy.deepcopy(cd), pickle.loads(pickle.dumps(cd))):
        assert (
            clone == cd and isinstance(clone, ConfigDict) and isinstance(clone.a.b[1], ConfigDict)
        )
        clone.a.b[1].c = 3
        assert cd.a.b[1].c == 2
    assert type(cd.to_dict()["a"]) is dict


def test_config_access_and_copies(tmp_path: Path) -> None:
    cfg = Config({"model": {"depth": 50}, "lr": 0.1}, filename=tmp_path / "x.py")
    assert cfg.model.depth == 50 and cfg["lr"] == 0.1 and cfg.get("nope", 3) == 3
    assert "model" in cfg and len(cfg) == 2 and list(cfg) == ["model", "lr"]
    assert sorted(cfg.keys()) == ["lr", "model"]
    cfg.lr = 0.2
    cfg["extra"] = {"a": 1}
    assert cfg.lr == 0.2 and cfg.extra.a == 1
    del cfg.extra
    del cfg["lr"]
    assert list(cfg) == ["model"] and not hasattr(cfg, "lr")
    with pytest.raises(AttributeError, match="filename"):
        cfg.filename = "other"  # type: ignore[misc]
    for clone in (copy.deepcopy(cfg), pickle.loads(pickle.dumps(cfg))):
        assert clone.to_dict() == cfg.to_dict() and clone.filename == cfg.filename
        clone.model.depth = 101
        assert cfg.model.depth == 50


def test_config_copies_its_input() -> None:
    source = {"a": {"b": [1, 2]}}
    cfg = Config(source)
    cfg.a.b.append(3)
    assert source == {"a": {"b": [1, 2]}}


def test_pretty_text_is_indented_python() -> None:
    cfg = Config(
        {
            "model": {
                "type": "RetinaNet",
                "backbone": {"type": "ResNet", "depth": 50, "out_indices": (0, 1, 2, 3)},
                "neck": {"type": "FPN", "in_channels": [256, 512, 1024, 2048], "out_channels": 256},
            },
            "odd": {"not-a-name": 1, 2: None, "class": True},
            "inf": float("-inf"),
        }
    )
    text = str(cfg)
    assert text == cfg.pretty_text == cfg.dump()
    assert text.startswith("model = dict(\n    type='RetinaNet',\n    backbone=dict(")
    assert "odd = {'not-a-name': 1, 2: None, 'class': True}\n" in text
    assert "inf = float('-inf')\n" in text
    assert repr(cfg).startswith("Config(filename=None):\n")


# --------------------------------------------------------------------------- merge_from_dict


def test_merge_from_dict(tmp_path: Path) -> None:
    path = write(
        tmp_path / "cfg.py",
        """\
        model = dict(backbone=dict(depth=50, style='pytorch'))
        data = dict(pipeline=[dict(type='Load'), dict(type='Resize', scale=(1333, 800))],
                    sizes=(dict(a=1), 2))
        """,
    )
    cfg = Config.fromfile(path)
    cfg.merge_from_dict(
        {
            "model.backbone.depth": 101,
            "model.neck.out.channels": 256,
            "data.pipeline.1.scale": (800, 600),
            "data.pipeline.-2.type": "LoadImage",
            "data.sizes.0.a": 5,
            "model.backbone": {"frozen": 1},
            "optimizer": {"type": "SGD"},
        }
    )
    assert cfg.to_dict() == {
        "model": {
            "backbone": {"depth": 101, "style": "pytorch", "frozen": 1},
            "neck": {"out": {"channels": 256}},
        },
        "data": {
            "pipeline": [{"type": "LoadImage"}, {"type": "Resize", "scale": (800, 600)}],
            "sizes": ({"a": 5}, 2),
        },
        "optimizer": {"type": "SGD"},
    }
    cfg.merge_from_dict(
        {"model.backbone": {"_delete_": True, "type": "Swin"}, "data.pipeline.0": "x"}
    )
    assert cfg.model.backbone == {"type": "Swin"} and cfg.data.pipeline[0] == "x"


@pytest.mark.parametrize(
    "options, error, words",
    [
        (
            {"data.pipeline.5.type": "x"},
            ValueError,
            ["'data.pipeline.5.type'", "out of range", "length 2"],
        ),
        ({"data.pipeline.first": "x"}, ValueError, ["integer index", "'first'"]),
        ({"model.depth.x": 1}, ValueError, ["'model.depth'", "int"]),
        ({"model..depth": 1}, ValueError, ["empty parts"]),
        ({3: 1}, TypeError, ["keys must be dotted str"]),
    ],
)
def test_merge_from_dict_errors_change_nothing(options: dict, error: type, words: list) -> None:
    cfg = Config({"model": {"depth": 50}, "data": {"pipeline": [{"type": "A"}, {"type": "B"}]}})
    before = cfg.to_dict()
    with pytest.raises(error) as info:
        cfg.merge_from_dict({"model.depth": 18, **options})
    for word in words:
        assert word in str(info.value)
    assert cfg.to_dict() == before


def test_merge_from_dict_list_keys_can_be_disallowed() -> None:
    cfg = Config({"steps": [1, 2]})
    with pytest.raises(ValueError, match="allow_list_keys"):
        cfg.merge_from_dict({"steps.0": 5}, allow_list_keys=False)
    with pytest.raises(TypeError, match="options"):
        cfg.merge_from_dict([("steps", 1)])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- dump


@pytest.mark.parametrize("ext", [".py", ".json"])
def test_dump_round_trip(tmp_path: Path, ext: str) -> None:
    write(
        tmp_path / "base.py",
        "model = dict(type='RetinaNet', sizes=(1, 2), tags=['a', \"b'c\"], none=None, on=True)\n",
    )
    cfg = Config.fromfile(
        write(tmp_path / "cfg.py", "_base_ = 'base.py'\nlr = 1e-4\nmodel = dict(depth=50)\n")
    )
    out = tmp_path / f"out{ext}"
    assert cfg.dump(out) is None
    back = Config.fromfile(out)
    expected = cfg.to_dict()
    if ext == ".json":
        expected["model"]["sizes"] = [1, 2]  # JSON has no tuples
    assert back.to_dict() == expected


def test_dump_refuses_what_cannot_come_back(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="config key model.layers.1: cannot dump a set"):
        Config({"model": {"layers": [1, {2}]}}).dump(tmp_path / "a.py")
    with pytest.raises(ValueError, match="'my-key'"):
        Config({"my-key": 1}).dump(tmp_path / "a.py")
    with pytest.raises(ValueError, match="_hidden"):
        Config({"_hidden": 1}).dump(tmp_path / "a.py")
    with pytest.raises(ValueError, match="JSON needs str keys"):
        Config({"m": {1: 2}}).dump(tmp_path / "a.json")
    with pytest.raises(TypeError, match="bytes"):
        Config({"m": b"x"}).dump(tmp_path / "a.json")
    with pytest.raises(ValueError, match="merge directive"):
        Config({"m": {"_delete_": True}}).dump(tmp_path / "a.json")
    assert not list(tmp_path.iterdir())


_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s)
)
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12)
)


def _values(tuples: bool, key_strategy: Any) -> Any:
    def extend(children: Any) -> Any:
        options = [
            st.lists(children, max_size=4),
            st.dictionaries(key_strategy, children, max_size=4),
        ]
        if tuples:
            options.append(st.lists(children, max_size=4).map(tuple))
        return st.one_of(*options)

    return st.recursive(_SCALARS, extend, max_leaves=20)


def _lists_for_tuples(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists_for_tuples(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists_for_tuples(v) for v in value]
    return value


_PY_KEYS = st.one_of(st.text(max_size=8), st.integers()).filter(lambda k: k != "_delete_")
_JSON_KEYS = st.text(max_size=8).filter(lambda k: k != "_delete_")


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(_NAMES, _values(True, _PY_KEYS), max_size=5))
def test_python_dump_round_trips_any_literal_config(data: dict) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cfg.py"
        Config(data).dump(path)
        assert Config.fromfile(path).to_dict() == data


@pytest.mark.parametrize("key", ["µ", "ﬁle", "Ⅸ"])
def test_python_dump_keeps_keys_that_python_would_read_as_other_names(key: str) -> None:
    """Python reads identifiers in NFKC form: "µ" (micro sign) as "μ" (Greek mu)."""
    data = {"a": {key: None}, "b": {key: 1, "x": 2}}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cfg.py"
        Config(data).dump(path)
        assert Config.fromfile(path).to_dict() == data


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(_NAMES, _values(True, _JSON_KEYS), max_size=5))
def test_json_dump_round_trips_with_tuples_as_lists(data: dict) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cfg.json"
        Config(data).dump(path)
        assert Config.fromfile(path).to_dict() == _lists_for_tuples(data)


# --------------------------------------------------------------------------- DictAction


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train")
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={})
    return parser


def test_dict_action_parses_each_kind() -> None:
    args = make_parser().parse_args(
        [
            "--cfg-options",
            "model.depth=101",
            "lr=1e-3",
            "neg=-2",
            "name='quoted, with comma'",
            "type=RetinaNet",
            "flag=True",
            "off=False",
            "nothing=None",
            "pair=(1,2)",
            "single=(a,)",
            "sizes=[800,600]",
            "words=[a,b]",
            "mixed=a,[b,c],(1,2)",
            "classes=cat,dog,3",
            "mapping={'a': [1, 2]}",
            "empty=",
            "eq=a=b",
        ]
    )
    assert args.cfg_options == {
        "model.depth": 101,
        "lr": 1e-3,
        "neg": -2,
        "name": "quoted, with comma",
        "type": "RetinaNet",
        "flag": True,
        "off": False,
        "nothing": None,
        "pair": (1, 2),
        "single": ("a",),
        "sizes": [800, 600],
        "words": ["a", "b"],
        "mixed": ["a", ["b", "c"], (1, 2)],
        "classes": ["cat", "dog", 3],
        "mapping": {"a": [1, 2]},
        "empty": "",
        "eq": "a=b",
    }


def test_dict_action_repeated_option_accumulates() -> None:
    args = make_parser().parse_args(["--cfg-options", "a=1", "--cfg-options", "b=2", "a=3"])
    assert args.cfg_options == {"a": 3, "b": 2}
    assert make_parser().parse_args([]).cfg_options == {}


@pytest.mark.parametrize("token", ["novalue", "=5"])
def test_dict_action_rejects_token_without_key(token: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        make_parser().parse_args(["--cfg-options", "a=1", token])
    err = capsys.readouterr().err
    assert "--cfg-options" in err and repr(token) in err and "KEY=VALUE" in err


def test_dict_action_never_executes_values(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payloads = [
        f"__import__('os').system('touch {marker}')",
        f"open('{marker}', 'w').write('x')",
        f"[__import__('pathlib').Path('{marker}').touch()]",
        f"(lambda: open('{marker}', 'w'))()",
    ]
    args = make_parser().parse_args(
        ["--cfg-options"] + [f"k{i}={p}" for i, p in enumerate(payloads)]
    )
    assert not marker.exists()
    assert args.cfg_options["k0"] == payloads[0] and args.cfg_options["k1"] == payloads[1]
    assert args.cfg_options["k3"] == payloads[3]
    assert args.cfg_options["k2"] == [payloads[2][1:-1]]


def test_dict_action_feeds_merge_from_dict(tmp_path: Path) -> None:
    cfg = Config.fromfile(
        write(tmp_path / "cfg.py", "data = dict(pipeline=[dict(type='A'), dict(scale=(1, 1))])\n")
    )
    args = make_parser().parse_args(
        ["--cfg-options", "data.pipeline.1.scale=(800,600)", "model.type=RetinaNet"]
    )
    cfg.merge_from_dict(args.cfg_options)
    assert cfg.data.pipeline[1].scale == (800, 600) and cfg.model.type == "RetinaNet"


_LITERALS = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, min_size=2, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), children, max_size=3),
    ),
    max_leaves=10,
)


@given(_LITERALS)
def test_parse_option_value_reads_any_python_literal(value: Any) -> None:
    parsed = parse_option_value(repr(value))
    assert parsed == value and type(parsed) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, parsed) == math.copysign(1, value)


_WORDS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True).filter(
    lambda w: w not in ("True", "False", "None")
)


@given(st.lists(st.one_of(_WORDS, st.integers()), min_size=2, max_size=6))
def test_parse_option_value_splits_bare_comma_lists(items: list) -> None:
    text = ",".join(str(i) for i in items)
    assert parse_option_value(text) == items
    assert parse_option_value(f"[{text}]") == items
    assert parse_option_value(f"({text})") == tuple(items)


def test_numpy_scalars_become_python_scalars_so_configs_dump_and_checkpoint(tmp_path) -> None:
    path = tmp_path / "np_cfg.py"
    path.write_text(
        "import numpy as np\nscale = np.float64(0.5)\nsteps = [np.int64(3), 4]\nflag = "
        "np.bool_(True)\n"
    )
    cfg = Config.fromfile(str(path))
    assert type(cfg.scale) is float and type(cfg.steps[0]) is int and type(cfg.flag) is bool
    cfg.dump(str(tmp_path / "dumped.py"))
    assert Config.fromfile(str(tmp_path / "dumped.py")).to_dict() == cfg.to_dict()
    import io

    import torch

    buffer = io.BytesIO()
    torch.save({"config_dict": cfg.to_dict()}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["config_dict"]["scale"] == 0.5


def test_dump_refuses_scalar_subclasses_that_would_not_read_back(tmp_path) -> None:
    import enum

    class Color(enum.IntEnum):
        RED = 1

    cfg = Config(dict(color=Color.RED))
    with pytest.raises(TypeError, match="color"):
        cfg.dump(str(tmp_path / "x.py"))


def test_dump_creates_missing_folders(tmp_path) -> None:
    target = tmp_path / "work_dirs" / "run1" / "config.py"
    Config(dict(a=1)).dump(str(target))
    assert Config.fromfile(str(target)).a == 1


# --------------------------------------------------------------------------- equality


def test_configs_are_equal_by_content() -> None:
    a = Config({"model": {"type": "TinyDet", "sizes": (1, 2)}}, filename="a.py", text="x")
    b = Config({"model": {"type": "TinyDet", "sizes": (1, 2)}}, filename="b.py", text="y")
    assert a == b and not a != b
    b.model.sizes = (1, 3)
    assert a != b
    assert a != {"model": {"type": "TinyDet", "sizes": (1, 2)}}  # a Config equals Configs only
    with pytest.raises(TypeError, match="unhashable"):
        hash(a)


def test_the_example_config_dumped_reloads_to_an_equal_one(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[1] / "configs" / "tiny_det" / "tiny_det_synthetic.py"
    cfg = Config.fromfile(example)
    cfg.dump(tmp_path / "config.py")
    assert Config.fromfile(tmp_path / "config.py") == cfg


# --------------------------------------------------------------------------- custom_imports


@pytest.fixture
def custom_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An importable module, not imported yet; its name is yielded."""
    name = f"custom_{tmp_path.name.replace('-', '_')}"
    write(tmp_path / "mods" / f"{name}.py", "VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    yield name
    sys.modules.pop(name, None)


def test_custom_imports_are_imported_by_fromfile(tmp_path: Path, custom_module: str) -> None:
    path = write(tmp_path / "c.py", f"custom_imports = dict(imports=[{custom_module!r}])\n")
    assert custom_module not in sys.modules
    cfg = Config.fromfile(path, import_custom_modules=False)
    assert custom_module not in sys.modules and cfg.custom_imports.imports == [custom_module]
    Config.fromfile(path)
    assert custom_module in sys.modules


def test_a_failed_custom_import_names_the_module(tmp_path: Path) -> None:
    path = write(tmp_path / "c.py", "custom_imports = dict(imports='no_such_project_xyz')\n")
    with pytest.raises(ImportError, match="custom_imports: cannot import 'no_such_project_xyz'"):
        Config.fromfile(path)
    with pytest.raises(ImportError, match="'no_such_project_xyz'") as info:
        apply_custom_imports({"imports": "no_such_project_xyz", "allow_failed_imports": False})
    assert info.value.name == "no_such_project_xyz"


def test_allowed_failed_imports_warn_and_go_on(custom_module: str) -> None:
    spec = {"imports": ["no_such_project_xyz", custom_module], "allow_failed_imports": True}
    with pytest.warns(UserWarning, match="'no_such_project_xyz' failed to import"):
        assert apply_custom_imports(spec) == [custom_module]


@pytest.mark.parametrize(
    "spec, error, words",
    [
        (["my_project"], TypeError, ["custom_imports: expected a dict", "list"]),
        ({"imports": [3]}, TypeError, ["custom_imports.imports", "list of module names"]),
        ({"imports": []}, None, []),
        ({"imports": "x", "allow_failed_imports": 1}, TypeError, ["allow_failed_imports", "int 1"]),
        ({"imports": "x", "allow": True}, ValueError, ["unknown keys ['allow']"]),
    ],
)
def test_bad_custom_imports(spec: Any, error: Any, words: list) -> None:
    if error is None:
        assert apply_custom_imports(spec) == []
        return
    with pytest.raises(error) as info:
        apply_custom_imports(spec)
    for word in words:
        assert word in str(info.value)
