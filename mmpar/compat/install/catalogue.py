"""What the installer knows without asking an index: mmcv 1.x's releases, the codebases,
the mmcv range each accepts, and the few requirements it installs otherwise than written.

The mmcv ranges are those each codebase's ``__init__`` asserts on import (its
``Requires-Dist`` names ``mmcv-full`` only under the ``mim`` extra, which the
installer ignores), for its default version, the last release built on mmcv 1.x,
and for the older releases in :data:`RELEASES` (mmdet3d 0.17.x and 0.18.x, on which
the research code of the 3D era is built, with the mmdet and mmseg they pin).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from mmpar.compat.install.errors import InstallError

__all__ = [
    "ALIASES",
    "BUILT_AGAINST_NUMPY",
    "CODEBASES",
    "CV2_DISTS",
    "MMCV_BUILD_ENV",
    "MMCV_BUILD_TOOLS",
    "MMCV_RELEASES",
    "NOT_INSTALLED",
    "READ_FROM_WHEEL",
    "RELAXED",
    "RELEASES",
    "REPLACED",
    "Codebase",
    "Release",
    "Request",
    "choose_mmcv",
    "compiles_extensions",
    "mmcv_range",
    "parse_codebases",
]


def _releases(minor: int, last: int) -> List[str]:
    return [f"1.{minor}.{patch}" for patch in range(last + 1)]


#: Every mmcv 1.x release from 1.3.0 on, oldest first.
MMCV_RELEASES: Tuple[str, ...] = tuple(
    _releases(3, 18) + _releases(4, 8) + _releases(5, 3) + _releases(6, 2) + _releases(7, 2)
)


#: What mmcv 1.x's sdist is built with, in a venv of its own: its setup.py imports
#: pkg_resources, which setuptools 70 dropped; MMCV_WITH_OPS=0 builds no compiled op.
MMCV_BUILD_TOOLS = ("setuptools<70", "wheel")
MMCV_BUILD_ENV = {"MMCV_WITH_OPS": "0"}


@dataclass(frozen=True)
class Codebase:
    """An OpenMMLab codebase built on mmcv 1.x.

    Attributes:
        dist: Its name on the package index.
        module: Its import name.
        default: The version installed when none is named: its last mmcv-1.x release.
        mmcv: The mmcv versions its default version accepts on import (older versions
            are taken to accept no newer mmcv).
        needs: The other codebases it imports (installed with it, at their defaults).
        setup_imports_torch: Its sdist's ``setup.py`` imports torch, so its wheel is
            built by this Python, without build isolation.
    """

    dist: str
    module: str
    default: str
    mmcv: str
    needs: Tuple[str, ...] = ()
    setup_imports_torch: bool = False

    def mmcv_range(self) -> SpecifierSet:
        return SpecifierSet(self.mmcv)


CODEBASES: Dict[str, Codebase] = {
    c.dist: c
    for c in (
        Codebase("mmdet", "mmdet", "2.28.2", ">=1.3.17,<=1.8.0"),
        Codebase("mmsegmentation", "mmseg", "0.30.0", ">=1.3.13,<1.8.0", ("mmcls",)),
        Codebase("mmrotate", "mmrotate", "0.3.4", ">=1.5.3,<=1.8.0", ("mmdet",)),
        Codebase("mmocr", "mmocr", "0.6.3", ">=1.3.8,<1.8.0", ("mmdet",)),
        Codebase("mmedit", "mmedit", "0.16.1", ">=1.3.13,<1.8.0"),
        Codebase("mmaction2", "mmaction", "0.24.1", ">=1.3.6,<=1.7.0"),
        Codebase("mmpose", "mmpose", "0.29.0", ">=1.3.8,<=1.7.0"),
        Codebase("mmcls", "mmcls", "0.25.0", ">=1.4.2,<=1.9.0"),
        Codebase("mmtrack", "mmtrack", "0.14.0", ">=1.3.17,<2.0.0", ("mmdet", "mmcls")),
        Codebase(
            "mmdet3d",
            "mmdet3d",
            "1.0.0rc6",
            ">=1.5.2,<=1.7.0",
            ("mmdet", "mmsegmentation"),
            setup_imports_torch=True,
        ),
    )
}


@dataclass(frozen=True)
class Release:
    """An older release of a codebase, whose gates differ from its default version's.

    Attributes:
        mmcv: The mmcv versions its ``__init__`` accepts.
        needs: ``(dist, version)`` of each codebase it imports, installed with it at that
            version unless named (the versions its users pin, inside its gates).
        extensions: How many compiled extensions its sdist's ``setup.py`` builds: its
            wheel is made without them (mmpar supplies them, see
            :mod:`mmpar.compat.mmdet3d017`).
    """

    mmcv: str
    needs: Tuple[Tuple[str, str], ...] = ()
    extensions: int = 0


#: mmdet3d 0.17.1 and 0.17.2 accept mmcv <= 1.4.0, mmdet >= 2.14.0, mmseg >= 0.14.1;
#: BEVFormer, DETR3D, UniAD 1.0 and VAD pin those with mmcv-full 1.4.0; PETR pins mmdet
#: 2.24.1 and mmseg 0.20.2 (its train.py imports mmdet's get_device): name them.
_MMDET3D_017 = (("mmdet", "2.14.0"), ("mmsegmentation", "0.14.1"))
#: mmdet3d 0.18.x asks mmdet >= 2.19.0 and mmseg >= 0.20.0.
_MMDET3D_018 = (("mmdet", "2.19.1"), ("mmsegmentation", "0.20.2"))

#: (dist, version) -> the release's gates, where they differ from the default's.
RELEASES: Dict[Tuple[str, str], Release] = {
    ("mmdet3d", "0.17.1"): Release(">=1.3.8,<=1.4.0", _MMDET3D_017, extensions=11),
    ("mmdet3d", "0.17.2"): Release(">=1.3.8,<=1.4.0", _MMDET3D_017, extensions=11),
    ("mmdet3d", "0.17.3"): Release(">=1.3.8,<=1.5.0", _MMDET3D_017, extensions=11),
    ("mmdet3d", "0.18.0"): Release(">=1.3.8,<=1.5.0", _MMDET3D_018, extensions=11),
    ("mmdet3d", "0.18.1"): Release(">=1.3.8,<=1.5.0", _MMDET3D_018, extensions=11),
    ("mmdet", "2.14.0"): Release(">=1.3.8,<=1.4.0"),
    ("mmdet", "2.19.1"): Release(">=1.3.8,<=1.5.0"),
    ("mmsegmentation", "0.14.1"): Release(">=1.3.1,<=1.4.0"),
    ("mmsegmentation", "0.20.2"): Release(">=1.3.13,<=1.5.0"),
}


def mmcv_range(dist: str, version: str) -> SpecifierSet:
    """The mmcv versions ``dist`` ``version`` accepts: its :data:`RELEASES` entry's, else
    its default version's (an older release is taken to accept no newer mmcv)."""
    release = RELEASES.get((dist, version))
    return SpecifierSet(release.mmcv) if release else CODEBASES[dist].mmcv_range()


