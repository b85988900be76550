"""mmdet3d 0.17.x and 0.18.x without their compiled ops (mmpar's stand-ins, and mends).

mmdet3d before 1.0 compiles 11 extension modules of its own (sparse convolution, 3D
IoU and NMS, voxelization, RoI-aware pooling, points in boxes, and the PointNet++
sampling and grouping ops); six include ``THC/THC.h``, which torch 1.11 removed, so
they no longer build. :func:`mend_mmdet3d017` (called by
:func:`mmpar.compat.patch_mmcv`) supplies them on mmpar's 3D ops and mends the rest
that stops these versions, and the mmdet and mmseg they pin, on today's stack:

* :mod:`.mount`: the import finder; :mod:`.spconv_ext`, :mod:`.boxes_ext`,
  :mod:`.voxel_ext`, :mod:`.points_ext`, :mod:`.grouping_ext`: the functions, under
  their pybind names and signatures;
* :mod:`.mends`: the sparse convolutions that mmcv >= 1.4.6 registers too,
  ``naiveSyncBN`` without a process group, ``numba.errors``;
* :mod:`.cpu_wrappers`: the Python wrappers that allocate on CUDA whatever the device;
* :mod:`.old_pins`: mmdet 2.14's and mmseg 0.14's in-place feature pyramids (and HTC's
  semantic head).

numpy's removed aliases are :mod:`mmpar.compat.numpy_aliases`' work. Nothing is
imported until mmdet3d, mmdet or mmseg import these modules.
"""

from __future__ import annotations

from mmpar.compat.mmdet3d017.cpu_wrappers import mend_cpu_wrappers
from mmpar.compat.mmdet3d017.mends import (
    mend_naive_sync_bn,
    mend_numba_errors,
    mend_sparse_conv_registry,
)
from mmpar.compat.mmdet3d017.mount import EXTENSIONS, mount
from mmpar.compat.mmdet3d017.old_pins import mend_old_pins

__all__ = ["EXTENSIONS", "mend_mmdet3d017"]


def mend_mmdet3d017() -> None:
    """Supply mmdet3d 0.17's compiled modules and mend its imports (idempotent)."""
    mount()
    mend_sparse_conv_registry()
    mend_numba_errors()
    mend_cpu_wrappers()
    mend_naive_sync_bn()
    mend_old_pins()
