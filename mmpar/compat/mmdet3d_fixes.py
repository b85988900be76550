"""mmdet3d 1.0 on mmpar's ops: its sparse convolutions are ``mmcv.ops``' where mmpar's serve.

mmdet3d 1.0 (``mmdet3d/ops/spconv/__init__.py``) prefers spconv 2 to ``mmcv.ops``
for its sparse convolutions whenever the ``spconv`` package imports:
``register_spconv2()`` registers spconv's layers over mmcv's in mmcv's
``CONV_LAYERS``, and its sparse encoders, U-Net and Part-A2 head then import
``SparseConvTensor`` and ``SparseSequential`` from ``spconv.pytorch``. spconv 2's
layers run on CUDA only (on the CPU they ask torch for a CUDA stream), and where
mmpar's ops serve ``mmcv.ops`` they are not the ops the user chose.

:func:`mend_mmdet3d` (called by :func:`mmpar.compat.patch_mmcv`) makes that choice
answer "no spconv 2" where mmpar's ops serve ``mmcv.ops``, so that mmdet3d builds its
sparse layers from ``mmcv.ops`` as it does without spconv; where mmcv's own compiled
ops serve, or ``$MMPAR_MMDET3D_SPCONV=1``, mmdet3d chooses as it does on its own. It
imports nothing: it acts when mmdet3d's module is imported.

mmdet3d's other needs on today's Python are met elsewhere: the numpy names it reads
(``np.int``, ``np.bool``) by :mod:`mmpar.compat.numpy_aliases`, its mmcv <= 1.7.0
gate by ``python -m mmpar.compat.install --target DIR mmdet3d`` (mmcv 1.7.0 in a
folder of its own), and its numba 0.53 pin by that installer's choice of a numba
for the installed numpy (mmdet3d uses ``numba.core``, which newer numba keeps).
"""

from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import Any, Callable

from mmpar.compat.import_hook import on_import
from mmpar.compat.mmcv_ops import ops_in_use

__all__ = ["SPCONV_ENV_VAR", "SPCONV_MODULE", "mend_mmdet3d", "uses_spconv2"]

#: The module whose ``register_spconv2`` decides whether mmdet3d uses spconv 2.
SPCONV_MODULE = "mmdet3d.ops.spconv.overwrite_spconv.write_spconv2"
#: ``1``: let mmdet3d use spconv 2 (where it imports) even where mmpar's ops serve mmcv.ops.
SPCONV_ENV_VAR = "MMPAR_MMDET3D_SPCONV"


def uses_spconv2() -> bool:
    """Whether mmdet3d may choose spconv 2 over ``mmcv.ops``' sparse convolutions here."""
    return os.environ.get(SPCONV_ENV_VAR) == "1" or ops_in_use() != "mmpar"


def _mend_register(module: ModuleType) -> None:
    """Make the module's ``register_spconv2`` register nothing unless :func:`uses_spconv2`."""
    register: Callable[[], Any] = module.register_spconv2
    if getattr(register, "__mmpar_mended__", False):
        return

    @functools.wraps(register)
    def register_spconv2() -> Any:
        return register() if uses_spconv2() else False

    register_spconv2.__mmpar_mended__ = True  # type: ignore[attr-defined]
    module.register_spconv2 = register_spconv2


def mend_mmdet3d() -> None:
    """Mend mmdet3d's choice of sparse convolutions when (or if already) it is imported."""
    on_import(SPCONV_MODULE, _mend_register)