def compiles_extensions(dist: str, version: str) -> int:
    """How many compiled extensions the sdist of ``dist`` ``version`` builds (0: none)."""
    release = RELEASES.get((dist, version))
    return release.extensions if release else 0


def _needs(dist: str, version: str) -> Tuple[Tuple[str, Optional[str]], ...]:
    release = RELEASES.get((dist, version))
    if release is not None:
        return release.needs
    return tuple((need, None) for need in CODEBASES[dist].needs)


#: Other names a codebase goes by on the command line (its import name).
ALIASES: Dict[str, str] = {"mmseg": "mmsegmentation", "mmaction": "mmaction2"}

#: Distributions that all install the one ``cv2`` package: any of them serves every
#: requirement on another; where none is installed, the headless build is.
CV2_DISTS = (
    "opencv-python",
    "opencv-python-headless",
    "opencv-contrib-python",
    "opencv-contrib-python-headless",
)

#: (who requires it, requirement name) -> what is installed instead, and why.
REPLACED: Dict[Tuple[str, str], Tuple[str, str]] = {
    ("mmcv", "yapf"): (
        "yapf==0.40.1",
        "mmcv.Config passes verify= to yapf, which yapf 0.40.2 dropped; yapf < 0.40 imports "
        "lib2to3, gone in Python 3.13",
    ),
}

#: (who requires it, requirement name) -> why its version bound is dropped: no release
#: inside it installs on today's Python and numpy.
RELAXED: Dict[Tuple[str, str], str] = {
    ("mmtrack", "pandas"): "pandas <= 1.3.5 has no wheel for Python >= 3.11",
    ("mmtrack", "scipy"): "scipy <= 1.7.3 has no wheel for Python >= 3.11",
    ("mmdet3d", "numba"): (
        "numba 0.53.0 has no wheel for Python >= 3.10; pip takes the newest numba whose "
        "numpy range holds the installed numpy (numba's numba.core API, which mmdet3d uses)"
    ),
    ("mmdet3d", "networkx"): "networkx < 2.3 imports fractions.gcd, gone in Python 3.9",
    ("mmdet3d", "trimesh"): "trimesh 2.35.39 uses numpy aliases removed in numpy 1.24",
    ("mmdet3d", "numpy"): (
        "mmdet3d 0.17 asks numpy < 1.20, which has no wheel for Python >= 3.10; "
        "mmpar puts back the numpy aliases it reads"
    ),
    ("nuscenes-devkit", "numpy"): (
        "nuscenes-devkit 1.2.0 asks numpy < 2, and would move numpy back to 1.x; what "
        "mmdet3d imports of it (its Box, its evaluation) runs on numpy 2"
    ),
    ("nuscenes-devkit", "shapely"): (
        "nuscenes-devkit 1.2.0 asks Shapely 2.0.x; it uses Shapely's polygons only"
    ),
}

#: Requirements of the codebases installed from their newest wheel without the
#: requirements it names as written: those are read from the wheel and resolved with
#: :data:`RELAXED`'s changes (requirement name -> why).
READ_FROM_WHEEL: Dict[str, str] = {
    "nuscenes-devkit": (
        "its newest release asks numpy < 2, and 1.1.11 (the last without) matplotlib < 3.6, "
        "which numpy 2 cannot load"
    ),
}

