"""The installer's steps, each printed as it happens (or, for ``--dry-run``, as it would)."""

from __future__ import annotations

import importlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from mmpar.compat.install.catalogue import (
    BUILT_AGAINST_NUMPY,
    CODEBASES,
    MMCV_BUILD_ENV,
    MMCV_BUILD_TOOLS,
    READ_FROM_WHEEL,
    RELEASES,
    choose_mmcv,
    compiles_extensions,
    parse_codebases,
)
from mmpar.compat.install.environment import Environment
from mmpar.compat.install.errors import InstallError
from mmpar.compat.install.pip import (
    build_wheel,
    build_without_extensions,
    cache_dir,
    cached_newest,
    cached_wheel,
    check_pip,
    fetch_newest,
    fetch_wheel,
    install,
    resolve,
    strip_wheel,
    wheel_requires,
)
from mmpar.compat.install.requirements import Needs, runtime_requirements, usable_resolution

__all__ = ["Installer"]


class Installer:
    """mmcv at one version, the codebases named (and those they import), and their needs.

    Everything that can refuse (an unknown codebase, an mmcv a codebase refuses, no
    torch, an mmcv-full in the way) refuses here, before anything is touched.

    Args:
        codebases: ``NAME`` or ``NAME==VERSION`` for each codebase.
        mmcv: The mmcv version asked for, or None for the newest all accept.
        target: A ``pip --target`` folder, or None for this Python's site-packages.
        say: Prints one step.
    """

    def __init__(
        self,
        codebases: Sequence[str],
        mmcv: Optional[str],
        target: Optional[Path],
        say: Callable[[str], None],
    ):
        self.say = say
        self.target = target
        self.request = parse_codebases(codebases)
        self.mmcv, self.why = choose_mmcv(mmcv, self.request)
        self.env = Environment(target)
        self.pins = self.env.torch_pins()
        full = self.env.mmcv_full()
        if full is not None and target is None:
            raise InstallError(
                f"mmcv-full {full} is installed, which is the same `mmcv` package with "
                "compiled ops: uninstall it first (pip uninstall mmcv-full), or install "
                "into another --target DIR"
            )
        self.versions: Dict[str, str] = {"mmcv": self.mmcv, **self.request.versions}
        self.cache = cache_dir()

    def modules(self) -> List[str]:
        """The import names of mmcv and the codebases."""
        return [_module(dist) for dist in self.versions]

    def _pending(self) -> List[str]:
        """mmcv and the codebases to install: absent, at another version, or with strays."""
        return [
            dist
            for dist, want in self.versions.items()
            if self.env.version(dist) != want or self._strays(dist)
        ]

    def _strays(self, dist: str) -> List[str]:
        """What ``dist`` installed beside its package where this install replaces it."""
        if self.target is not None and not self.env.in_target(dist):
            return []  # --target adds, and cannot take from the main site-packages
        return self.env.strays(dist, _module(dist))

    def _named(self, dist: str) -> str:
        version = self.versions[dist]
        return _change(dist, version, self.env)

    def _header(self) -> None:
        pins = ", ".join(f"{name} {version}" for name, version in self.pins)
        where = f"--target {self.target}" if self.target else "its site-packages"
        self.say(f"python {sys.executable}, into {where}; keeps {pins} (pinned for pip)")
        self.say(f"mmcv {self.mmcv}, without compiled ops (mmpar supplies mmcv.ops): {self.why}")
        for dist, version in self.request.versions.items():
            if dist in self.request.named:
                why = "named"
            else:
                users = [d for d in self.request.versions if dist in CODEBASES[d].needs]
                why = f"{' and '.join(users)} import{'s' if len(users) == 1 else ''} it"
            if (dist, version) in RELEASES:
                why += f"; accepts mmcv{_shown_range(dist, version)}"
            elif version != CODEBASES[dist].default:
                default = CODEBASES[dist].default
                why += f"; mmcv range taken from {default}'s, and checked on import, last"
            self.say(f"{dist} {version} ({why})")
        self._installed_notes()

    def _installed_notes(self) -> None:
        """What is installed already that this install mends, or cannot."""
        for dist in ["mmcv", *CODEBASES]:
            installed = self.env.version(dist)
            strays = self.env.strays(dist, _module(dist))
            if strays:
                mended = bool(self._strays(dist))
                self.say(
                    f"{'' if mended else 'note: '}{dist} {installed} is installed with a "
                    f"top-level {', '.join(strays)} package, which shadows other projects' (a "
                    "tests/ folder without __init__.py): "
                    + (
                        "it is reinstalled without"
                        if mended
                        else "naming it here, without --target, reinstalls it without"
                    )
                )
            codebase = CODEBASES.get(dist)
            if codebase is None or dist in self.versions or installed != codebase.default:
                continue
            if self.mmcv not in codebase.mmcv_range():
                self.say(
                    f"note: {dist} {installed} is installed too, and accepts mmcv{codebase.mmcv}"
                    ": run it with such an mmcv from another --target first on PYTHONPATH"
                )

    def _owners(self, wheels: Dict[str, Path]) -> Tuple[List[Tuple[str, List[str]]], List[str]]:
        """``(dist, Requires-Dist)`` of each package whose metadata is at hand; the others."""
        owners, unknown = [], []
        for dist, version in self.versions.items():
            if self.env.version(dist) == version:
                owners.append((dist, self.env.requires(dist)))
            elif dist in wheels:
                owners.append((dist, wheel_requires(wheels[dist])))
            else:
                unknown.append(dist)
        return owners, unknown

    def _needs(self, owners: List[Tuple[str, List[str]]]) -> Needs:
        needs = runtime_requirements(owners, self.request.versions, self.env)
        for note in needs.notes:
            self.say(note)
        return needs

    def _already(self) -> None:
        done = ", ".join(f"{dist} {version}" for dist, version in self.versions.items())
        where = f" (with {self.target} first on PYTHONPATH)" if self.target else ""
        self.say(f"already installed{where}: {done} and their runtime requirements; nothing to do")

    def dry_run(self) -> None:
        """Print what :meth:`install` would do; read no index, change nothing."""
        self._header()
        pending = self._pending()
        wheels = {}
        for dist in pending:
            wheel = cached_wheel(dist, self.versions[dist], self.cache)
            if wheel is not None:
                wheels[dist] = wheel
                self.say(f"would install {self._named(dist)} from {wheel}")
            elif dist == "mmcv":
                self.say(
                    f"would build {self._named(dist)} in a throwaway venv (setuptools<70, "
                    f"MMCV_WITH_OPS=0) into {self.cache}, and install it"
                )
            elif compiles_extensions(dist, self.versions[dist]):
                self.say(
                    f"would make the wheel of {self._named(dist)} from its sdist without its "
                    f"{compiles_extensions(dist, self.versions[dist])} compiled extensions "
                    f"(mmpar supplies them) into {self.cache}, and install it"
                )
            elif CODEBASES[dist].setup_imports_torch:
                self.say(
                    f"would make the wheel of {self._named(dist)} from its sdist with this "
                    f"Python's torch (its setup.py imports torch, and compiles nothing) into "
                    f"{self.cache}, and install it"
                )
            else:
                self.say(f"would download {self._named(dist)} into {self.cache}, and install it")
        owners, unknown = self._owners(wheels)
        needs = self._needs(owners)
        if not pending and not needs.missing:
            self._already()
            return
        for spec in _from_wheel(needs):
            where = cached_newest(spec, self.cache) or "the newest wheel"
            self.say(
                f"would install {spec} from {where}, and resolve the requirements read from it "
                f"instead of as written: {READ_FROM_WHEEL[_name(spec)]}"
            )
        if needs.missing:
            self.say(
                f"would have pip resolve (torch pinned) and install: {', '.join(needs.missing)}"
            )
        if unknown:
            self.say(
                f"would read the requirements of {', '.join(unknown)} from the wheels, "
                "and have pip resolve those too"
            )

    def install(self) -> bool:
        """Install what is missing; False when everything already was."""
        start = time.perf_counter()
        self._header()
        pending = self._pending()
        owners, _ = self._owners({})
        met = not runtime_requirements(owners, self.request.versions, self.env).missing
        if not pending and met:
            self._already()
            return False
        check_pip()
        wheels = {dist: self._wheel(dist) for dist in pending}
        needs = self._needs(self._owners(wheels)[0])
        with tempfile.TemporaryDirectory(prefix="mmpar-install-") as tmp:
            constraints = Path(tmp) / "constraints.txt"
            constraints.write_text("".join(f"{n}=={v}\n" for n, v in self.pins))
            specs = [str(wheels[dist]) for dist in pending] + self._resolved(needs, constraints)
            self.say(
                f"installing (pip --no-deps): {len(specs)} package{'' if len(specs) == 1 else 's'}"
            )
            install(specs, constraints, self.target)
        self._verify(start)
        return True

    def _wheel(self, dist: str) -> Path:
        version = self.versions[dist]
        wheel = cached_wheel(dist, version, self.cache)
        if wheel is not None:
            self.say(f"{dist} {version}: cached wheel {wheel}")
            self._strip(dist, wheel)
            return wheel
        start = time.perf_counter()
        if dist == "mmcv":
            wheel = build_wheel("mmcv", version, self.cache, MMCV_BUILD_TOOLS, MMCV_BUILD_ENV)
            how = "built in a throwaway venv (setuptools<70, MMCV_WITH_OPS=0)"
        elif compiles_extensions(dist, version):
            wheel = build_without_extensions(dist, version, self.cache)
            how = (
                f"made from its sdist without its {compiles_extensions(dist, version)} compiled "
                "extensions (mmpar supplies them)"
            )
        else:
            torch = CODEBASES[dist].setup_imports_torch
            wheel = fetch_wheel(dist, version, self.cache, torch)
            how = (
                "made from its sdist with this Python's torch, nothing compiled"
                if torch
                else "fetched"
            )
        self.say(f"{dist} {version}: {how} in {_secs(start)}, cached as {wheel}")
        self._strip(dist, wheel)
        return wheel

    def _strip(self, dist: str, wheel: Path) -> None:
        dropped = strip_wheel(wheel, [_module(dist), f"{_module(dist)}.py"])
        if dropped:
            self.say(
                f"{dist}: left its top-level {', '.join(dropped)} out of the wheel "
                "(it would shadow other projects' packages of that name)"
            )

    def _read_from_wheels(self, needs: Needs) -> List[str]:
        """The wheels of :data:`READ_FROM_WHEEL` requirements in ``needs.missing``, whose
        place there their own requirements (read from the wheel, changed as listed) take."""
        wheels = []
        for spec in _from_wheel(needs):
            wheel = cached_newest(spec, self.cache) or fetch_newest(spec, self.cache)
            needs.missing.remove(spec)
            name, version = _name(spec), wheel.name.split("-")[1]
            self.say(
                f"{name} {version} from {wheel}, the requirements read from it resolved "
                f"instead of as written: {READ_FROM_WHEEL[name]}"
            )
            own = self._needs([(name, wheel_requires(wheel))])
            needs.missing += [m for m in own.missing if m not in needs.missing]
            wheels.append(str(wheel))
        return wheels

    def _resolved(self, needs: Needs, constraints: Path) -> List[str]:
        wheels = self._read_from_wheels(needs)
        if not needs.missing:
            return wheels
        start = time.perf_counter()
        resolved = resolve(needs.missing, constraints, self.target)
        kept, dropped = usable_resolution(resolved, self.env)
        self.say(
            f"pip resolves {', '.join(needs.missing)} (torch pinned) in {_secs(start)} to: "
            + ", ".join(_change(name, version, self.env) for name, version in kept)
        )
        if dropped:
            self.say(f"left out of pip's resolution: {', '.join(dropped)} (cv2 and torch stay)")
        numpy = dict((canonicalize_name(n), v) for n, v in kept).get("numpy")
        numpy = numpy or self.env.version("numpy")
        specs = []
        for name, version in kept:
            if canonicalize_name(name) in BUILT_AGAINST_NUMPY and _major(numpy) >= 2:
                specs.append(str(self._against_numpy(canonicalize_name(name), version, numpy)))
            else:
                specs.append(f"{name}=={version}" if version else name)
        return wheels + specs

    def _against_numpy(self, name: str, version: str, numpy: str) -> Path:
        cache = self.cache / f"numpy-{numpy}"
        wheel = cached_wheel(name, version, cache)
        if wheel is not None:
            self.say(f"{name} {version}: cached wheel {wheel}")
            return wheel
        start = time.perf_counter()
        tools = ("setuptools<70", "wheel", "cython", f"numpy=={numpy}")
        wheel = build_wheel(name, version, cache, tools)
        self.say(
            f"{name} {version}: built against numpy {numpy} in {_secs(start)} "
            f"({BUILT_AGAINST_NUMPY[name]}), cached as {wheel}"
        )
        return wheel

    def _verify(self, start: float) -> None:
        importlib.invalidate_caches()
        after = Environment(self.target)
        wrong = [
            f"{dist} {after.version(dist)} (not {version})"
            for dist, version in [*self.versions.items(), *self.pins]
            if after.version(dist) != version
        ]
        if wrong:
            raise InstallError(f"after pip install, Python sees {', '.join(wrong)}")
        done = ", ".join(f"{dist} {version}" for dist, version in self.versions.items())
        pins = ", ".join(f"{name} {version}" for name, version in self.pins)
        where = f" into {self.target} (put it first on PYTHONPATH)" if self.target else ""
        self.say(f"installed{where} in {_secs(start)}: {done}; {pins} unchanged")


