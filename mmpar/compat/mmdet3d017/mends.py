"""What else stops mmdet3d 0.17.x / 0.18.x on today's stack, mended (not an mmdet3d module).

* Sparse convolutions registered twice. mmdet3d 0.17's ``mmdet3d/ops/spconv/conv.py``
  registers ``SparseConv3d``, ``SubMConv3d``, ... in mmcv's ``CONV_LAYERS``; mmcv >= 1.4.6
  (and mmpar's ``mmcv.ops``, which are mmcv 1.7.2's) registers the same names first, and
  mmcv's registry refuses the second ("already registered"). Right before that module
  runs, the names it registers are taken out of ``CONV_LAYERS`` where they hold a class
  of another module, so mmdet3d's own layers (on its own ``SparseConvTensor``) are the
  ones its configs build, as on the mmcv it was made for.
* ``NaiveSyncBatchNorm1d/2d`` (``naiveSyncBN1d/2d``, the norm of the nuScenes and Lyft
  PointPillars, SSN and RegNet configs) ask ``torch.distributed`` for its world size
  without checking that a process group exists, which fails in a single process
  (mmdet3d 1.0 checks ``dist.is_initialized()`` first). Without a process group the
  mended ``forward`` is the plain batch norm's, as with a world of one.
* ``numba.errors``, which numba 0.49 moved to ``numba.core.errors`` and later releases
  dropped: ``import numba.errors`` (mmdet3d 0.17's ``data_augment_utils``) gets a module
  holding ``numba.core.errors``' names, where numba has no ``numba.errors`` of its own.
"""

from __future__ import annotations

import functools
import inspect
import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Optional, Sequence

from mmpar.compat.import_hook import on_import
from mmpar.compat.mmdet3d017.mount import before_import

__all__ = [
    "NORM_MODULE",
    "SPARSE_CONV_NAMES",
    "SPCONV_CONV_MODULE",
    "free_sparse_conv_names",
    "mend_naive_sync_bn",
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
#: The module of mmdet3d 0.17's ``NaiveSyncBatchNorm1d/2d``.
NORM_MODULE = "mmdet3d.ops.norm"


def _mend_norms(module: ModuleType) -> None:
    for name in ("NaiveSyncBatchNorm1d", "NaiveSyncBatchNorm2d"):
        cls = getattr(module, name, None)
        if cls is None or getattr(cls.forward, "__mmpar_mended__", False):
            continue
        if "is_initialized" in inspect.getsource(inspect.unwrap(cls.forward)):
            continue  # mmdet3d >= 1.0 checks for a process group itself
        forward, base = cls.forward, cls.__mro__[1]

        @functools.wraps(forward)
        def mended(self: Any, input: Any, _forward: Any = forward, _base: Any = base) -> Any:
            import torch.distributed as dist

            if not (dist.is_available() and dist.is_initialized()):
                return _base.forward(self, input)
            return _forward(self, input)

        mended.__mmpar_mended__ = True  # type: ignore[attr-defined]
        cls.forward = mended


def mend_naive_sync_bn() -> None:
    """Make ``naiveSyncBN1d/2d`` a plain batch norm where no process group exists."""
    on_import(NORM_MODULE, _mend_norms)


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
        from numba.core import errors

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