#: (who requires it, requirement name) -> why it is not installed.
NOT_INSTALLED: Dict[Tuple[str, str], str] = {
    ("mmpose", "chumpy"): (
        "its setup.py imports pip, so it does not build in pip's isolated builds, and it "
        "imports numpy names removed in numpy 1.24; mmpose reads SMPL model files with it only"
    ),
}

#: requirement name -> why it is built here, against the installed numpy, where that
#: is numpy 2 or newer.
BUILT_AGAINST_NUMPY: Dict[str, str] = {
    "xtcocotools": "its wheels are compiled against numpy 1.x, which numpy 2 refuses to load",
}

_NAME_VERSION = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)(?:==([A-Za-z0-9.+!_-]+))?$")


@dataclass
class Request:
    """The codebases to install, each with its version and who asked for it.

    Attributes:
        versions: dist name -> version, in installation order (needed ones first).
        named: The dist names the user named.
    """

    versions: Dict[str, str]
    named: List[str]


def _known() -> str:
    return ", ".join(sorted(CODEBASES) + sorted(ALIASES))


def parse_codebases(args: Sequence[str]) -> Request:
    """``["mmpose", "mmdet==2.25.0"]`` -> the codebases to install, the needed ones added.

    Raises:
        InstallError: an unknown name, a version bound other than ``==``, or one
            codebase asked for at two versions.
    """
    named: Dict[str, Optional[str]] = {}
    for arg in args:
        match = _NAME_VERSION.match(arg.strip())
        if match is None:
            raise InstallError(f"codebase {arg!r}: expected NAME or NAME==VERSION")
        name = match.group(1).lower()
        dist = ALIASES.get(name, name)
        if dist not in CODEBASES:
            raise InstallError(f"unknown codebase {match.group(1)!r} (known: {_known()})")
        version = match.group(2)
        if named.get(dist) not in (None, version) and version is not None:
            raise InstallError(f"codebase {dist} named twice: {named[dist]} and {version}")
        named[dist] = version or named.get(dist)
    versions: Dict[str, str] = {}

    def add(dist: str, pinned: Optional[str] = None) -> None:
        version = named.get(dist) or pinned or CODEBASES[dist].default
        for need, at in _needs(dist, version):
            if need not in versions:
                add(need, at)
        if dist not in versions:
            versions[dist] = version

    for dist in named:
        add(dist)
    return Request(versions=versions, named=list(named))


def _ranges(request: Request) -> List[Tuple[str, SpecifierSet]]:
    """``("<codebase> <version>", mmcv range)`` for each codebase (:func:`mmcv_range`:
    an older release not in :data:`RELEASES` may accept fewer, which then shows on import).
    """
    return [
        (f"{dist} {version}", mmcv_range(dist, version))
        for dist, version in request.versions.items()
    ]


def choose_mmcv(asked: Optional[str], request: Request) -> Tuple[str, str]:
    """The mmcv version to install, and why.

    Without ``asked``: the newest release that every codebase at its default
    version accepts (1.7.2, or 1.7.0 with mmpose, mmaction2 or mmdet3d).

    Raises:
        InstallError: ``asked`` is no mmcv release from 1.3.0 to 1.7.2, a codebase
            refuses it, or no release satisfies every codebase.
    """
    ranges = _ranges(request)
    if asked is not None:
        if asked not in MMCV_RELEASES:
            raise InstallError(
                f"--mmcv {asked}: not an mmcv 1.x release from 1.3.0 to 1.7.2 "
                f"(mmcv 2.x has no mmcv.parallel; releases: {', '.join(MMCV_RELEASES)})"
            )
        refused = [f"{who} (mmcv{_shown(spec)})" for who, spec in ranges if asked not in spec]
        if refused:
            best = _newest(ranges)
            hint = f": leave out --mmcv (then mmcv {best})" if best else ""
            raise InstallError(f"--mmcv {asked} is refused by {', '.join(refused)}{hint}")
        return asked, "asked for (--mmcv)"
    best = _newest(ranges)
    if best is None:
        raise InstallError(
            "no mmcv 1.x release suits every codebase named: "
            + ", ".join(f"{who} (mmcv{_shown(spec)})" for who, spec in ranges)
        )
    capped = [who for who, spec in ranges if MMCV_RELEASES[-1] not in spec]
    if not capped:
        return best, "the newest mmcv 1.x"
    return best, f"{' and '.join(capped)} accept{'s' if len(capped) == 1 else ''} mmcv <= {best}"


def _shown(spec: SpecifierSet) -> str:
    """``>=1.3.8,<=1.7.0``: lower bound first (``str(spec)`` sorts them as text)."""
    return ",".join(sorted((str(s) for s in spec), key=lambda s: s.lstrip("<>=!~")))


def _newest(ranges: List[Tuple[str, SpecifierSet]]) -> Optional[str]:
    fits = [v for v in MMCV_RELEASES if all(v in spec for _, spec in ranges)]
    return max(fits, key=Version) if fits else None
