"""Interoperation with mmcv 1.x and the codebases built on it (mmdet 2.x, mmseg 0.x).

* mmcv's ``DataContainer`` instances are adopted by the core as they come
  (:func:`mmpar.data_container.as_container`), with or without a patch.
* Wrappers registered on either side are recognised by both sides' checkpoint
  code (mmpar's registry joins mmcv's as soon as mmcv loads it).
* :func:`patch_mmcv` (or ``python -m mmpar.compat.run SCRIPT ...``) makes an
  unmodified codebase import mmpar wherever it imports ``mmcv.parallel``, and
  (:func:`supply_mmcv_ops`) gives it mmpar's ops (:mod:`mmpar.compat.ops`, on
  torchvision and torch) as ``mmcv.ops`` where mmcv's compiled ops do not load.

mmpar never imports mmcv, except inside :func:`patch_mmcv`.
"""

from mmpar.compat.mmcv_ops import MissingOpError, ops_in_use, supply_mmcv_ops
from mmpar.compat.patch import is_patched, patch_mmcv
from mmpar.compat.wrappers_link import watch_mmcv_registry

__all__ = ["MissingOpError", "is_patched", "ops_in_use", "patch_mmcv", "supply_mmcv_ops"]

watch_mmcv_registry()
