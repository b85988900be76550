"""Interoperation with mmcv 1.x and the codebases built on it (mmdet 2.x, mmseg 0.x).

* mmcv's ``DataContainer`` instances are adopted by the core as they come
  (:func:`mmpar.data_container.as_container`), with or without a patch.
* Wrappers registered on either side are recognised by both sides' checkpoint
  code (mmpar's registry joins mmcv's as soon as mmcv loads it).
* :func:`patch_mmcv` (or ``python -m mmpar.compat.run SCRIPT ...``) makes an
  unmodified codebase import mmpar wherever it imports ``mmcv.parallel``.

mmpar never imports mmcv, except inside :func:`patch_mmcv`.
"""

from mmpar.compat.patch import is_patched, patch_mmcv
from mmpar.compat.wrappers_link import watch_mmcv_registry

__all__ = ["is_patched", "patch_mmcv"]

watch_mmcv_registry()
