"""The installer's calls to pip: build or fetch wheels into a cache, resolve, install.

Every call runs ``python -m pip`` of the Python being installed into. A failed call
is an :class:`InstallError` whose one line ends with pip's last lines; pip's whole
output goes to a log file that the line names.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from packaging.requirements import Requirement
from packaging.version import Version

from mmpar.compat.install.errors import InstallError

__all__ = [
    "NO_EXTENSIONS",
    "build_wheel",
    "build_without_extensions",
    "cache_dir",
    "cached_newest",
    "cached_wheel",
    "check_pip",
    "environ_with",
    "fetch_newest",
    "fetch_wheel",
    "install",
    "resolve",
    "strip_wheel",
    "wheel_requires",
]

#: pip's ``--report`` (what ``resolve`` reads) arrived in pip 22.2.
_PIP_MIN = (22, 2)


def cache_dir() -> Path:
    """Where built and downloaded wheels are kept: ``$XDG_CACHE_HOME/mmpar/wheels``."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "mmpar" / "wheels"


def _pip(python: str, args: Sequence[str], what: str, env: Optional[Dict[str, str]] = None) -> str:
    proc = subprocess.run(
        [python, "-m", "pip", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
        with tempfile.NamedTemporaryFile(
            "w", prefix="mmpar-install-", suffix=".log", delete=False
        ) as log:
            log.write(f"$ {python} -m pip {' '.join(args)}\n{proc.stdout}")
        tail = " | ".join(lines[-3:]) or f"exit status {proc.returncode}"
        raise InstallError(f"pip failed to {what}: {tail} (full output: {log.name})")
    return proc.stdout


def environ_with(target: Optional[Path]) -> Dict[str, str]:
    """``os.environ`` for a child Python, with ``target`` (if any) first on ``PYTHONPATH``."""
    env = dict(os.environ)
    if target is not None:
        rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join([str(target), *rest])
    return env


def check_pip(python: str = sys.executable) -> str:
    """pip's version for ``python``.

    Raises:
        InstallError: no pip, or one older than 22.2.
    """
    proc = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True)
    match = re.match(r"pip (\d+)\.(\d+)", proc.stdout)
    if proc.returncode != 0 or match is None:
        raise InstallError(f"no pip for {python}: run `{python} -m ensurepip --upgrade` first")
    if (int(match.group(1)), int(match.group(2))) < _PIP_MIN:
        raise InstallError(
            f"pip {match.group(1)}.{match.group(2)} is too old (22.2 or newer reports what "
            f"it resolves): run `{python} -m pip install -U pip` first"
        )
    return f"{match.group(1)}.{match.group(2)}"


def cached_wheel(dist: str, version: str, cache: Path) -> Optional[Path]:
    """The cached wheel of ``dist`` ``version``, if one was built or downloaded before."""
    stem = re.sub(r"[-_.]+", "_", dist).lower()
    found = sorted(cache.glob(f"{stem}-{version}-*.whl")) if cache.is_dir() else []
    return found[0] if found else None


def build_wheel(
    dist: str,
    version: str,
    cache: Path,
    tools: Sequence[str],
    env: Optional[Dict[str, str]] = None,
) -> Path:
    """Build ``dist`` ``version`` from its sdist in a throwaway venv holding ``tools``.

    The venv has no torch and none of this Python's packages: the build sees only
    ``tools`` (e.g. ``setuptools<70`` for mmcv, whose ``setup.py`` imports
    ``pkg_resources``, gone from setuptools 70; or the numpy to compile against).

    Args:
        dist: The distribution to build.
        version: Its version.
        cache: Where the wheel goes.
        tools: What the build needs (pip requirement strings).
        env: Variables for the build on top of ``os.environ`` (``MMCV_WITH_OPS=0``).
    """
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"mmpar-build-{dist}-") as tmp:
        venv.EnvBuilder(with_pip=True).create(tmp)
        python = str(Path(tmp) / "bin" / "python")
        _pip(python, ["install", "-q", *tools], f"set up a venv to build {dist}")
        args = ["wheel", "-q", "--no-deps", "--no-build-isolation", "--no-binary", dist]
        args += [f"{dist}=={version}", "-w", str(cache)]
        _pip(python, args, f"build {dist} {version}", env=dict(os.environ, **(env or {})))
    wheel = cached_wheel(dist, version, cache)
    if wheel is None:
        raise InstallError(f"building {dist} {version} left no wheel of it in {cache}")
    return wheel


