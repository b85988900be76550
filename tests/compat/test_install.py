"""``python -m mmpar.compat.install``: what it plans, what it refuses, and that CI's
environment is what its lines in ``.ci/run`` promise.

Nothing here installs or reads a package index: the plans are ``--dry-run`` (which
reads installed metadata only) or the planning functions on made-up environments
(folders of ``.dist-info`` metadata). The real install is ``.ci/run``'s, before pytest.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest

from mmpar.compat.install.catalogue import (
    CODEBASES,
    choose_mmcv,
    compiles_extensions,
    mmcv_range,
    parse_codebases,
)
from mmpar.compat.install.cli import main
from mmpar.compat.install.environment import Environment
from mmpar.compat.install.errors import InstallError
from mmpar.compat.install.pip import NO_EXTENSIONS, check_pip, install, strip_wheel
from mmpar.compat.install.requirements import (
    runtime_requirements,
    usable_resolution,
)
from tests.compat._mmcv_env import MMCV_170_DIR, REPO_ROOT, child_env
from tests.compat.test_mmdet3d017_import import MMCV_140_DIR


def site(root: Path, **dists: str) -> Path:
    """A folder of ``.dist-info`` metadata: ``site(tmp, torch="2.1.0")``."""
    root.mkdir(parents=True, exist_ok=True)
    for name, version in dists.items():
        info = root / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


def dry_run(capsys, *args: str):
    code = main(["--dry-run", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    """No wheel cached: a dry run says it would build mmcv's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "args, words",
    [
        (["mmfoo"], ["unknown codebase 'mmfoo'", "mmpose", "mmseg"]),
        (["mmdet>=2.0"], ["'mmdet>=2.0'", "NAME==VERSION"]),
        (["mmdet==2.28.2", "mmdet==2.25.0"], ["mmdet named twice"]),
        (["--mmcv", "2.0.0"], ["--mmcv 2.0.0", "1.3.0 to 1.7.2"]),
        (["--mmcv", "1.2.7"], ["--mmcv 1.2.7", "not an mmcv 1.x release"]),
        (["--mmcv", "1.7.5"], ["--mmcv 1.7.5", "not an mmcv 1.x release"]),
        (
            ["--mmcv", "1.7.2", "mmpose", "mmdet"],
            ["--mmcv 1.7.2 is refused by mmpose 0.29.0 (mmcv>=1.3.8,<=1.7.0)", "then mmcv 1.7.0"],
        ),
        (["--mmcv", "1.4.0", "mmrotate"], ["refused by mmrotate 0.3.4 (mmcv>=1.5.3,<=1.8.0)"]),
    ],
)
def test_user_errors_are_one_line_and_exit_2(capsys, args, words) -> None:
    code, out, err = dry_run(capsys, *args)
    assert code == 2 and out == []
    assert len(err) == 1 and err[0].startswith("error: "), err
    for word in words:
        assert word in err[0]


def test_as_a_command_an_error_is_one_line_before_anything_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mmpar.compat.install", "mmpose", "mmfoo"],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: unknown codebase 'mmfoo' (known: mmaction2, mmcls, mmdet, mmdet3d, mmedit, "
        "mmocr, mmpose, mmrotate, mmsegmentation, mmtrack, mmaction, mmseg)"
    ]


def test_no_torch_is_refused_and_torch_is_pinned(tmp_path) -> None:
    with pytest.raises(InstallError, match="no torch installed.*installs none"):
        Environment(path=[str(site(tmp_path / "a", numpy="2.0.0"))]).torch_pins()
    env = Environment(path=[str(site(tmp_path / "b", torch="2.1.0+cpu", torchvision="0.16.0"))])
    assert env.torch_pins() == [("torch", "2.1.0+cpu"), ("torchvision", "0.16.0")]
    assert Environment(path=[str(site(tmp_path / "c", torch="2.1.0"))]).torch_pins() == [
        ("torch", "2.1.0")
    ]


def test_mmcv_full_in_the_way_is_refused(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(site(tmp_path / "s", mmcv_full="1.7.2")))
    code, out, err = dry_run(capsys, "mmdet")
    assert code == 2 and len(err) == 1
    assert err[0].startswith("error: mmcv-full 1.7.2 is installed") and "--target" in err[0]
    code, out, err = dry_run(capsys, "mmdet", "--target", str(tmp_path / "t"))
    assert code == 0, err