def _change(name: str, version: str, env: Environment) -> str:
    """``name version``, and what it replaces, or shadows from ``--target``."""
    shown = f"{name} {version or '(newest)'}"
    installed = env.version(name)
    if not installed or installed == version:
        return shown
    verb = "replaces" if env.target is None or env.in_target(name) else "shadows"
    return f"{shown} ({verb} {installed})"


def _shown_range(dist: str, version: str) -> str:
    """``>=1.3.8,<=1.4.0``: the release's mmcv range, lower bound first."""
    return ",".join(
        sorted(RELEASES[(dist, version)].mmcv.split(","), key=lambda s: s.lstrip("<>="))
    )


def _name(spec: str) -> str:
    return canonicalize_name(Requirement(spec).name)


def _from_wheel(needs: Needs) -> List[str]:
    """The requirements in ``needs.missing`` installed as :data:`READ_FROM_WHEEL` says."""
    return [spec for spec in needs.missing if _name(spec) in READ_FROM_WHEEL]


def _module(dist: str) -> str:
    return "mmcv" if dist == "mmcv" else CODEBASES[dist].module


def _major(version: Optional[str]) -> int:
    return int(version.split(".")[0]) if version else 0


def _secs(start: float) -> str:
    return f"{time.perf_counter() - start:.1f} s"
