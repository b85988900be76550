"""The import finder that answers mmdet3d 0.17's extension modules with mmpar's stand-ins,
and runs a mend before a named module's code (not an mmdet3d module).

``import mmdet3d.ops`` (0.17.x, 0.18.x) imports 11 compiled modules (``from . import
sparse_conv_ext``). Where no compiled file of that name is on the package's path,
the finder answers with a module holding the functions of
:mod:`~mmpar.compat.mmdet3d017.spconv_ext`, :mod:`~mmpar.compat.mmdet3d017.boxes_ext`,
:mod:`~mmpar.compat.mmdet3d017.voxel_ext`, :mod:`~mmpar.compat.mmdet3d017.points_ext` and
:mod:`~mmpar.compat.mmdet3d017.grouping_ext`
under their pybind names; a name the compiled module does not have is an
``AttributeError``, as on a pybind module. A compiled file that is there (mmdet3d
built with its ops) is left to load, unless ``$MMPAR_MMCV_OPS=mmpar``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence

__all__ = ["EXTENSIONS", "before_import", "mount", "stand_in"]

#: The compiled modules of mmdet3d 0.17.x / 0.18.x that mmpar supplies.
EXTENSIONS = (
    "mmdet3d.ops.spconv.sparse_conv_ext",
    "mmdet3d.ops.iou3d.iou3d_cuda",
    "mmdet3d.ops.voxel.voxel_layer",
    "mmdet3d.ops.roiaware_pool3d.roiaware_pool3d_ext",
    "mmdet3d.ops.ball_query.ball_query_ext",
    "mmdet3d.ops.knn.knn_ext",
    "mmdet3d.ops.paconv.assign_score_withk_ext",
    "mmdet3d.ops.group_points.group_points_ext",
    "mmdet3d.ops.interpolate.interpolate_ext",
    "mmdet3d.ops.furthest_point_sample.furthest_point_sample_ext",
    "mmdet3d.ops.gather_points.gather_points_ext",
)

_before: Dict[str, List[Callable[[], None]]] = {}


def stand_in(name: str) -> ModuleType:
    """A fresh stand-in for the compiled module ``name`` (one of :data:`EXTENSIONS`)."""
    from mmpar.compat.mmdet3d017 import (
        boxes_ext,
        grouping_ext,
        points_ext,
        spconv_ext,
        voxel_ext,
    )

    functions: Dict[str, Any] = {}
    for source in (spconv_ext, boxes_ext, voxel_ext, points_ext, grouping_ext):
        functions.update(source.MODULES.get(name, {}))
    if not functions:
        raise ModuleNotFoundError(f"No module named {name!r} (mmpar supplies none)", name=name)
    module = ModuleType(
        name, f"mmpar's stand-in for mmdet3d 0.17's compiled {name} (see mmpar.compat.mmdet3d017)."
    )
    module.__mmpar_ops__ = True
    vars(module).update(functions)
    return module


def before_import(name: str, mend: Callable[[], None]) -> None:
    """Run ``mend()`` each time module ``name`` is about to run its code."""
    _before.setdefault(name, []).append(mend)
    mount()


def _compiled(fullname: str, path: Optional[Sequence[str]]) -> bool:
    spec = importlib.machinery.PathFinder.find_spec(fullname, path)
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return spec is not None and str(spec.origin or "").endswith(suffixes)


class _MendingLoader(Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        for mend in list(_before.get(self._name, ())):
            mend()
        self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Finder(MetaPathFinder, Loader):
    """Answers :data:`EXTENSIONS` with stand-ins; wraps the loaders of mended modules."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[ModuleSpec]:
        if fullname in EXTENSIONS:
            if os.environ.get("MMPAR_MMCV_OPS") != "mmpar" and _compiled(fullname, path):
                return None
            return ModuleSpec(fullname, self)
        if fullname in _before:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _MendingLoader(spec.loader, fullname)
            return spec
        return None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return stand_in(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        pass


def mount() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
