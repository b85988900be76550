"""Which runtime requirements of mmcv and the codebases the installer hands to pip.

mmcv and the codebases are installed with ``--no-deps``: their ``Requires-Dist``
name mmcv-full, torch and opencv-python, which would replace the user's mmcv,
torch or OpenCV. The rest of their requirements, less what is installed already,
go to pip, with the changes listed in :mod:`mmpar.compat.install.catalogue`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from mmpar.compat.install.catalogue import (
    CODEBASES,
    CV2_DISTS,
    NOT_INSTALLED,
    RELAXED,
    REPLACED,
)
from mmpar.compat.install.environment import Environment
from mmpar.compat.install.errors import InstallError

__all__ = ["HEADLESS", "NEVER", "Needs", "runtime_requirements", "usable_resolution"]

#: Never installed by the installer: mmcv is built without its ops, torch stays the user's.
NEVER = ("mmcv", "mmcv-full", "mmcv-lite", "torch", "torchvision")

#: What serves a requirement on OpenCV where no ``cv2`` is installed.
HEADLESS = "opencv-python-headless"


@dataclass
class Needs:
    """Requirements of mmcv and the codebases, as pip gets them.

    Attributes:
        missing: Requirements no installed distribution meets (``name<spec>`` strings).
        notes: One line per requirement installed otherwise than written, or not at all.
    """

    missing: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.append(line)


def _applies(requirement: Requirement) -> bool:
    return requirement.marker is None or requirement.marker.evaluate({"extra": ""})


def runtime_requirements(
    owners: Iterable[Tuple[str, Sequence[str]]],
    versions: Dict[str, str],
    env: Environment,
) -> Needs:
    """The requirements pip must meet for ``owners`` (``(dist name, Requires-Dist lines)``).

    Args:
        owners: mmcv and each codebase, with the ``Requires-Dist`` of the version
            to be installed.
        versions: The codebases to be installed, dist name -> version: a
            requirement on one of them is checked against that version, not sent.
        env: What is installed.

    Raises:
        InstallError: a codebase requires another at a version outside the one
            to be installed.
    """
    needs = Needs()
    for owner, lines in owners:
        for line in lines:
            requirement = Requirement(line)
            if not _applies(requirement):
                continue
            spec = _requirement(owner, requirement, versions, env, needs)
            if spec is not None and not env.satisfies(Requirement(spec)):
                if spec not in needs.missing:
                    needs.missing.append(spec)
    return needs


def _requirement(
    owner: str,
    requirement: Requirement,
    versions: Dict[str, str],
    env: Environment,
    needs: Needs,
) -> Optional[str]:
    name = canonicalize_name(requirement.name)
    key = (owner, name)
    if name in ("torchvision",) and env.version(name) is None:
        needs.note(
            f"{owner} requires torchvision, which is not installed: install the torchvision "
            "build made for your torch (mmpar's mmcv.ops need it too)"
        )
    if name in NEVER:
        return None
    if name in CODEBASES:
        version = versions.get(name)
        if version is not None and not requirement.specifier.contains(version, True):
            raise InstallError(f"{owner} requires {requirement} but {name} {version} was named")
        return None
    if key in NOT_INSTALLED:
        needs.note(f"not installed: {name}, which {owner} asks for: {NOT_INSTALLED[key]}")
        return None
    if key in REPLACED:
        replacement, why = REPLACED[key]
        needs.note(f"{replacement} for {owner}'s {requirement}: {why}")
        return replacement
    if key in RELAXED:
        needs.note(f"{name} of any version for {owner}'s {requirement}: {RELAXED[key]}")
        requirement.specifier = SpecifierSet()
    if name in CV2_DISTS:
        if env.has_cv2():
            return None
        if name != HEADLESS:
            needs.note(f"{HEADLESS} for {owner}'s {name}: the same cv2, without GUI libraries")
        return f"{HEADLESS}{requirement.specifier}"
    return f"{requirement.name}{requirement.specifier}"


def usable_resolution(
    resolved: Sequence[Tuple[str, str]], env: Environment
) -> Tuple[List[Tuple[str, str]], List[str]]:
    """pip's resolution less what the installer never installs; and what it dropped.

    A requirement on opencv-python deeper down (imgaug's, facexlib's) would install a
    second ``cv2`` over the one there: every OpenCV build but the headless one is
    dropped, and the headless one added where no ``cv2`` is installed.
    """
    kept: List[Tuple[str, str]] = []
    dropped: List[str] = []
    wants_cv2 = False
    for name, version in resolved:
        key = canonicalize_name(name)
        if key in NEVER or key in CODEBASES:
            dropped.append(f"{name} {version}")
        elif key in CV2_DISTS and key != HEADLESS:
            dropped.append(f"{name} {version}")
            wants_cv2 = True
        else:
            kept.append((name, version))
    has_headless = any(canonicalize_name(n) == HEADLESS for n, _ in kept)
    if wants_cv2 and not has_headless and not env.has_cv2():
        kept.append((HEADLESS, ""))
    return kept, dropped