def test_no_pip_and_a_failed_pip_call_are_one_line(tmp_path) -> None:
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    with pytest.raises(InstallError, match=r"^no pip for .*bare.*ensurepip") as caught:
        check_pip(str(bare / "bin" / "python"))
    assert "\n" not in str(caught.value)
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("")
    with pytest.raises(InstallError, match=r"^pip failed to install: .*no-such") as caught:
        install([str(tmp_path / "no-such-1.0-py3-none-any.whl")], constraints, tmp_path / "t")
    message = str(caught.value)
    assert "\n" not in message and message.endswith(".log)")
    log = Path(message.rsplit("full output: ", 1)[1][:-1])
    assert "no-such" in log.read_text()
    log.unlink()


def test_top_level_packages_beside_a_codebase_are_left_out(tmp_path) -> None:
    wheel = tmp_path / "mmpose-0.29.0-py2.py3-none-any.whl"
    record = "mmpose/__init__.py,,\ntests/__init__.py,,\nmmpose-0.29.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("mmpose/__init__.py", "")
        archive.writestr("tests/__init__.py", "")
        archive.writestr("tests/test_a.py", "")
        archive.writestr("mmpose-0.29.0.dist-info/METADATA", "Name: mmpose\nVersion: 0.29.0\n")
        archive.writestr("mmpose-0.29.0.dist-info/RECORD", record)
    assert strip_wheel(wheel, ["mmpose"]) == ["tests"]
    with zipfile.ZipFile(wheel) as archive:
        assert sorted(archive.namelist()) == [
            "mmpose-0.29.0.dist-info/METADATA",
            "mmpose-0.29.0.dist-info/RECORD",
            "mmpose/__init__.py",
        ]
        assert "tests/" not in archive.read("mmpose-0.29.0.dist-info/RECORD").decode()
    assert strip_wheel(wheel, ["mmpose"]) == []
    # Installed with its tests: the environment sees them (and a plan reinstalls it).
    info = site(tmp_path / "site", mmpose="0.29.0") / "mmpose-0.29.0.dist-info"
    (info / "RECORD").write_text(record)
    # The files exist: importlib_metadata (imported by some codebases, and then first on
    # sys.meta_path) lists only the files of a RECORD that exist.
    for package in ("mmpose", "tests"):
        (tmp_path / "site" / package).mkdir()
        (tmp_path / "site" / package / "__init__.py").write_text("")
    env = Environment(path=[str(tmp_path / "site")])
    assert env.strays("mmpose", "mmpose") == ["tests"]


# --------------------------------------------------------------------------- plans


def test_mmcv_choice() -> None:
    assert choose_mmcv(None, parse_codebases([])) == ("1.7.2", "the newest mmcv 1.x")
    assert choose_mmcv(None, parse_codebases(["mmdet", "mmtrack"]))[0] == "1.7.2"
    version, why = choose_mmcv(None, parse_codebases(["mmdet", "mmpose", "mmaction2"]))
    assert version == "1.7.0"
    assert why == "mmpose 0.29.0 and mmaction2 0.24.1 accept mmcv <= 1.7.0"
    assert choose_mmcv(None, parse_codebases(["mmdet3d"]))[0] == "1.7.0"
    assert choose_mmcv("1.6.0", parse_codebases(["mmpose"])) == ("1.6.0", "asked for (--mmcv)")
    # Another version than the catalogued one is taken to accept no newer mmcv.
    assert choose_mmcv(None, parse_codebases(["mmpose==0.28.0"]))[0] == "1.7.0"


def test_codebases_bring_those_they_import() -> None:
    request = parse_codebases(["mmseg", "mmrotate==0.3.3", "mmtrack", "mmaction"])
    assert request.named == ["mmsegmentation", "mmrotate", "mmtrack", "mmaction2"]
    assert request.versions == {
        "mmcls": "0.25.0",
        "mmsegmentation": "0.30.0",
        "mmdet": "2.28.2",
        "mmrotate": "0.3.3",
        "mmtrack": "0.14.0",
        "mmaction2": "0.24.1",
    }
    assert list(parse_codebases(["mmdet3d"]).versions) == [
        "mmdet",
        "mmcls",
        "mmsegmentation",
        "mmdet3d",
    ]


