"""What else stops mmdet3d 0.17.x / 0.18.x on today's stack, mended (not an mmdet3d module).

* Sparse convolutions registered twice. mmdet3d 0.17's ``mmdet3d/ops/spconv/conv.py``
  registers ``SparseConv3d``, ``SubMConv3d``, ... in mmcv's ``CONV_LAYERS``; mmcv >= 1.4.6
  (and mmpar's ``mmcv.ops``, which are mmcv 1.7.2's) registers the same names first, and
  mmcv's registry refuses the second ("already registered"). Right before that module
  runs, the names it registers are taken out of ``CONV_LAYERS`` where they hold a class
  of another module, so mmdet3d's own layers (on its own ``SparseConvTensor``) are the
  ones its configs build, as on the mmcv it was made for.
* ``numba.errors``, which numba 0.49 moved to ``numba.core.errors`` and later releases
  dropped: ``import numba.errors`` (mmdet3d 0.17's ``data_augment_utils``) gets a module
  holding ``numba.core.errors``' names, where numba has no ``numba.errors`` of its own.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Optional, Sequence

from mmpar.compat.mmdet3d017.mount import before_import

__all__ = [
    "SPCONV_CONV_MODULE",
    "SPARSE_CONV_NAMES",
    "free_sparse_conv_names",
    "mend_numba_errors",
    "mend_sparse_conv_registry",
]

#: The module of mmdet3d 0.17 that registers its sparse convolutions.
SPCONV_CONV_MODULE = "mmdet3d.ops.spconv.conv"
#: The names it registers in mmcv's ``CONV_LAYERS``.
SPARSE_CONV_NAMES = (
    "SparseConv2d",
    "SparseConv3d",
    "SparseConv4d",
    "SparseConvTranspose2d",
    "SparseConvTranspose3d",
    "SparseInverseConv2d",
    "SparseInverseConv3d",
    "SubMConv2d",
    "SubMConv3d",
    "SubMConv4d",
)
_NUMBA_ERRORS = "numba.errors"


def free_sparse_conv_names() -> None:
    """Take :data:`SPARSE_CONV_NAMES` out of mmcv's ``CONV_LAYERS`` where another module's
    class holds them."""
    registry = sys.modules.get("mmcv.cnn.bricks.registry")
    if registry is None:
        return
    layers = registry.CONV_LAYERS._module_dict
    for name in SPARSE_CONV_NAMES:
        held = layers.get(name)
        if held is not None and getattr(held, "__module__", "") != SPCONV_CONV_MODULE:
            del layers[name]


def mend_sparse_conv_registry() -> None:
    """Free the names each time mmdet3d 0.17's ``spconv/conv.py`` is about to run."""
    before_import(SPCONV_CONV_MODULE, free_sparse_conv_names)


class _NumbaErrors(MetaPathFinder, Loader):
    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[ModuleSpec]:
        if fullname != _NUMBA_ERRORS:
            return None
        import importlib.machinery

        if importlib.machinery.PathFinder.find_spec(fullname, path) is not None:
            return None  # numba < 0.5x has its own
        return ModuleSpec(fullname, self)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        errors = importlib.import_module("numba.core.errors")
        module = ModuleType(
            spec.name, "numba.core.errors under its old name (see mmpar.compat.mmdet3d017.mends)."
        )
        vars(module).update({k: v for k, v in vars(errors).items() if not k.startswith("__")})
        return module

    def exec_module(self, module: ModuleType) -> None:
        pass


def mend_numba_errors() -> None:
    """Answer ``import numba.errors`` with ``numba.core.errors``' names where numba lacks it."""
    if not any(isinstance(f, _NumbaErrors) for f in sys.meta_path):
        sys.meta_path.append(_NumbaErrors())