#: Runs an unpacked sdist's ``setup.py bdist_wheel -d DIR`` with ``setup()`` handed no
#: extension modules and no ``build_ext`` command: a pure-Python wheel, nothing compiled.
NO_EXTENSIONS = """
import runpy, sys, setuptools
real = setuptools.setup
def setup(**kwargs):
    kwargs.pop("ext_modules", None)
    kwargs.pop("cmdclass", None)
    return real(**kwargs)
setuptools.setup = setup
sys.argv = ["setup.py", "bdist_wheel", "-d", sys.argv[1]]
runpy.run_path("setup.py", run_name="__main__")
"""


def _fail(what: str, command: str, output: str, returncode: int) -> InstallError:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    with tempfile.NamedTemporaryFile(
        "w", prefix="mmpar-install-", suffix=".log", delete=False
    ) as log:
        log.write(f"$ {command}\n{output}")
    tail = " | ".join(lines[-3:]) or f"exit status {returncode}"
    return InstallError(f"failed to {what}: {tail} (full output: {log.name})")


def build_without_extensions(dist: str, version: str, cache: Path) -> Path:
    """Make the wheel of ``dist`` ``version`` from its sdist without its compiled extensions.

    For an sdist whose ``setup.py`` imports torch and compiles CUDA/C++ extensions that
    no longer build (mmdet3d 0.17's include ``THC/THC.h``): the sdist is downloaded
    (its metadata read with this Python's torch), unpacked, and its ``setup.py`` run by
    this Python with ``setup()`` given no extension modules. mmpar supplies them.
    """
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"mmpar-build-{dist}-") as tmp:
        args = ["download", "-q", "--no-deps", "--no-binary", ":all:", "--no-build-isolation"]
        _pip(sys.executable, [*args, f"{dist}=={version}", "-d", tmp], f"get {dist} {version}")
        sdist = next(Path(tmp).glob("*.tar.gz"), None)
        if sdist is None:
            raise InstallError(f"pip left no sdist of {dist} {version} in {tmp}")
        with tarfile.open(sdist) as archive:
            archive.extractall(Path(tmp) / "src", filter="data")
        root = next((Path(tmp) / "src").iterdir())
        command = [sys.executable, "-c", NO_EXTENSIONS, str(cache)]
        proc = subprocess.run(
            command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if proc.returncode != 0:
            what = f"make the wheel of {dist} {version} without its extensions"
            raise _fail(what, " ".join(command), proc.stdout, proc.returncode)
    wheel = cached_wheel(dist, version, cache)
    if wheel is None:
        raise InstallError(f"building {dist} {version} left no wheel of it in {cache}")
    return wheel


def fetch_wheel(dist: str, version: str, cache: Path, no_isolation: bool = False) -> Path:
    """Download ``dist`` ``version``'s wheel into ``cache`` (or build it from its sdist).

    ``no_isolation`` builds with this Python's own setuptools and torch, for an
    sdist whose ``setup.py`` imports torch (mmdet3d).
    """
    args = ["wheel", "-q", "--no-deps", f"{dist}=={version}", "-w", str(cache)]
    _pip(sys.executable, args + (["--no-build-isolation"] if no_isolation else []), f"get {dist}")
    wheel = cached_wheel(dist, version, cache)
    if wheel is None:
        raise InstallError(f"pip left no {dist}-{version} wheel in {cache}")
    return wheel


def cached_newest(requirement: str, cache: Path) -> Optional[Path]:
    """The newest cached wheel that meets ``requirement`` (``name<spec>``), if any."""
    wanted = Requirement(requirement)
    stem = re.sub(r"[-_.]+", "_", wanted.name).lower()
    found = []
    for wheel in cache.glob(f"{stem}-*.whl") if cache.is_dir() else []:
        version = wheel.name.split("-")[1]
        if wanted.specifier.contains(version, prereleases=True):
            found.append((Version(version), wheel))
    return max(found)[1] if found else None


def fetch_newest(requirement: str, cache: Path) -> Path:
    """Download the newest wheel that meets ``requirement`` into ``cache``, nothing else."""
    name = Requirement(requirement).name
    args = ["download", "-q", "--no-deps", "--only-binary", ":all:", requirement]
    _pip(sys.executable, [*args, "-d", str(cache)], f"get {name}")
    wheel = cached_newest(requirement, cache)
    if wheel is None:
        raise InstallError(f"pip left no wheel of {requirement} in {cache}")
    return wheel


def _top(entry: str) -> str:
    return entry.split("/")[0]


def strip_wheel(wheel: Path, keep: Sequence[str]) -> List[str]:
    """Rewrite ``wheel`` without top-level entries other than ``keep`` and its metadata.

    mmpose's and mmsegmentation's wheels ship their test suites as a top-level
    ``tests`` package: installed, it shadows every project's ``tests/`` that is a
    namespace package (no ``__init__.py``), e.g. ``from tests.x import y`` there.

    Returns:
        The top-level entries left out (``["tests"]``), none if the wheel was clean.
    """
    with zipfile.ZipFile(wheel) as src:
        infos = src.infolist()
        meta = next(_top(i.filename) for i in infos if _top(i.filename).endswith(".dist-info"))
        allowed = {*keep, meta, meta[: -len(".dist-info")] + ".data"}
        dropped = sorted({_top(i.filename) for i in infos} - allowed)
        if not dropped:
            return []
        partial = wheel.with_name(wheel.name + ".part")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in infos:
                if _top(info.filename) in dropped:
                    continue
                data = src.read(info)
                if info.filename == f"{meta}/RECORD":
                    lines = data.decode("utf-8").splitlines(keepends=True)
                    kept = [line for line in lines if _top(line.split(",")[0]) not in dropped]
                    data = "".join(kept).encode("utf-8")
                dst.writestr(info, data)
    os.replace(partial, wheel)
    return dropped


def wheel_requires(wheel: Path) -> List[str]:
    """The ``Requires-Dist`` lines of a wheel's metadata."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode("utf-8")
    return email.parser.Parser().parsestr(text, headersonly=True).get_all("Requires-Dist") or []


def resolve(
    requirements: Sequence[str], constraints: Path, target: Optional[Path]
) -> List[Tuple[str, str]]:
    """What pip would install for ``requirements``: ``[(name, version), ...]``.

    pip resolves against what is installed (``target`` included: it runs with the
    folder on ``PYTHONPATH``) under ``constraints``, and installs nothing.
    """
    with tempfile.TemporaryDirectory(prefix="mmpar-resolve-") as tmp:
        report = Path(tmp) / "report.json"
        args = ["install", "--dry-run", "-q", "--report", str(report), "-c", str(constraints)]
        _pip(sys.executable, [*args, *requirements], "resolve", env=environ_with(target))
        items = json.loads(report.read_text()).get("install", [])
    return [(item["metadata"]["name"], item["metadata"]["version"]) for item in items]


def install(specs: Sequence[str], constraints: Path, target: Optional[Path]) -> None:
    """``pip install --no-deps`` of exact ``specs`` (wheel paths or ``name==version``)."""
    # --force-reinstall: a codebase at the same version is reinstalled without its strays.
    args = ["install", "-q", "--no-deps", "--force-reinstall", "-c", str(constraints)]
    if target is not None:
        args += ["--target", str(target), "--upgrade"]
    _pip(sys.executable, [*args, *specs], "install", env=environ_with(target))