def test_dry_run_plan_for_the_pinned_codebases(capsys, tmp_path) -> None:
    code, out, err = dry_run(capsys, "mmpose", "mmaction2", "--target", str(tmp_path / "t"))
    assert code == 0, err
    assert all(line.startswith("mmpar install: ") for line in out)
    text = "\n".join(out)
    assert (
        f"into --target {tmp_path / 't'}; keeps torch " in out[0] and "(pinned for pip)" in out[0]
    )
    assert "mmcv 1.7.0, without compiled ops (mmpar supplies mmcv.ops): mmpose 0.29.0 and " in text
    assert "mmpose 0.29.0 (named)" in text and "mmaction2 0.24.1 (named)" in text
    assert "would build mmcv 1.7.0" in text and "(setuptools<70, MMCV_WITH_OPS=0)" in text
    assert "already installed" not in text


def test_dry_run_plan_names_what_codebases_import(capsys, tmp_path) -> None:
    code, out, _ = dry_run(capsys, "mmrotate", "mmocr", "--target", str(tmp_path / "t"))
    assert code == 0
    assert "mmpar install: mmdet 2.28.2 (mmrotate and mmocr import it)" in out


@pytest.mark.parametrize("version", ["1.0.0rc4", "1.0.0rc5", "1.0.0rc6", None])
def test_dry_run_plan_for_mmdet3d(capsys, tmp_path, version) -> None:
    named = "mmdet3d" if version is None else f"mmdet3d=={version}"
    code, out, err = dry_run(capsys, named, "--target", str(tmp_path / "t"))
    assert code == 0, err
    text = "\n".join(out)
    assert "mmcv 1.7.0, without compiled ops (mmpar supplies mmcv.ops): mmdet3d " in text
    assert f"mmdet3d {version or '1.0.0rc6'} (named" in text
    for dist in ("mmdet 2.28.2", "mmsegmentation 0.30.0"):
        assert f"mmpar install: {dist} (mmdet3d imports it)" in out
    # Only an sdist on the index: its setup.py imports torch, and builds no extension.
    assert f"would make the wheel of mmdet3d {version or '1.0.0rc6'}" in text
    assert "compiles nothing" in text


@pytest.mark.parametrize(
    "version, mmcv, mmdet, mmseg",
    [
        ("0.17.1", "1.4.0", "2.14.0", "0.14.1"),
        ("0.17.2", "1.4.0", "2.14.0", "0.14.1"),
        ("0.17.3", "1.4.0", "2.14.0", "0.14.1"),
        ("0.18.0", "1.5.0", "2.19.1", "0.20.2"),
        ("0.18.1", "1.5.0", "2.19.1", "0.20.2"),
    ],
)
def test_dry_run_plan_for_mmdet3d_before_1_0(capsys, tmp_path, version, mmcv, mmdet, mmseg):
    """mmdet3d 0.17/0.18: an mmcv, mmdet and mmseg inside its gates (BEVFormer's pins
    for 0.17), and its wheel made without its 11 compiled extensions."""
    code, out, err = dry_run(capsys, f"mmdet3d=={version}", "--target", str(tmp_path / "t"))
    assert code == 0, err
    text = "\n".join(out)
    assert f"mmcv {mmcv}, without compiled ops (mmpar supplies mmcv.ops): " in text
    assert f"mmpar install: mmdet {mmdet} (mmdet3d imports it; accepts mmcv>=" in text
    assert f"mmpar install: mmsegmentation {mmseg} (mmdet3d imports it; accepts mmcv>=" in text
    assert f"mmpar install: mmdet3d {version} (named; accepts mmcv>=1.3.8,<=" in text
    assert (
        f"would make the wheel of mmdet3d {version} from its sdist without its 11 compiled "
        "extensions (mmpar supplies them)"
    ) in text
    assert not any(line.startswith("mmpar install: mmcls") for line in out)


def test_mmdet3d_before_1_0_plans() -> None:
    request = parse_codebases(["mmdet3d==0.17.1"])
    assert request.versions == {
        "mmdet": "2.14.0",
        "mmsegmentation": "0.14.1",
        "mmdet3d": "0.17.1",
    }
    assert choose_mmcv(None, request)[0] == "1.4.0"
    assert choose_mmcv("1.3.17", request) == ("1.3.17", "asked for (--mmcv)")
    # A codebase named at another version wins over the pin, inside the gates.
    request = parse_codebases(["mmdet3d==0.17.1", "mmdet==2.28.2"])
    assert request.versions["mmdet"] == "2.28.2"
    assert choose_mmcv(None, request)[0] == "1.4.0"
    with pytest.raises(InstallError, match=r"--mmcv 1.7.2 is refused by mmdet 2.14.0 "):
        choose_mmcv("1.7.2", parse_codebases(["mmdet3d==0.17.1"]))
    assert compiles_extensions("mmdet3d", "0.17.1") == 11
    assert compiles_extensions("mmdet3d", "1.0.0rc6") == 0
    assert str(mmcv_range("mmdet3d", "0.17.3")) in (">=1.3.8,<=1.5.0", "<=1.5.0,>=1.3.8")


