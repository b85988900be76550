"""The README's install path in a fresh venv that holds only what mmpar declares.

The README's path for a paper repository is ``pip install -e . "torchvision==X"``, then
``python -m mmpar.compat.install mmdet mmseg``. A venv made with ``--system-site-packages``
would see every package of this machine and hide an undeclared dependency (the
installer's ``packaging`` was one), and a real ``pip install`` of torch downloads
gigabytes. So the test builds the venv as pip would, from what is installed here:

1. a venv without the system's site-packages;
2. ``pip install --no-deps --no-build-isolation --no-index -e`` of a copy of the checkout
   (offline, seconds);
3. the requirements that mmpar declares, and torchvision, which the README's line names,
   resolved here with their own requirements, transitively (markers evaluated, versions
   checked against the specifiers), each distribution linked into the venv's
   site-packages, and nothing else;
4. in the venv: ``pip check`` (every installed distribution's requirements met), the
   installer's ``--dry-run`` for the README's codebases (it reads no index), and
   ``import mmpar``.

An import of a package that mmpar does not declare fails step 4.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import venv
from pathlib import Path
from typing import Dict, Iterable, List

import pytest

from tests.test_docs import ROOT

packaging = pytest.importorskip("packaging")
from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402

#: What the README's install line adds to mmpar's own requirements.
README_EXTRA = ("torchvision",)
TIMEOUT = 300


def declared_requirements() -> List[str]:
    """mmpar's requirements, less the extras, as ``pyproject.toml`` declares them."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        pytest.skip("reading pyproject.toml needs tomllib (Python >= 3.11)")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return list(project["dependencies"])


def closure(requirements: Iterable[str]) -> Dict[str, importlib.metadata.Distribution]:
    """The installed distributions that ``requirements`` need, transitively.

    Raises:
        AssertionError: a requirement that no installed distribution satisfies.
    """
    found: Dict[str, importlib.metadata.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in found:
            continue
        try:
            dist = importlib.metadata.distribution(req.name)
        except importlib.metadata.PackageNotFoundError:
            raise AssertionError(f"{req} is needed but not installed here") from None
        assert req.specifier.contains(dist.version, prereleases=True), (req, dist.version)
        found[name] = dist
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(sub)
    return found


def link_into(dists: Iterable[importlib.metadata.Distribution], site: Path) -> None:
    """Link each distribution's top-level files and folders (its RECORD's) into ``site``."""
    for dist in dists:
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in sorted(tops):
            source = Path(str(dist.locate_file(top)))
            target = site / top
            if source.exists() and not os.path.lexists(target):
                target.symlink_to(source, target_is_directory=source.is_dir())


def _run(cmd: List[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


def _checkout_copy(dest: Path) -> Path:
    """The files ``pip install -e .`` reads: pyproject.toml, the README, the package."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "mmpar", dest / "mmpar", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    return dest


@pytest.mark.slow
def test_readme_install_path_in_a_fresh_venv(tmp_path: Path):
    src = _checkout_copy(tmp_path / "checkout")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    site = Path(
        _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], src
        ).stdout.strip()
    )
    # The build backend pyproject.toml declares, this machine's: a venv's own setuptools
    # (Python 3.11's 65.x; none from 3.12 on) cannot build an editable wheel offline.
    for old in site.iterdir():
        if old.name.startswith(("setuptools", "pkg_resources", "_distutils_hack")) or (
            old.name == "distutils-precedence.pth"
        ):
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    link_into(closure(["setuptools>=64"]).values(), site)
    _run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "-e", str(src)],
        src,
    )
    requirements = declared_requirements() + list(README_EXTRA)
    link_into(closure(requirements).values(), site)

    check = _run([python, "-m", "pip", "check"], src)
    assert "No broken requirements found" in check.stdout
    plan = _run([python, "-m", "mmpar.compat.install", "--dry-run", "mmdet", "mmseg"], src)
    assert "mmpar install: mmdet 2.28.2" in plan.stdout, plan.stdout
    assert "mmpar install: mmsegmentation 0.30.0" in plan.stdout, plan.stdout
    version = _run([python, "-c", "import mmpar; print(mmpar.__version__)"], tmp_path)
    assert version.stdout.strip() == importlib.metadata.version("mmpar")


def test_the_venv_sees_no_undeclared_package(tmp_path: Path):
    """The linking brings a distribution's own requirements and nothing more."""
    found = closure(["packaging"])
    assert list(found) == ["packaging"]
    link_into(found.values(), tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "packaging" in names and any(n.startswith("packaging-") for n in names), names
    assert not any(n.startswith(("torch", "numpy")) for n in names), names
