"""What is installed where Python looks: ``--target`` (if given) first, then ``sys.path``.

Read from the distributions' metadata and the import system's finders; nothing is
imported.
"""

from __future__ import annotations

import sys
from importlib import metadata
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from mmpar.compat.install.catalogue import CV2_DISTS
from mmpar.compat.install.errors import InstallError

__all__ = ["Environment"]


class Environment:
    """The installed distributions as a Python with ``target`` first on its path sees them.

    Args:
        target: The ``--target`` folder, searched first; ``None`` for none.
        path: The rest of the search path (default: ``sys.path``).
    """

    def __init__(self, target: Optional[Path] = None, path: Optional[Sequence[str]] = None):
        self.target = target
        rest = list(sys.path if path is None else path)
        self.path: List[str] = ([str(target)] if target is not None else []) + rest
        self._found: Dict[str, Optional[metadata.Distribution]] = {}

    def distribution(self, name: str) -> Optional[metadata.Distribution]:
        """The first distribution called ``name`` on the path (the one Python imports), or None."""
        key = canonicalize_name(name)
        if key not in self._found:
            found = metadata.distributions(name=name, path=self.path)
            self._found[key] = next(iter(found), None)
        return self._found[key]

    def version(self, name: str) -> Optional[str]:
        """The installed version of ``name``, or None."""
        dist = self.distribution(name)
        return None if dist is None else dist.version

    def requires(self, name: str) -> List[str]:
        """The ``Requires-Dist`` lines of the installed ``name``."""
        dist = self.distribution(name)
        return [] if dist is None else list(dist.requires or [])

    def in_target(self, name: str) -> bool:
        """Whether the installed ``name`` is the one in ``target``."""
        dist = self.distribution(name)
        if dist is None or self.target is None:
            return False
        return Path(str(dist.locate_file(""))).resolve() == self.target.resolve()

    def strays(self, name: str, module: str) -> List[str]:
        """Top-level packages the installed ``name`` put beside ``module`` (e.g. ``tests``)."""
        dist = self.distribution(name)
        if dist is None:
            return []
        tops = {str(f).replace("\\", "/").split("/")[0] for f in dist.files or []}
        meta = {t for t in tops if t.endswith((".dist-info", ".data"))}
        return sorted(tops - meta - {module, f"{module}.py", "..", "__pycache__"})

    def satisfies(self, requirement: Requirement) -> bool:
        """Whether an installed distribution meets ``requirement`` (its version included)."""
        if canonicalize_name(requirement.name) in CV2_DISTS:
            return self.has_cv2()
        version = self.version(requirement.name)
        return version is not None and requirement.specifier.contains(version, prereleases=True)

    def has_module(self, name: str) -> bool:
        """Whether a top-level module ``name`` would import (found, not imported)."""
        return PathFinder.find_spec(name, self.path) is not None

    def has_cv2(self) -> bool:
        """Whether some OpenCV build provides ``cv2`` (any of the four wheels, or a conda one)."""
        return self.has_module("cv2") or any(self.version(d) for d in CV2_DISTS)

    def mmcv_full(self) -> Optional[str]:
        """The version of an installed ``mmcv-full`` (mmcv 1.x with its compiled ops)."""
        return self.version("mmcv-full")

    def torch_pins(self) -> List[Tuple[str, str]]:
        """``[("torch", version), ("torchvision", version)?]``: what pip must never change.

        Raises:
            InstallError: torch is not installed (the installer installs none: its
                build depends on the machine, CPU or which CUDA).
        """
        torch = self.version("torch")
        if torch is None:
            raise InstallError(
                f"no torch installed for {sys.executable}: install the torch build for this "
                "machine first; this command keeps the torch it finds and installs none"
            )
        pins = [("torch", torch)]
        torchvision = self.version("torchvision")
        if torchvision is not None:
            pins.append(("torchvision", torchvision))
        return pins