def test_sdist_setup_runs_without_its_extensions(tmp_path) -> None:
    """The setup.py of an sdist that compiles an extension (its source absent here) makes
    a pure-Python wheel under NO_EXTENSIONS."""
    root = tmp_path / "pkg-0.1"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "setup.py").write_text(
        "from setuptools import Extension, find_packages, setup\n"
        "if __name__ == '__main__':\n"
        "    setup(name='pkg', version='0.1', packages=find_packages(),\n"
        "          ext_modules=[Extension('pkg.ext', sources=['pkg/missing.cpp'])])\n"
    )
    out = tmp_path / "wheels"
    proc = subprocess.run(
        [sys.executable, "-c", NO_EXTENSIONS, str(out)], cwd=root, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("pkg-0.1-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert "pkg/__init__.py" in archive.namelist()


def fake_wheel(folder: Path, name: str, version: str, requires: List[str]) -> Path:
    """A wheel holding only metadata, with these ``Requires-Dist`` lines."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = name.replace("-", "_")
    wheel = folder / f"{stem}-{version}-py3-none-any.whl"
    lines = "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(
            f"{stem}-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{lines}",
        )
    return wheel


def test_a_requirement_read_from_its_wheel_is_resolved_as_relaxed(tmp_path) -> None:
    """nuscenes-devkit (mmdet3d's) asks numpy < 2: its requirements go to pip without
    that bound, and its wheel is installed as it is, so pip keeps the installed numpy."""
    from mmpar.compat.install.pip import cache_dir
    from mmpar.compat.install.requirements import Needs
    from mmpar.compat.install.steps import Installer

    fake_wheel(cache_dir(), "nuscenes-devkit", "1.1.0", [])
    wheel = fake_wheel(
        cache_dir(),
        "nuscenes-devkit",
        "1.2.0",
        ["numpy<2.0.0,>=1.22.0", "Shapely~=2.0.3", "mmpar-no-such-package>=1.0"],
    )
    said: List[str] = []
    installer = Installer(["mmdet3d"], None, tmp_path / "t", said.append)
    needs = Needs(missing=["plyfile", "nuscenes-devkit"])
    assert installer._read_from_wheels(needs) == [str(wheel)]
    assert needs.missing[0] == "plyfile" and "mmpar-no-such-package>=1.0" in needs.missing
    assert not any(m.startswith(("numpy", "nuscenes")) for m in needs.missing)
    assert said[0].startswith(f"nuscenes-devkit 1.2.0 from {wheel}, the requirements read")
    assert any(s.startswith("numpy of any version for nuscenes-devkit's numpy<2") for s in said)


def test_requirements_of_mmdet3d_that_no_release_installs_today(tmp_path) -> None:
    got = needs(
        tmp_path,
        {
            "mmdet3d": [
                "numba (==0.53.0)",
                "networkx (<2.3,>=2.2)",
                "trimesh (<2.35.40,>=2.35.39)",
                "nuscenes-devkit",
            ]
        },
        numba="0.68.1",
        networkx="3.6.1",
    )
    assert got.missing == ["trimesh", "nuscenes-devkit"]
    for name in ("numba", "networkx", "trimesh"):
        assert any(n.startswith(f"{name} of any version for mmdet3d's {name}") for n in got.notes)


# --------------------------------------------------------------------------- requirements


def needs(tmp_path: Path, owners: Dict[str, List[str]], versions=None, **installed: str):
    env = Environment(path=[str(site(tmp_path / "site", **installed))])
    return runtime_requirements(owners.items(), versions or {}, env)


def test_requirements_mmcv_torch_and_extras_are_not_sent(tmp_path) -> None:
    got = needs(
        tmp_path,
        {
            "mmcv": ["addict", "numpy", "yapf", "regex ; sys_platform == 'win32'"],
            "mmedit": [
                "mmcv-full (>=1.3.13)",
                "torch",
                "torchvision",
                "lmdb",
                "av ; extra == 'all'",
            ],
        },
        numpy="2.0.0",
        torch="2.1.0",
    )
    assert got.missing == ["addict", "yapf==0.40.1", "lmdb"]
    assert any(n.startswith("yapf==0.40.1 for mmcv's yapf: ") for n in got.notes)
    assert any("mmedit requires torchvision, which is not installed" in n for n in got.notes)


def test_requirements_opencv_is_any_cv2_or_the_headless_build(tmp_path) -> None:
    owners = {
        "mmocr": ["opencv-python (!=4.5.5.*,>=4.2.0.32)"],
        "mmaction2": ["opencv-contrib-python"],
    }
    without = needs(tmp_path / "a", owners)
    assert without.missing == [
        "opencv-python-headless!=4.5.5.*,>=4.2.0.32",
        "opencv-python-headless",
    ]
    assert needs(tmp_path / "b", owners, opencv_contrib_python="4.8.0").missing == []


def test_requirements_relaxed_skipped_and_met(tmp_path) -> None:
    got = needs(
        tmp_path,
        {
            "mmtrack": ["pandas (<=1.3.5)", "scipy (<=1.7.3)", "mmcls (<1.0.0,>=0.16.0)"],
            "mmpose": ["chumpy", "json-tricks", "scipy"],
        },
        {"mmcls": "0.25.0"},
        scipy="1.17.0",
        json_tricks="3.17.3",
    )
    assert got.missing == ["pandas"]
    assert any(n.startswith("pandas of any version for mmtrack's pandas<=1.3.5") for n in got.notes)
    assert any(n.startswith("not installed: chumpy, which mmpose asks for") for n in got.notes)


def test_requirements_on_another_codebase_must_fit_its_version(tmp_path) -> None:
    with pytest.raises(InstallError, match=r"mmrotate requires mmdet<3.0.0,>=2.25.1 but mmdet"):
        needs(tmp_path, {"mmrotate": ["mmdet (<3.0.0,>=2.25.1)"]}, {"mmdet": "2.20.0"})


def test_resolution_keeps_torch_and_a_single_cv2(tmp_path) -> None:
    resolved = [("imgaug", "0.4.0"), ("opencv-python", "4.11.0"), ("torch", "2.2.0")]
    env = Environment(path=[str(site(tmp_path / "a"))])
    assert usable_resolution(resolved, env) == (
        [("imgaug", "0.4.0"), ("opencv-python-headless", "")],
        ["opencv-python 4.11.0", "torch 2.2.0"],
    )
    env = Environment(path=[str(site(tmp_path / "b", opencv_python_headless="4.8.0"))])
    assert usable_resolution(resolved, env)[0] == [("imgaug", "0.4.0")]


# --------------------------------------------------------------------------- CI's environment


def ci_lines() -> List[List[str]]:
    """The arguments of each ``python -m mmpar.compat.install`` line of ``.ci/run``."""
    text = (REPO_ROOT / ".ci" / "run").read_text().replace("\\\n", " ")
    lines = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if "mmpar.compat.install" in words:
            args = words[words.index("mmpar.compat.install") + 1 :]
            folders = {"$MMCV_170_DIR": str(MMCV_170_DIR), "$MMCV_140_DIR": str(MMCV_140_DIR)}
            lines.append([folders.get(a, a) for a in args])
    return lines


def test_ci_installs_every_codebase() -> None:
    lines = ci_lines()
    named = [a.split("==")[0] for args in lines for a in args if "==" in a]
    assert sorted(named) == sorted([*CODEBASES, "mmdet3d"])  # mmdet3d 1.0 and 0.17
    mmcvs = [["--mmcv", "1.7.2"]] + [["--mmcv", "1.7.0"]] * 2 + [["--mmcv", "1.4.0"]]
    assert [args[:2] for args in lines] == mmcvs
    assert lines[1][2:4] == lines[2][2:4] == ["--target", str(MMCV_170_DIR)]
    assert lines[3][2:] == ["--target", str(MMCV_140_DIR), "mmdet3d==0.17.1"]


@pytest.mark.parametrize(
    "index", [0, 1, 2, 3], ids=["main", "mmcv-1.7.0", "mmdet3d", "mmdet3d-0.17"]
)
def test_ci_environment_is_what_its_install_lines_promise(capsys, index) -> None:
    """After ``.ci/run``'s install lines, each says everything is installed already."""
    args = ci_lines()[index]
    if index == 0 and Environment().version("mmcv") is None:
        pytest.skip("mmcv is not installed: `bash .ci/run` (or its install lines) installs it")
    folder = Path(args[args.index("--target") + 1]) if "--target" in args else None
    if folder is not None and not folder.is_dir():
        pytest.skip(f"{folder} is absent: `bash .ci/run` (or its install lines) makes it")
    code, out, err = dry_run(capsys, *args)
    assert code == 0, err
    assert "already installed" in out[-1], "\n".join(out)
