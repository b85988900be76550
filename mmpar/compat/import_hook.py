"""Run a callback right after a named module has been imported (a post-import hook).

mmpar uses it to meet mmcv 1.x when mmcv gets loaded, without ever importing
mmcv itself.
"""

from __future__ import annotations

import importlib.abc
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence

__all__ = ["on_import"]

Callback = Callable[[ModuleType], None]

_callbacks: Dict[str, List[Callback]] = {}


def on_import(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once module ``name`` is imported.

    At once if it already is; otherwise right after its code has run, each time
    it is (re)imported. A callback that raises does not break the import: its
    error becomes a warning.
    """
    _callbacks.setdefault(name, []).append(callback)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    module = sys.modules.get(name)
    if module is not None:
        _call(callback, module)


def _call(callback: Callback, module: ModuleType) -> None:
    try:
        callback(module)
    except Exception as err:  # a hook must never break the user's import
        warnings.warn(
            f"mmpar: hook on import of {module.__name__} failed: {err!r}",
            RuntimeWarning,
            stacklevel=2,
        )


class _Loader(importlib.abc.Loader):
    """The real loader, then the callbacks."""

    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for callback in list(_callbacks.get(self._name, ())):
            _call(callback, module)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package... of the real loader
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader the other finders find for a watched name."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[ModuleSpec]:
        if fullname not in _callbacks:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None
